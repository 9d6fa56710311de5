"""Analytics: EMR Serverless on the pinned Spark minor, auto-stop, capped; scripts and the
dependency archive deployed; one schedule per job invoking a least-privilege trigger."""

from __future__ import annotations

import json
import re
import tarfile
import tomllib
from pathlib import Path
from typing import Any

import pytest
from aws_cdk import App, Aspects, Stack
from aws_cdk import aws_iam as iam
from aws_cdk.assertions import Template
from cdk_nag import AwsSolutionsChecks

from infra import constants as IC
from infra.analytics import Analytics
from infra.settings import AnalyticsSettings, SettingsError, StackSettings
from infra.storage import Storage
from shardlog import constants as C
from shardlog.spark import jobs
from tests.infra.cdk_synth import REPO_ROOT, Synthesized, cdk_context, logical_id, synthesize
from tests.infra.test_cdk_nag import unacknowledged_findings

# Spark shipped by each EMR Serverless release we may pin (EMR Serverless release notes).
EMR_SPARK_VERSIONS = {
    "emr-7.1.0": "3.5.0",
    "emr-7.3.0": "3.5.1",
    "emr-7.5.0": "3.5.2",
    "emr-7.7.0": "3.5.3",
    "emr-7.8.0": "3.5.4",
    "emr-7.9.0": "3.5.5",
}


def _application(template: Template) -> dict[str, Any]:
    (app,) = template.find_resources("AWS::EMRServerless::Application").values()
    return app["Properties"]  # type: ignore[no-any-return]


def _pyspark_requirements() -> list[str]:
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    requirements = list(project.get("dependencies", []))
    for extra in project.get("optional-dependencies", {}).values():
        requirements += extra
    return [r for r in requirements if re.match(r"pyspark\b", r)]


def test_release_label_ships_the_pinned_spark_minor(template: Template) -> None:
    props = _application(template)
    assert props["Type"] == "SPARK"
    assert props["ReleaseLabel"] == C.EMR_RELEASE_LABEL
    assert EMR_SPARK_VERSIONS[C.EMR_RELEASE_LABEL].startswith(f"{IC.EMR_SPARK_MINOR}.")


def test_local_pyspark_pin_matches_emr_spark_minor() -> None:
    pins = _pyspark_requirements()
    if not pins:
        pytest.skip("pyproject.toml pins no pyspark yet (the Spark jobs bring it)")
    for pin in pins:
        assert re.search(rf"(==|~=|>=)\s*{re.escape(IC.EMR_SPARK_MINOR)}(\.|\b)", pin), pin


def test_application_auto_stops_and_is_capped(template: Template) -> None:
    props = _application(template)
    assert props["AutoStartConfiguration"] == {"Enabled": True}
    assert props["AutoStopConfiguration"] == {
        "Enabled": True,
        "IdleTimeoutMinutes": IC.EMR_IDLE_TIMEOUT_MINUTES,
    }
    assert props["MaximumCapacity"] == {
        "Cpu": IC.EMR_MAX_CPU,
        "Memory": IC.EMR_MAX_MEMORY,
        "Disk": IC.EMR_MAX_DISK,
    }


def test_job_logs_are_encrypted(synth: Synthesized) -> None:
    logs = _application(synth.template)["MonitoringConfiguration"]["S3MonitoringConfiguration"]
    key = synth.stack.analytics.artifacts_key
    key_id = synth.logical_id(key)
    assert logs["EncryptionKeyArn"] == {"Fn::GetAtt": [key_id, "Arn"]}


def test_no_deployment_without_scripts(synth: Synthesized, tmp_path: Path) -> None:
    has_scripts = any((REPO_ROOT / "spark_jobs").rglob("*.py"))
    deployments = synth.resources("Custom::CDKBucketDeployment")
    assert bool(deployments) == has_scripts


