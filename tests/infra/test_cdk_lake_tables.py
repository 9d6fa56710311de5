"""Declared typed lake tables in the stack (``shardlog:lakeTables``): checked at synth with
one error naming the field, passed to each compaction run through the Spark trigger, and
granted, queried and alarmed per table; a stack without them gains nothing."""

from __future__ import annotations

import json
import tarfile
from typing import Any

import pytest
from aws_cdk import App

from infra import constants as IC
from infra.lake_catalog import MAX_LAKE_TABLES_CHARS, declared_tables, lake_tables_json
from infra.settings import SettingsError
from shardlog import constants as C
from shardlog.function_settings import SparkTriggerSettings
from shardlog.spark import jobs
from tests.infra.cdk_synth import REPO_ROOT, Synthesized, cdk_context, synthesize
from tests.infra.test_cdk_nag import unacknowledged_findings

ORDERS: dict[str, Any] = {
    "name": "orders",
    "schema": {
        "type": "object",
        "required": ["orderId"],
        "properties": {
            "orderId": {"type": "string"},
            "amount": {"type": "number", "format": "decimal", "precision": 10, "scale": 2},
        },
    },
}


def synth_with(tmp_path_factory: pytest.TempPathFactory, **context: Any) -> Synthesized:
    archive = tmp_path_factory.mktemp("build") / jobs.ARCHIVE_NAME
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(REPO_ROOT / "shardlog" / "format.py", arcname="shardlog/format.py")
    return synthesize(
        tmp_path_factory.mktemp("cdk.out"),
        context=cdk_context(**{IC.CTX_SPARK_ARCHIVE: str(archive), **context}),
    )


@pytest.fixture(scope="module")
def declared(tmp_path_factory: pytest.TempPathFactory) -> Synthesized:
    return synth_with(tmp_path_factory, **{IC.CTX_LAKE_TABLES: [ORDERS]})


@pytest.fixture(scope="module")
def undeclared(tmp_path_factory: pytest.TempPathFactory) -> Synthesized:
    return synth_with(tmp_path_factory)


def execution_statements(synth: Synthesized) -> list[dict[str, Any]]:
    role = {"Ref": synth.logical_id(synth.stack.analytics.execution_role)}
    return [
        statement
        for policy in synth.resources("AWS::IAM::Policy").values()
        if role in policy["Properties"]["Roles"]
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
    ]


def glue_tables(synth: Synthesized) -> list[str]:
    (glue,) = [s for s in execution_statements(synth) if "glue:UpdateTable" in s["Action"]]
    return [json.dumps(r) for r in glue["Resource"] if ":table/" in json.dumps(r)]


def trigger_env(synth: Synthesized) -> dict[str, Any]:
    function = synth.resources("AWS::Lambda::Function")[
        synth.logical_id(synth.stack.analytics.trigger.function)
    ]
    return dict(function["Properties"]["Environment"]["Variables"])


def test_declared_tables_reach_each_compaction_run(declared: Synthesized) -> None:
    env = trigger_env(declared)
    assert json.loads(env[C.ENV_LAKE_TABLES]) == [ORDERS]
    # The trigger reads it back (at cold start) and passes it to each run as --lake-tables.
    settings = SparkTriggerSettings.from_env(
        {
            C.ENV_EMR_APPLICATION_ID: "app",
            C.ENV_EMR_EXECUTION_ROLE_ARN: "arn:aws:iam::123456789012:role/r",
            C.ENV_SPARK_JOBS_URI: "s3://artifacts/spark_jobs/",
            C.ENV_SPARK_DEPS_URI: "s3://artifacts/spark_deps/deps.tar.gz",
            C.ENV_BUCKET_NAME: "log-bucket",
            C.ENV_PARTITIONS_TABLE: "partitions",
            C.ENV_CONSUMERS_TABLE: "consumers",
            C.ENV_LAKE_TABLES: env[C.ENV_LAKE_TABLES],
        }
    )
    argv = settings.job_args().to_argv()
    assert [t.name for t in jobs.JobArgs.parse(argv).declared().tables] == ["orders"]


def test_the_spark_role_may_create_and_commit_each_declared_table_only(
    declared: Synthesized, undeclared: Synthesized
) -> None:
    tables = glue_tables(declared)
    assert len(tables) == 3
    assert [t for t in tables if "shardlog/orders" in t and "orders_rejected" not in t]
    assert [t for t in tables if "shardlog/orders_rejected" in t]
    assert len(glue_tables(undeclared)) == 1  # events only


def test_each_declared_table_reads_the_log_as_a_group_of_its_own(
    declared: Synthesized, undeclared: Synthesized
) -> None:
    """The role's consumers-table grant names each lake table's items (its watermark mirror
    and its "$group" registration, shardlog/retirement.py), no other group's."""

    def readers(synth: Synthesized) -> list[list[str]]:
        return [
            s["Condition"]["ForAllValues:StringEquals"]["dynamodb:LeadingKeys"]
            for s in execution_statements(synth)
            if "dynamodb:PutItem" in s["Action"]
        ]

    assert readers(declared) == [[C.COMPACTION_GROUP, f"{C.COMPACTION_GROUP}:orders"]]
    assert readers(undeclared) == [[C.COMPACTION_GROUP]]


