"""Least privilege: named actions on named resources, for every role shardlog defines."""

from __future__ import annotations

from typing import Any

import pytest
from aws_cdk import App, Stack
from aws_cdk.assertions import Template

from infra import constants as IC
from infra.consumers import ConsumerGroups
from infra.settings import StackSettings
from infra.storage import Storage
from shardlog import constants as C
from shardlog.dedupe import LOOKUP_ACTIONS
from tests.infra.cdk_synth import Synthesized, cdk_context, logical_id

XRAY_ACTIONS = {"xray:PutTraceSegments", "xray:PutTelemetryRecords"}


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def _statements(template: Template, role_id: str) -> list[dict[str, Any]]:
    """Every statement of the identity policies attached to one role."""
    statements = []
    for policy in template.find_resources("AWS::IAM::Policy").values():
        if {"Ref": role_id} in policy["Properties"].get("Roles", []):
            statements += policy["Properties"]["PolicyDocument"]["Statement"]
    role = template.find_resources("AWS::IAM::Role")[role_id]["Properties"]
    for inline in role.get("Policies", []):
        statements += inline["PolicyDocument"]["Statement"]
    return statements


def _shardlog_roles(synth: Synthesized) -> dict[str, Any]:
    stack = synth.stack
    return {
        "ingest": stack.ingest.ingest.role,
        "shard_sync": stack.ingest.shard_sync.role,
        "producer": stack.producer_api.producer.role,
        "spark": stack.analytics.execution_role,
    }


def _grants(synth: Synthesized, role: Any) -> dict[str, set[str]]:
    """resource (rendered) -> actions, for one role."""
    grants: dict[str, set[str]] = {}
    for statement in _statements(synth.template, synth.logical_id(role)):
        assert statement["Effect"] == "Allow"
        for resource in _as_list(statement["Resource"]):
            key = str(resource)
            grants.setdefault(key, set()).update(_as_list(statement["Action"]))
    return grants


def test_shardlog_roles_name_every_action(synth: Synthesized) -> None:
    for name, role in _shardlog_roles(synth).items():
        for statement in _statements(synth.template, synth.logical_id(role)):
            for action in _as_list(statement["Action"]):
                assert "*" not in action, f"{name} role has wildcard action {action}"


def test_only_xray_gets_a_star_resource(synth: Synthesized) -> None:
    for name, role in _shardlog_roles(synth).items():
        for statement in _statements(synth.template, synth.logical_id(role)):
            if "*" in _as_list(statement["Resource"]):
                assert set(_as_list(statement["Action"])) <= XRAY_ACTIONS, name


def test_no_role_has_wildcard_actions_on_data_resources(synth: Synthesized) -> None:
    storage, ingest = synth.stack.storage, synth.stack.ingest
    data_ids = {
        synth.logical_id(c)
        for c in (
            storage.bucket,
            storage.partitions_table,
            storage.consumers_table,
            storage.stream,
            storage.key,
            ingest.failure_queue,
        )
    }
    for role_id in synth.resources("AWS::IAM::Role"):
        for statement in _statements(synth.template, role_id):
            if not any(i in str(statement["Resource"]) for i in data_ids):
                continue
            for action in _as_list(statement["Action"]):
                assert "*" not in action, f"{role_id}: {action} on {statement['Resource']}"


def test_shardlog_roles_use_no_managed_policies(synth: Synthesized) -> None:
    roles = synth.resources("AWS::IAM::Role")
    for name, role in _shardlog_roles(synth).items():
        assert "ManagedPolicyArns" not in roles[synth.logical_id(role)]["Properties"], name