@pytest.fixture(scope="module")
def with_scripts(tmp_path_factory: pytest.TempPathFactory) -> Synthesized:
    scripts = tmp_path_factory.mktemp("spark_jobs")
    (scripts / "compact.py").write_text("def main(argv):\n    return 0\n")
    missing = tmp_path_factory.mktemp("no-archive") / jobs.ARCHIVE_NAME
    return synthesize(
        tmp_path_factory.mktemp("cdk.out"),
        job_scripts_dir=scripts,
        # Compaction by volume on here (off in every other synth: the default).
        context=cdk_context(
            **{
                IC.CTX_SPARK_ARCHIVE: str(missing),
                IC.CTX_COMPACT_AFTER_RECORDS: "50000",
                IC.CTX_COMPACT_AFTER_BYTES: str(64 << 20),
            }
        ),
    )


def test_scripts_deploy_to_the_artifacts_prefix(with_scripts: Synthesized) -> None:
    (deployment,) = with_scripts.resources("Custom::CDKBucketDeployment").values()
    artifacts = with_scripts.stack.analytics.artifacts_bucket
    bucket_id = with_scripts.logical_id(artifacts)
    props = deployment["Properties"]
    assert props["DestinationBucketName"] == {"Ref": bucket_id}
    assert props["DestinationBucketKeyPrefix"] == IC.JOB_SCRIPTS_PREFIX
    assert props["Prune"] is True


def test_scripts_deployment_keeps_nag_clean(with_scripts: Synthesized) -> None:
    assert unacknowledged_findings(with_scripts.stack) == []


def test_scheduler_grant_is_scoped_and_acknowledged() -> None:
    # A stack of its own: the session stack must not change under the other tests.
    app = App(context=cdk_context())
    stack = Stack(app, "GrantProbe")
    analytics = Analytics(
        stack, "Analytics", storage=Storage(stack, "Storage", settings=StackSettings())
    )
    scheduler = iam.Role(
        stack, "Scheduler", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com")
    )
    analytics.grant_start_job_run(scheduler)
    Aspects.of(app).add(AwsSolutionsChecks())
    template = Template.from_stack(stack)
    (policy,) = [
        p["Properties"]
        for p in template.find_resources("AWS::IAM::Policy").values()
        if {"Ref": logical_id(scheduler)} in p["Properties"]["Roles"]
    ]
    statements = policy["PolicyDocument"]["Statement"]
    (pass_role,) = [s for s in statements if s["Action"] == "iam:PassRole"]
    assert pass_role["Condition"] == {
        "StringEquals": {"iam:PassedToService": "emr-serverless.amazonaws.com"}
    }
    for statement in statements:
        assert "*" not in statement["Resource"]
    scheduler_findings = [f for f in unacknowledged_findings(stack) if "/Scheduler/" in f]
    assert scheduler_findings == []


# --- the scheduled trigger and the dependency archive ----------------------------------------
@pytest.fixture(scope="module")
def with_archive(tmp_path_factory: pytest.TempPathFactory) -> Synthesized:
    """The stack as `make spark-archive && cdk deploy` builds it (a stand-in archive)."""
    archive = tmp_path_factory.mktemp("build") / jobs.ARCHIVE_NAME
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(REPO_ROOT / "shardlog" / "format.py", arcname="shardlog/format.py")
    return synthesize(
        tmp_path_factory.mktemp("cdk.out"),
        # Compaction by volume left at its default (off), unlike the test stack's.
        context=cdk_context(
            **{IC.CTX_SPARK_ARCHIVE: str(archive), IC.CTX_COMPACT_AFTER_RECORDS: None}
        ),
    )


def _cfn_id(resource: Any) -> str:
    return str(Stack.of(resource).resolve(resource.logical_id))


def _policy_statements(synth: Synthesized, role: Any) -> list[dict[str, Any]]:
    role_id = synth.logical_id(role)
    return [
        statement
        for policy in synth.resources("AWS::IAM::Policy").values()
        if {"Ref": role_id} in policy["Properties"]["Roles"]
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
    ]


def _trigger_env(synth: Synthesized) -> dict[str, Any]:
    function = synth.resources("AWS::Lambda::Function")[
        synth.logical_id(synth.stack.analytics.trigger.function)
    ]
    return dict(function["Properties"]["Environment"]["Variables"])