def test_rejections_are_published_and_alarmed_per_table(
    declared: Synthesized, undeclared: Synthesized
) -> None:
    (put,) = [
        s for s in execution_statements(declared) if s["Action"] == "cloudwatch:PutMetricData"
    ]
    assert put["Condition"] == {"StringEquals": {"cloudwatch:namespace": C.METRICS_NAMESPACE}}
    assert not [
        s for s in execution_statements(undeclared) if s["Action"] == "cloudwatch:PutMetricData"
    ]
    alarms = [
        a["Properties"]
        for a in declared.resources("AWS::CloudWatch::Alarm").values()
        if a["Properties"].get("MetricName") == C.METRIC_LAKE_RECORDS_REJECTED
    ]
    (alarm,) = alarms
    assert alarm["Namespace"] == C.METRICS_NAMESPACE
    assert alarm["Dimensions"] == [{"Name": C.DIMENSION_LAKE_TABLE, "Value": "shardlog.orders"}]
    assert alarm["Threshold"] == 1 and alarm["AlarmActions"]
    assert not [
        a
        for a in undeclared.resources("AWS::CloudWatch::Alarm").values()
        if a["Properties"].get("MetricName") == C.METRIC_LAKE_RECORDS_REJECTED
    ]


def test_each_declared_table_has_its_named_queries(declared: Synthesized) -> None:
    queries = [
        q["Properties"]["QueryString"]
        for q in declared.resources("AWS::Athena::NamedQuery").values()
    ]
    assert any('"shardlog"."orders"' in q for q in queries)
    assert any('"shardlog"."orders_rejected"' in q and "error_field" in q for q in queries)


def test_declared_tables_keep_nag_clean(declared: Synthesized) -> None:
    assert unacknowledged_findings(declared.stack) == []


def test_a_refused_declaration_fails_synth_naming_the_field() -> None:
    bad = {**ORDERS, "schema": {**ORDERS["schema"], "required": ["nowhere"]}}
    for context in ([bad], json.dumps([bad])):  # cdk.json, or -c as JSON text
        node = App(context=cdk_context(**{IC.CTX_LAKE_TABLES: context})).node
        with pytest.raises(SettingsError, match=r"shardlog:lakeTables\[0\]\.schema: .*nowhere"):
            declared_tables(node)
    node = App(context=cdk_context(**{IC.CTX_LAKE_TABLES: "[oops"})).node
    with pytest.raises(SettingsError, match="shardlog:lakeTables is not JSON"):
        declared_tables(node)


def test_the_declarations_size_at_and_past_its_limit() -> None:
    def sized(chars: int) -> list[dict[str, Any]]:
        tables = [{**ORDERS, "name": f"t{i}", "description": "x"} for i in range(3)]
        spare = chars - len(lake_tables_json(declared_tables(node_of(tables))))
        for table in tables:
            table["description"] += "x" * min(spare, 999)
            spare -= min(spare, 999)
        return tables

    def node_of(tables: list[dict[str, Any]]) -> Any:
        return App(context=cdk_context(**{IC.CTX_LAKE_TABLES: tables})).node

    at_limit = declared_tables(node_of(sized(MAX_LAKE_TABLES_CHARS)))
    assert len(lake_tables_json(at_limit)) == MAX_LAKE_TABLES_CHARS
    with pytest.raises(SettingsError, match=f"at most {MAX_LAKE_TABLES_CHARS}"):
        declared_tables(node_of(sized(MAX_LAKE_TABLES_CHARS + 1)))


def test_no_declaration_is_no_environment_variable(undeclared: Synthesized) -> None:
    assert C.ENV_LAKE_TABLES not in trigger_env(undeclared)
    assert declared_tables(App(context=cdk_context()).node).tables == ()


def test_an_upsert_declaration_is_checked_at_synth_naming_its_key() -> None:
    upsert = {**ORDERS, "mode": "upsert", "key": "orderId"}
    node = App(context=cdk_context(**{IC.CTX_LAKE_TABLES: [upsert]})).node
    (table,) = declared_tables(node).tables
    assert (table.mode, table.key) == ("upsert", "orderId")
    assert json.loads(lake_tables_json(declared_tables(node))) == [upsert]  # reaches each run
    for bad, message in (
        ({**ORDERS, "mode": "upsert"}, "key: mode upsert needs a key"),
        ({**upsert, "key": "amount"}, "key: amount: amount is not required"),
        ({**ORDERS, "key": "orderId"}, "key: only a table of mode upsert has a key"),
    ):
        node = App(context=cdk_context(**{IC.CTX_LAKE_TABLES: [bad]})).node
        with pytest.raises(SettingsError, match=rf"shardlog:lakeTables\[0\]: {message}"):
            declared_tables(node)