def test_ingest_role_grants(synth: Synthesized) -> None:
    storage = synth.stack.storage
    grants = _grants(synth, synth.stack.ingest.ingest.role)
    stream = str({"Fn::GetAtt": [synth.logical_id(storage.stream), "Arn"]})
    partitions = str({"Fn::GetAtt": [synth.logical_id(storage.partitions_table), "Arn"]})
    consumers = str({"Fn::GetAtt": [synth.logical_id(storage.consumers_table), "Arn"]})
    events = str(
        {
            "Fn::Join": [
                "",
                [{"Fn::GetAtt": [synth.logical_id(storage.bucket), "Arn"]}, "/events/*"],
            ]
        }
    )
    assert grants[stream] == {
        "kinesis:DescribeStream",
        "kinesis:DescribeStreamSummary",
        "kinesis:GetRecords",
        "kinesis:GetShardIterator",
        "kinesis:ListShards",
    }
    assert grants[events] == {"s3:GetObject", "s3:PutObject"}
    assert grants[partitions] == {"dynamodb:GetItem", "dynamodb:UpdateItem"}
    # The lease is created by an UpdateItem (upsert): no PutItem.
    assert grants[consumers] == {"dynamodb:GetItem", "dynamodb:UpdateItem"}
    # On the bucket itself: listing (of events/ only, test below), nothing else.
    bucket_arn = str({"Fn::GetAtt": [synth.logical_id(storage.bucket), "Arn"]})
    assert grants[bucket_arn] == {"s3:ListBucket"}


def test_ingest_lists_only_the_log_to_find_resent_records(synth: Synthesized) -> None:
    """A batch with records flagged as resent reads the partition's tail: the writer lists
    events/<partition>/ to find where segments start. Without s3:ListBucket that listing is
    AccessDenied on AWS and the shard's batch fails for ever (the IAM replay found it)."""
    bucket = {"Fn::GetAtt": [synth.logical_id(synth.stack.storage.bucket), "Arn"]}
    statements = _statements(synth.template, synth.logical_id(synth.stack.ingest.ingest.role))
    (listing,) = [s for s in statements if "s3:ListBucket" in _as_list(s["Action"])]
    assert listing["Resource"] == bucket
    assert listing["Condition"] == {"StringLike": {"s3:prefix": [C.EVENTS_PREFIX + "*"]}}


def test_ingest_role_grants_what_the_look_up_of_a_resent_record_does(
    synth: Synthesized,
) -> None:
    """The look-up lists segments, reads them and the ancestors' items, and lists the
    stream's shards for lineage shard sync has not recorded (shardlog/dedupe.py)."""
    granted = set().union(*_grants(synth, synth.stack.ingest.ingest.role).values())
    assert set(LOOKUP_ACTIONS) <= granted


def test_shard_sync_role_grants(synth: Synthesized) -> None:
    storage = synth.stack.storage
    grants = _grants(synth, synth.stack.ingest.shard_sync.role)
    stream = str({"Fn::GetAtt": [synth.logical_id(storage.stream), "Arn"]})
    consumers = str({"Fn::GetAtt": [synth.logical_id(storage.consumers_table), "Arn"]})
    assert grants[stream] == {
        "kinesis:GetRecords",
        "kinesis:GetShardIterator",
        "kinesis:ListShards",
    }
    # GetItem: the $ingest checkpoint; BatchGetItem: retirement reads every group's leases.
    assert grants[consumers] == {"dynamodb:GetItem", "dynamodb:BatchGetItem"}
    assert not any("s3:" in a for actions in grants.values() for a in actions)


def test_shard_sync_reads_the_live_set_and_lists_the_groups_from_their_index(
    synth: Synthesized,
) -> None:
    """Shard sync lists the live set (a Query of the live index, never a Scan of the table);
    without dynamodb:Query on the index every run fails on AWS, so no partition is ever
    CLOSED or ENDED and children wait for ever. It creates, moves and retires partitions
    with UpdateItem (no PutItem), and lists the groups with a Scan of the groups index."""
    storage = synth.stack.storage
    grants = _grants(synth, synth.stack.ingest.shard_sync.role)
    table = {"Fn::GetAtt": [synth.logical_id(storage.partitions_table), "Arn"]}
    assert grants[str(table)] == {"dynamodb:GetItem", "dynamodb:UpdateItem"}
    live = str({"Fn::Join": ["", [table, f"/index/{C.LIVE_INDEX}"]]})
    assert grants[live] == {"dynamodb:Query"}
    consumers = {"Fn::GetAtt": [synth.logical_id(storage.consumers_table), "Arn"]}
    groups = str({"Fn::Join": ["", [consumers, f"/index/{C.GROUPS_INDEX}"]]})
    assert grants[groups] == {"dynamodb:Scan"}


