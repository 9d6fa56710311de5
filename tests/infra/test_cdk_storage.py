"""Storage: encryption everywhere, TLS-only buckets, blocked public access, PITR, retention."""

from __future__ import annotations

import json
from typing import Any

import pytest
from aws_cdk import App, Stack
from aws_cdk.assertions import Match, Template

from infra import constants as IC
from infra.settings import StackSettings
from infra.storage import Storage
from shardlog import constants as C
from tests.infra import cdk_synth
from tests.infra.cdk_synth import Synthesized, cdk_context

BREAK_GLASS = "arn:aws:iam::123456789012:role/shardlog-break-glass"


def _key_ref(synth: Synthesized) -> dict[str, Any]:
    return {"Fn::GetAtt": [synth.logical_id(synth.stack.storage.key), "Arn"]}


def test_every_kms_key_rotates(synth: Synthesized) -> None:
    keys = synth.resources("AWS::KMS::Key")
    assert keys
    for logical_id, key in keys.items():
        assert key["Properties"].get("EnableKeyRotation") is True, logical_id


def test_every_bucket_is_encrypted_private_and_tls_only(synth: Synthesized) -> None:
    buckets = synth.resources("AWS::S3::Bucket")
    policies = synth.resources("AWS::S3::BucketPolicy")
    assert buckets
    for logical_id, bucket in buckets.items():
        props = bucket["Properties"]
        rules = props["BucketEncryption"]["ServerSideEncryptionConfiguration"]
        assert rules[0]["ServerSideEncryptionByDefault"]["SSEAlgorithm"] in ("aws:kms", "AES256")
        assert props["PublicAccessBlockConfiguration"] == {
            "BlockPublicAcls": True,
            "BlockPublicPolicy": True,
            "IgnorePublicAcls": True,
            "RestrictPublicBuckets": True,
        }, logical_id
        statements = [
            s
            for p in policies.values()
            if p["Properties"]["Bucket"] == {"Ref": logical_id}
            for s in p["Properties"]["PolicyDocument"]["Statement"]
        ]
        tls_denies = [
            s
            for s in statements
            if s["Effect"] == "Deny"
            and s["Action"] == "s3:*"
            and s["Principal"] == {"AWS": "*"}
            and s["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
        ]
        assert tls_denies, f"{logical_id} accepts plain HTTP"


def test_log_bucket_uses_the_data_key_and_logs_access(synth: Synthesized) -> None:
    storage = synth.stack.storage
    bucket = synth.resources("AWS::S3::Bucket")[synth.logical_id(storage.bucket)]["Properties"]
    default = bucket["BucketEncryption"]["ServerSideEncryptionConfiguration"][0]
    assert default["ServerSideEncryptionByDefault"] == {
        "SSEAlgorithm": "aws:kms",
        "KMSMasterKeyID": _key_ref(synth),
    }
    assert default["BucketKeyEnabled"] is True
    assert bucket["LoggingConfiguration"]["DestinationBucketName"] == {
        "Ref": synth.logical_id(storage.access_logs_bucket)
    }
    assert bucket["VersioningConfiguration"] == {"Status": "Enabled"}


def test_log_bucket_lifecycle_cleans_leftover_uploads_but_keeps_objects(
    synth: Synthesized,
) -> None:
    storage = synth.stack.storage
    bucket = synth.resources("AWS::S3::Bucket")[synth.logical_id(storage.bucket)]["Properties"]
    rules = bucket["LifecycleConfiguration"]["Rules"]
    assert any(
        r.get("AbortIncompleteMultipartUpload", {}).get("DaysAfterInitiation") for r in rules
    )
    # Committed segments and adoptable leftovers are whole objects: never expired.
    assert not any("ExpirationInDays" in r for r in rules)


def test_tables_pay_per_request_with_pitr_and_kms(synth: Synthesized, template: Template) -> None:
    tables = synth.resources("AWS::DynamoDB::Table")
    assert len(tables) == 2
    for logical_id, table in tables.items():
        props = table["Properties"]
        assert props["BillingMode"] == "PAY_PER_REQUEST", logical_id
        assert props["PointInTimeRecoverySpecification"]["PointInTimeRecoveryEnabled"] is True
        assert props["SSESpecification"] == {
            "SSEEnabled": True,
            "SSEType": "KMS",
            "KMSMasterKeyId": _key_ref(synth),
        }
        assert table["DeletionPolicy"] == "Retain"
        assert props["DeletionProtectionEnabled"] is True


def test_stream_is_kms_encrypted_with_configured_capacity(template: Template) -> None:
    template.has_resource_properties(
        "AWS::Kinesis::Stream",
        {
            "StreamEncryption": {"EncryptionType": "KMS", "KeyId": Match.any_value()},
            "RetentionPeriodHours": IC.DEFAULT_RETENTION_HOURS,
            "ShardCount": 1,
            "StreamModeDetails": {"StreamMode": "PROVISIONED"},
        },
    )


def test_data_resources_are_retained(synth: Synthesized) -> None:
    storage = synth.stack.storage
    resources = synth.json["Resources"]
    for construct in (storage.bucket, storage.partitions_table, storage.consumers_table):
        assert resources[synth.logical_id(construct)]["DeletionPolicy"] == "Retain"


def test_events_prefix_is_what_the_writer_uses() -> None:
    # The ingest grant is on this prefix; a different layout would be denied at runtime.
    assert C.EVENTS_PREFIX == "events/"


def _log_bucket_statements(template: Template, bucket_id: str) -> dict[str, dict[str, Any]]:
    """The log bucket policy's statements by Sid."""
    (policy,) = [
        p["Properties"]["PolicyDocument"]
        for p in template.find_resources("AWS::S3::BucketPolicy").values()
        if p["Properties"]["Bucket"] == {"Ref": bucket_id}
    ]
    return {s["Sid"]: s for s in policy["Statement"] if "Sid" in s}


def _events(bucket_id: str) -> dict[str, Any]:
    return {"Fn::Join": ["", [{"Fn::GetAtt": [bucket_id, "Arn"]}, "/events/*"]]}


def test_log_bucket_refuses_segment_writes_without_if_none_match(synth: Synthesized) -> None:
    bucket_id = synth.logical_id(synth.stack.storage.bucket)
    deny = _log_bucket_statements(synth.template, bucket_id)["DenySegmentWritesWithoutIfNoneMatch"]
    assert deny["Effect"] == "Deny"
    assert deny["Principal"] == {"AWS": "*"}
    assert deny["Action"] == "s3:PutObject"
    assert deny["Resource"] == _events(bucket_id)
    # Absent header (Null true) on a request that creates an object: overwrites, If-Match
    # rewrites and copies onto a segment are all refused; multipart parts are not creations.
    assert deny["Condition"] == {
        "Null": {"s3:if-none-match": "true"},
        "Bool": {"s3:ObjectCreationOperation": "true"},
    }


def test_log_bucket_refuses_segment_deletes_to_everyone(synth: Synthesized) -> None:
    bucket_id = synth.logical_id(synth.stack.storage.bucket)
    deny = _log_bucket_statements(synth.template, bucket_id)["DenySegmentDeletes"]
    assert deny["Effect"] == "Deny"
    assert deny["Principal"] == {"AWS": "*"}
    assert deny["Action"] == "s3:DeleteObject*"  # DeleteObject and DeleteObjectVersion too
    assert deny["Resource"] == _events(bucket_id)
    assert "Condition" not in deny, "no one is exempt without a break-glass role"


def _storage_only(**context: Any) -> tuple[Template, Storage]:
    app = App(context=cdk_context(**context))
    stack = Stack(app, "StorageOnly")
    storage = Storage(stack, "Storage", settings=StackSettings.from_context(stack.node))
    return Template.from_stack(stack), storage


def test_the_break_glass_role_is_the_one_exemption() -> None:
    template, storage = _storage_only(**{IC.CTX_BREAK_GLASS_ROLE_ARN: BREAK_GLASS})
    statements = _log_bucket_statements(template, cdk_synth.logical_id(storage.bucket))
    exempt = {"ArnNotEquals": {"aws:PrincipalArn": BREAK_GLASS}}
    assert statements["DenySegmentDeletes"]["Condition"] == exempt
    overwrite = statements["DenySegmentWritesWithoutIfNoneMatch"]["Condition"]
    assert overwrite["ArnNotEquals"] == exempt["ArnNotEquals"]
    assert overwrite["Null"] == {"s3:if-none-match": "true"}


def test_the_data_key_policy_names_the_roles_that_use_it(synth: Synthesized) -> None:
    stack = synth.stack
    key = synth.resources("AWS::KMS::Key")[synth.logical_id(stack.storage.key)]
    statements = key["Properties"]["KeyPolicy"]["Statement"]
    named = {
        json.dumps(s["Principal"]["AWS"], sort_keys=True): s
        for s in statements
        if s.get("Sid", "").startswith("UseBy")
    }
    roles = {
        "ingest": (stack.ingest.ingest.role, {"kinesis", "s3", "dynamodb", "sqs"}),
        "shard sync": (stack.ingest.shard_sync.role, {"kinesis", "dynamodb"}),
        "producer": (stack.producer_api.producer.role, {"kinesis"}),
        "spark": (stack.analytics.execution_role, {"s3", "dynamodb"}),
    }
    for name, (role, services) in roles.items():
        arn = json.dumps({"Fn::GetAtt": [synth.logical_id(role), "Arn"]}, sort_keys=True)
        assert arn in named, name
        via = named[arn]["Condition"]["StringEquals"]["kms:ViaService"]
        rendered = {json.dumps(v) for v in via}
        assert len(rendered) == len(services), name
        for service in services:
            assert any(f'"{service}.' in r for r in rendered), (name, service)


@pytest.mark.parametrize("construct", ["ingest", "api"])
def test_log_groups_are_encrypted_and_kept(synth: Synthesized, construct: str) -> None:
    stack = synth.stack
    group = {
        "ingest": stack.ingest.ingest.log_group,
        "api": stack.producer_api.access_logs,
    }[construct]
    resource = synth.resources("AWS::Logs::LogGroup")[synth.logical_id(group)]
    logs_key = stack.node.find_child("LogsKey")
    assert resource["Properties"]["KmsKeyId"] == {"Fn::GetAtt": [synth.logical_id(logs_key), "Arn"]}
    assert resource["DeletionPolicy"] == "Retain"
    expected = IC.API_ACCESS_LOG_RETENTION_DAYS if construct == "api" else 30
    assert resource["Properties"]["RetentionInDays"] == expected


def test_every_log_group_is_encrypted(synth: Synthesized) -> None:
    groups = synth.resources("AWS::Logs::LogGroup")
    assert groups
    for logical_id, group in groups.items():
        assert "KmsKeyId" in group["Properties"], logical_id
        assert "RetentionInDays" in group["Properties"], logical_id


def test_logs_key_serves_only_this_accounts_log_groups(synth: Synthesized) -> None:
    logs_key = synth.stack.node.find_child("LogsKey")
    key = synth.resources("AWS::KMS::Key")[synth.logical_id(logs_key)]
    (service,) = [
        s for s in key["Properties"]["KeyPolicy"]["Statement"] if "Service" in s["Principal"]
    ]
    assert "logs." in json.dumps(service["Principal"]["Service"])
    condition = json.dumps(service["Condition"]["ArnLike"]["kms:EncryptionContext:aws:logs:arn"])
    assert ":log-group:*" in condition and "AWS::AccountId" in condition
    assert key["DeletionPolicy"] == "Retain"