def test_archive_deploys_beside_the_scripts_and_reaches_the_trigger(
    with_archive: Synthesized,
) -> None:
    analytics = with_archive.stack.analytics
    bucket_id = with_archive.logical_id(analytics.artifacts_bucket)
    (deps,) = [
        d["Properties"]
        for d in with_archive.resources("Custom::CDKBucketDeployment").values()
        if d["Properties"]["DestinationBucketKeyPrefix"] == IC.SPARK_DEPS_PREFIX
    ]
    assert deps["DestinationBucketName"] == {"Ref": bucket_id}
    assert deps["Prune"] is True
    env = _trigger_env(with_archive)
    assert env[C.ENV_SPARK_DEPS_URI] == {
        "Fn::Join": [
            "",
            ["s3://", {"Ref": bucket_id}, f"/{IC.SPARK_DEPS_PREFIX}{jobs.ARCHIVE_NAME}"],
        ]
    }
    assert env[C.ENV_SPARK_JOBS_URI] == {
        "Fn::Join": ["", ["s3://", {"Ref": bucket_id}, f"/{IC.JOB_SCRIPTS_PREFIX}"]]
    }
    assert env[C.ENV_EMR_APPLICATION_ID] == {
        "Fn::GetAtt": [_cfn_id(analytics.application), "ApplicationId"]
    }
    assert env[C.ENV_EMR_EXECUTION_ROLE_ARN] == {
        "Fn::GetAtt": [with_archive.logical_id(analytics.execution_role), "Arn"]
    }
    assert env[C.ENV_COMPACTION_MAX_RECORDS] == str(C.DEFAULT_COMPACTION_MAX_RECORDS)


def test_without_the_archive_synth_works_and_warns(with_scripts: Synthesized) -> None:
    analytics = with_scripts.stack.analytics
    assert analytics.deps_archive is None
    assert _trigger_env(with_scripts)[C.ENV_SPARK_DEPS_URI] == ""
    messages = [
        str(entry.data) for entry in analytics.node.metadata if entry.type == "aws:cdk:warning"
    ]
    assert any("make spark-archive" in m for m in messages), messages


def test_one_schedule_per_job_invokes_the_trigger_with_the_schedule_time(
    with_archive: Synthesized,
) -> None:
    analytics = with_archive.stack.analytics
    function_arn = {"Fn::GetAtt": [with_archive.logical_id(analytics.trigger.function), "Arn"]}
    schedules = {
        json.loads(s["Properties"]["Target"]["Input"])["job"]: s["Properties"]
        for s in with_archive.resources("AWS::Scheduler::Schedule").values()
    }
    assert set(schedules) == set(jobs.JOBS)
    assert schedules["compact"]["ScheduleExpression"] == (
        f"rate({IC.DEFAULT_COMPACTION_RATE_MINUTES} minutes)"
    )
    assert schedules["analytics"]["ScheduleExpression"] == (
        f"rate({IC.DEFAULT_ANALYTICS_RATE_MINUTES} minutes)"
    )
    assert schedules["maintain"]["ScheduleExpression"] == (
        f"rate({IC.DEFAULT_MAINTENANCE_RATE_MINUTES} minutes)"
    )
    for job, props in schedules.items():
        target = props["Target"]
        assert target["Arn"] == function_arn
        assert json.loads(target["Input"]) == {
            "job": job,
            "scheduledTime": "<aws.scheduler.scheduled-time>",
        }
        assert target["RoleArn"] == {
            "Fn::GetAtt": [with_archive.logical_id(analytics.scheduler_role), "Arn"]
        }
        assert props["FlexibleTimeWindow"] == {"Mode": "OFF"}