def test_producer_role_can_only_put_records(synth: Synthesized) -> None:
    storage = synth.stack.storage
    grants = _grants(synth, synth.stack.producer_api.producer.role)
    stream = str({"Fn::GetAtt": [synth.logical_id(storage.stream), "Arn"]})
    assert grants[stream] == {"kinesis:PutRecords"}  # the handler never uses PutRecord
    key = str({"Fn::GetAtt": [synth.logical_id(storage.key), "Arn"]})
    assert grants[key] == {"kms:GenerateDataKey"}


def test_spark_role_reads_the_log_and_writes_only_its_prefixes(synth: Synthesized) -> None:
    storage = synth.stack.storage
    grants = _grants(synth, synth.stack.analytics.execution_role)
    bucket = {"Fn::GetAtt": [synth.logical_id(storage.bucket), "Arn"]}

    def objects(prefix: str) -> str:
        return str({"Fn::Join": ["", [bucket, f"/{prefix}*"]]})

    assert grants[objects(C.EVENTS_PREFIX)] == {"s3:GetObject"}
    assert grants[objects("analytics/")] == {"s3:GetObject", "s3:PutObject"}  # PUT overwrites
    # The lake table's files: a lost race and maintenance delete, on its prefix only.
    lake = objects("lake/shardlog/")
    assert grants[lake] == {"s3:GetObject", "s3:PutObject", "s3:DeleteObject"}
    assert grants[str(bucket)] == {"s3:ListBucket"}
    partitions = str({"Fn::GetAtt": [synth.logical_id(storage.partitions_table), "Arn"]})
    assert grants[partitions] == {"dynamodb:Scan"}  # the jobs list heads, never read one
    writes = {"s3:PutObject", "s3:DeleteObject"}
    for resource, actions in grants.items():
        if actions & writes and str(bucket) in resource:
            assert resource in (objects("analytics/"), lake), resource


def test_spark_role_may_list_the_bucket_so_a_missing_lake_file_is_a_404(
    synth: Synthesized,
) -> None:
    """pyiceberg's file IO checks that a new metadata file does not exist yet (HeadObject);
    S3 answers 404 for a missing key only to a caller allowed s3:ListBucket on the bucket,
    and that check has no s3:prefix: with the listing limited by prefix, the answer is 403 and
    every lake commit fails on AWS (the IAM replay found it)."""
    bucket = {"Fn::GetAtt": [synth.logical_id(synth.stack.storage.bucket), "Arn"]}
    role = synth.logical_id(synth.stack.analytics.execution_role)
    (listing,) = [
        s for s in _statements(synth.template, role) if "s3:ListBucket" in _as_list(s["Action"])
    ]
    assert listing["Resource"] == bucket
    assert "Condition" not in listing


def test_spark_role_trusts_only_emr_serverless_of_this_account(synth: Synthesized) -> None:
    role = synth.resources("AWS::IAM::Role")[
        synth.logical_id(synth.stack.analytics.execution_role)
    ]["Properties"]
    (statement,) = role["AssumeRolePolicyDocument"]["Statement"]
    assert statement["Principal"] == {"Service": "emr-serverless.amazonaws.com"}
    application = synth.stack.analytics.application
    app_arn = {"Fn::GetAtt": [synth.stack.resolve(application.logical_id), "Arn"]}
    assert statement["Condition"] == {
        "StringEquals": {"aws:SourceAccount": {"Ref": "AWS::AccountId"}},
        # this application's job runs only, not any EMR Serverless application's
        "ArnLike": {"aws:SourceArn": [app_arn, {"Fn::Join": ["", [app_arn, "/*"]]}]},
    }


def _consumer_statements(synth: Synthesized, role: Any) -> list[dict[str, Any]]:
    consumers = {"Fn::GetAtt": [synth.logical_id(synth.stack.storage.consumers_table), "Arn"]}
    return [
        s
        for s in _statements(synth.template, synth.logical_id(role))
        if consumers in _as_list(s["Resource"])
    ]


