"""Storage: encryption everywhere, TLS-only buckets, blocked public access, PITR, retention."""

from __future__ import annotations

from typing import Any

from aws_cdk.assertions import Match, Template

from shardlog import constants as C
from tests.infra.cdk_synth import Synthesized


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
            "RetentionPeriodHours": 24,
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