def _listed(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def _grants(synth: Synthesized, role: Any) -> dict[str, list[Any]]:
    """action -> resources, for one role."""
    granted: dict[str, list[Any]] = {}
    for statement in _policy_statements(synth, role):
        for action in _listed(statement["Action"]):
            granted.setdefault(action, []).extend(_listed(statement["Resource"]))
    return granted


def _dead_letter_grants(synth: Synthesized) -> dict[str, list[Any]]:
    analytics = synth.stack.analytics
    key = {"Fn::GetAtt": [synth.logical_id(analytics.artifacts_key), "Arn"]}
    return {
        "sqs:SendMessage": [{"Fn::GetAtt": [synth.logical_id(analytics.dead_letter_queue), "Arn"]}],
        "kms:Decrypt": [key],
        "kms:GenerateDataKey": [key],
    }


def test_scheduler_role_may_only_invoke_the_trigger_and_dead_letter(
    with_archive: Synthesized,
) -> None:
    analytics = with_archive.stack.analytics
    role = with_archive.resources("AWS::IAM::Role")[
        with_archive.logical_id(analytics.scheduler_role)
    ]["Properties"]
    (trust,) = role["AssumeRolePolicyDocument"]["Statement"]
    assert trust["Principal"] == {"Service": "scheduler.amazonaws.com"}
    # Only schedules of shardlog's own group (Scheduler names the group as the source).
    assert trust["Condition"] == {
        "StringEquals": {"aws:SourceAccount": {"Ref": "AWS::AccountId"}},
        "ArnEquals": {
            "aws:SourceArn": {
                "Fn::GetAtt": [_cfn_id(analytics.schedule_group), "Arn"],
            }
        },
    }
    assert _grants(with_archive, analytics.scheduler_role) == {
        "lambda:InvokeFunction": [
            {"Fn::GetAtt": [with_archive.logical_id(analytics.trigger.function), "Arn"]}
        ],
        **_dead_letter_grants(with_archive),
    }


def test_schedules_retry_then_dead_letter(with_archive: Synthesized) -> None:
    analytics = with_archive.stack.analytics
    queue_arn = {"Fn::GetAtt": [with_archive.logical_id(analytics.dead_letter_queue), "Arn"]}
    group = {"Ref": _cfn_id(analytics.schedule_group)}
    schedules = with_archive.resources("AWS::Scheduler::Schedule").values()
    assert schedules
    for schedule in schedules:
        props = schedule["Properties"]
        assert props["GroupName"] == group
        assert props["Target"]["DeadLetterConfig"] == {"Arn": queue_arn}
        assert props["Target"]["RetryPolicy"]["MaximumRetryAttempts"] > 0


def test_trigger_failures_are_retried_then_dead_lettered(with_archive: Synthesized) -> None:
    analytics = with_archive.stack.analytics
    (config,) = with_archive.resources("AWS::Lambda::EventInvokeConfig").values()
    props = config["Properties"]
    assert props["FunctionName"] == {"Ref": with_archive.logical_id(analytics.trigger.function)}
    assert props["MaximumRetryAttempts"] == IC.SPARK_TRIGGER_ASYNC_RETRIES
    assert props["DestinationConfig"] == {
        "OnFailure": {
            "Destination": {
                "Fn::GetAtt": [with_archive.logical_id(analytics.dead_letter_queue), "Arn"]
            }
        }
    }
    queue = with_archive.resources("AWS::SQS::Queue")[
        with_archive.logical_id(analytics.dead_letter_queue)
    ]
    assert queue["Properties"]["KmsMasterKeyId"] == {
        "Fn::GetAtt": [with_archive.logical_id(analytics.artifacts_key), "Arn"]
    }
    assert queue["DeletionPolicy"] == "Retain"


def test_trigger_role_starts_runs_of_this_application_only(with_archive: Synthesized) -> None:
    analytics = with_archive.stack.analytics
    app_arn = {"Fn::GetAtt": [_cfn_id(analytics.application), "Arn"]}
    granted = _grants(with_archive, analytics.trigger.role)
    assert set(granted) == {
        "logs:CreateLogStream",
        "logs:PutLogEvents",
        "xray:PutTraceSegments",
        "xray:PutTelemetryRecords",
        "emr-serverless:StartJobRun",
        "emr-serverless:ListJobRuns",  # to see active runs; it never watches one (GetJobRun)
        "iam:PassRole",
        # its failed invocations go to the dead-letter queue
        "sqs:SendMessage",
        "kms:Decrypt",
        "kms:GenerateDataKey",
    }
    for action, resources in _dead_letter_grants(with_archive).items():
        assert granted[action] == resources, action
    assert granted["emr-serverless:ListJobRuns"] == [app_arn]
    assert app_arn in granted["emr-serverless:StartJobRun"]
    assert granted["iam:PassRole"] == [
        {"Fn::GetAtt": [with_archive.logical_id(analytics.execution_role), "Arn"]}
    ]


def test_execution_role_reads_watermarks_and_heads_and_the_archive(
    with_archive: Synthesized,
) -> None:
    storage, analytics = with_archive.stack.storage, with_archive.stack.analytics
    by_resource: dict[str, set[str]] = {}
    for statement in _policy_statements(with_archive, analytics.execution_role):
        for resource in _listed(statement["Resource"]):
            by_resource.setdefault(json.dumps(resource, sort_keys=True), set()).update(
                _listed(statement["Action"])
            )

    def arn(construct: Any) -> str:
        return json.dumps({"Fn::GetAtt": [with_archive.logical_id(construct), "Arn"]})

    assert by_resource[arn(storage.partitions_table)] == {"dynamodb:Scan"}
    # a caught-up lake table plans over the live set (shardlog/retirement.py): its index only
    live = {"Fn::Join": ["", [json.loads(arn(storage.partitions_table)), f"/index/{C.LIVE_INDEX}"]]}
    assert by_resource[json.dumps(live, sort_keys=True)] == {"dynamodb:Query"}
    assert by_resource[arn(storage.consumers_table)] == {
        "dynamodb:GetItem",
        "dynamodb:PutItem",  # the lake table's "$group" item: its registration as a reader
        "dynamodb:Query",
        "dynamodb:UpdateItem",
    }
    consumers = json.loads(arn(storage.consumers_table))
    for statement in _policy_statements(with_archive, analytics.execution_role):
        if statement["Resource"] == consumers:
            # the lake tables' items only (the raw table's, no table declared here): never
            # an ingest lease or a consumer group's
            assert statement["Condition"]["ForAllValues:StringEquals"] == {
                "dynamodb:LeadingKeys": [C.COMPACTION_GROUP]
            }
    artifacts = {"Fn::GetAtt": [with_archive.logical_id(analytics.artifacts_bucket), "Arn"]}
    deps = json.dumps({"Fn::Join": ["", [artifacts, f"/{IC.SPARK_DEPS_PREFIX}*"]]})
    assert by_resource[deps] == {"s3:GetObject"}


def test_trigger_and_schedules_keep_nag_clean(with_archive: Synthesized) -> None:
    assert unacknowledged_findings(with_archive.stack) == []


def test_schedule_rates_come_from_context() -> None:
    app = App(context=cdk_context(**{IC.CTX_COMPACTION_RATE_MINUTES: "15"}))
    settings = AnalyticsSettings.from_context(app.node)
    assert settings.compaction_rate_minutes == 15
    assert settings.analytics_rate_minutes == IC.DEFAULT_ANALYTICS_RATE_MINUTES
    with pytest.raises(SettingsError, match=IC.CTX_COMPACTION_RATE_MINUTES):
        AnalyticsSettings.from_context(
            App(context=cdk_context(**{IC.CTX_COMPACTION_RATE_MINUTES: "1"})).node
        )


@pytest.mark.parametrize(
    ("minutes", "ok"), [(60, True), (59, False), (10080, True), (10081, False)]
)
def test_maintenance_rate_at_and_past_its_edges(minutes: int, ok: bool) -> None:
    node = App(context=cdk_context(**{IC.CTX_MAINTENANCE_RATE_MINUTES: str(minutes)})).node
    if ok:
        assert AnalyticsSettings.from_context(node).maintenance_rate_minutes == minutes
    else:
        with pytest.raises(SettingsError, match=IC.CTX_MAINTENANCE_RATE_MINUTES):
            AnalyticsSettings.from_context(node)


def test_job_code_and_stack_agree_on_artifact_locations() -> None:
    assert jobs.SCRIPTS_PREFIX == IC.JOB_SCRIPTS_PREFIX
    assert jobs.DEPS_PREFIX == IC.SPARK_DEPS_PREFIX
    assert Path(IC.DEFAULT_SPARK_ARCHIVE).name == jobs.ARCHIVE_NAME
    makefile = (REPO_ROOT / "Makefile").read_text()
    assert f"-m shardlog.spark.archive {IC.DEFAULT_SPARK_ARCHIVE}" in makefile


def test_the_lake_database_and_an_encrypted_enforced_athena_workgroup(
    synth: Synthesized,
) -> None:
    (database,) = synth.resources("AWS::Glue::Database").values()
    assert database["Properties"]["DatabaseInput"]["Name"] == "shardlog"
    (workgroup,) = synth.resources("AWS::Athena::WorkGroup").values()
    config = workgroup["Properties"]["WorkGroupConfiguration"]
    assert config["EnforceWorkGroupConfiguration"] is True
    assert config["EngineVersion"]["SelectedEngineVersion"] == "Athena engine version 3"
    result = config["ResultConfiguration"]
    assert result["EncryptionConfiguration"]["EncryptionOption"] == "SSE_KMS"
    key = synth.logical_id(synth.stack.analytics.artifacts_key)
    assert result["EncryptionConfiguration"]["KmsKey"] == {"Fn::GetAtt": [key, "Arn"]}
    queries = synth.resources("AWS::Athena::NamedQuery").values()
    assert {q["Properties"]["Database"] for q in queries} == {"shardlog"}
    assert len(queries) == 2
    assert all('"shardlog"."events' in q["Properties"]["QueryString"] for q in queries)


# --- compaction by volume ---------------------------------------------------------------------
def _trigger_mappings(synth: Synthesized) -> list[dict[str, Any]]:
    trigger_ref = {"Ref": synth.logical_id(synth.stack.analytics.trigger.function)}
    return [
        m["Properties"]
        for m in synth.resources("AWS::Lambda::EventSourceMapping").values()
        if m["Properties"]["FunctionName"] == trigger_ref
    ]


def test_compaction_by_volume_is_off_by_default(with_archive: Synthesized) -> None:
    analytics = with_archive.stack.analytics
    assert analytics.volume_source is None and _trigger_mappings(with_archive) == []
    env = _trigger_env(with_archive)
    assert C.ENV_COMPACT_AFTER_RECORDS not in env and C.ENV_COMPACT_AFTER_BYTES not in env
    assert "dynamodb:UpdateItem" not in _grants(with_archive, analytics.trigger.role)


def test_compaction_by_volume_feeds_the_partitions_stream_to_the_trigger(
    with_scripts: Synthesized,
) -> None:
    storage = with_scripts.stack.storage
    (mapping,) = _trigger_mappings(with_scripts)
    partitions_id = with_scripts.logical_id(storage.partitions_table)
    assert mapping["EventSourceArn"] == {"Fn::GetAtt": [partitions_id, "StreamArn"]}
    assert mapping["StartingPosition"] == "LATEST"
    assert mapping["MaximumRetryAttempts"] == IC.VOLUME_MAX_RETRY_ATTEMPTS
    env = _trigger_env(with_scripts)
    assert env[C.ENV_COMPACT_AFTER_RECORDS] == "50000"
    assert env[C.ENV_COMPACT_AFTER_BYTES] == str(64 << 20)
    # The counter: UpdateItem on the $compaction group's items of the consumers table only.
    statements = _policy_statements(with_scripts, with_scripts.stack.analytics.trigger.role)
    (update,) = [s for s in statements if "dynamodb:UpdateItem" in _listed(s["Action"])]
    assert _listed(update["Action"]) == ["dynamodb:UpdateItem"]
    assert update["Resource"] == {
        "Fn::GetAtt": [with_scripts.logical_id(storage.consumers_table), "Arn"]
    }
    leading = update["Condition"]["ForAllValues:StringEquals"]["dynamodb:LeadingKeys"]
    assert leading == [C.COMPACTION_GROUP]
    granted = _grants(with_scripts, with_scripts.stack.analytics.trigger.role)
    assert "dynamodb:GetRecords" in granted and "dynamodb:PutItem" not in granted