def _own_items(*groups: str) -> dict[str, Any]:
    return {
        "ForAllValues:StringEquals": {"dynamodb:LeadingKeys": list(groups)},
        "Null": {"dynamodb:LeadingKeys": "false"},
    }


@pytest.mark.parametrize(
    ("role_name", "group"),
    [("ingest", C.INGEST_GROUP), ("shard_sync", C.INGEST_GROUP), ("spark", C.COMPACTION_GROUP)],
)
def test_each_role_touches_only_its_own_consumers_items(
    synth: Synthesized, role_name: str, group: str
) -> None:
    statements = _consumer_statements(synth, _shardlog_roles(synth)[role_name])
    assert statements, role_name
    for statement in statements:
        if role_name == "shard_sync" and _as_list(statement["Action"]) == ["dynamodb:BatchGetItem"]:
            continue  # retirement reads every group's leases (shardlog/retirement.py): no write

        # e.g. Spark may advance the compaction watermark, never an ingest lease
        assert statement["Condition"] == _own_items(group), role_name


def test_ingest_creates_segments_only_with_if_none_match(synth: Synthesized) -> None:
    storage = synth.stack.storage
    events = {
        "Fn::Join": ["", [{"Fn::GetAtt": [synth.logical_id(storage.bucket), "Arn"]}, "/events/*"]]
    }
    puts = [
        s
        for s in _statements(synth.template, synth.logical_id(synth.stack.ingest.ingest.role))
        if "s3:PutObject" in _as_list(s["Action"])
    ]
    assert puts
    for statement in puts:
        assert statement["Resource"] == events
        assert statement["Condition"] == {"Null": {"s3:if-none-match": "false"}}


def _consumer_groups_template(*groups: str) -> tuple[Template, Storage]:
    app = App(context=cdk_context(**{IC.CTX_CONSUMER_GROUPS: list(groups)}))
    stack = Stack(app, "ConsumersOnly")
    settings = StackSettings.from_context(stack.node)
    storage = Storage(stack, "Storage", settings=settings)
    ConsumerGroups(stack, "ConsumerGroups", storage=storage, settings=settings)
    return Template.from_stack(stack), storage


def test_each_consumer_group_gets_a_policy_for_its_own_items() -> None:
    template, storage = _consumer_groups_template("billing", "search")
    policies = {
        p["Properties"]["Description"]: p["Properties"]["PolicyDocument"]["Statement"]
        for p in template.find_resources("AWS::IAM::ManagedPolicy").values()
    }
    assert len(policies) == 2
    consumers = {"Fn::GetAtt": [logical_id(storage.consumers_table), "Arn"]}
    for group in ("billing", "search"):
        (statements,) = [s for d, s in policies.items() if repr(group) in d]
        (leases,) = [s for s in statements if s["Resource"] == consumers]
        assert leases["Condition"] == _own_items(group)
        assert set(leases["Action"]) == {
            "dynamodb:BatchGetItem",
            "dynamodb:GetItem",
            "dynamodb:PutItem",
            "dynamodb:UpdateItem",
        }
        for statement in statements:
            for action in _as_list(statement["Action"]):
                assert "*" not in action and "Delete" not in action, action
            assert not any(a.startswith("s3:Put") for a in _as_list(statement["Action"]))


def test_spark_role_reaches_only_the_lake_database_and_table_in_glue(synth: Synthesized) -> None:
    grants = _grants(synth, synth.stack.analytics.execution_role)
    glue = {r: a for r, a in grants.items() if any(x.startswith("glue:") for x in a)}
    wanted = {"glue:GetDatabase", "glue:GetTable", "glue:CreateTable", "glue:UpdateTable"}
    assert all(actions == wanted for actions in glue.values())
    rendered = " ".join(glue)
    for suffix in (":catalog", ":database/shardlog", ":table/shardlog/events"):
        assert suffix in rendered
    assert len(glue) == 3 and "*" not in rendered
