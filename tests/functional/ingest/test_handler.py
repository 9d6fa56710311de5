"""The ingest handler: settings at cold start, the Kinesis event, success only after commit."""

from __future__ import annotations

import base64
from typing import Any

import pytest
from aws_lambda_powertools.utilities.data_classes import KinesisStreamEvent

from lambdas.ingest.handler import create_handler, to_incoming
from lambdas.observability import metrics
from shardlog import constants as C
from shardlog.clock import ManualClock
from shardlog.exceptions import (
    CommitConflictError,
    ConfigurationError,
    LeaseHeldError,
    LeaseLostError,
)
from shardlog.function_settings import IngestSettings
from shardlog.lease import LeaseManager
from shardlog.local.lambda_context import LambdaContext
from shardlog.tables import partition_key
from tests.support.aws import AwsEnv
from tests.support.readback import log_kinesis_seqs

SHARD = "shardId-000000000003"
FIRST_SEQUENCE = 49590338271490256608559692538361571095921575989136588898


def kinesis_event(start: int, count: int) -> dict[str, Any]:
    """The event Lambda sends for a Kinesis batch (shape from the Lambda developer guide)."""
    return {
        "Records": [
            {
                "kinesis": {
                    "kinesisSchemaVersion": "1.0",
                    "partitionKey": f"key-{i % 3}",
                    "sequenceNumber": str(
                        49590338271490256608559692538361571095921575989136588898 + i
                    ),
                    "data": base64.b64encode(f"payload-{i}".encode()).decode(),
                    "approximateArrivalTimestamp": 1545084650.987 + i,
                },
                "eventSource": "aws:kinesis",
                "eventVersion": "1.0",
                "eventID": f"{SHARD}:{FIRST_SEQUENCE + i}",
                "eventName": "aws:kinesis:record",
                "invokeIdentityArn": "arn:aws:iam::123456789012:role/lambda-role",
                "awsRegion": "us-east-1",
                "eventSourceARN": "arn:aws:kinesis:us-east-1:123456789012:stream/shardlog-events",
            }
            for i in range(start, start + count)
        ]
    }


def _settings(aws: AwsEnv, **extra: Any) -> IngestSettings:
    return IngestSettings(
        bucket=aws.config.bucket,
        tables=aws.config.tables,
        **extra,
    )


def test_event_parsing_keeps_order_and_fields() -> None:
    shard, records = to_incoming(KinesisStreamEvent(kinesis_event(0, 3)))
    assert shard == SHARD
    assert [r.data for r in records] == [b"payload-0", b"payload-1", b"payload-2"]
    assert records[0].arrival_ms == 1545084650987
    assert records[1].partition_key == "key-1"


def test_handler_commits_before_reporting_success(aws: AwsEnv) -> None:
    clock = ManualClock()
    handle = create_handler(_settings(aws), aws.fresh_clients(), clock)
    response = handle(kinesis_event(0, 5), LambdaContext("ingest", clock=clock))
    assert response == {"batchItemFailures": []}
    assert len(log_kinesis_seqs(aws, SHARD)) == 5
    # A redelivery of the same batch succeeds and adds nothing.
    handle(kinesis_event(0, 5), LambdaContext("ingest", clock=clock))
    handle(kinesis_event(3, 4), LambdaContext("ingest", clock=clock))
    assert len(log_kinesis_seqs(aws, SHARD)) == 7


def test_handler_fails_the_batch_when_the_lease_is_held(aws: AwsEnv) -> None:
    clock = ManualClock()
    handle = create_handler(_settings(aws), aws.fresh_clients(), clock)
    from shardlog.lease import LeaseManager

    LeaseManager(aws.clients, aws.config.consumers_table, clock=clock).acquire(
        C.INGEST_GROUP, SHARD, "someone-else"
    )
    with pytest.raises(LeaseHeldError):
        handle(kinesis_event(0, 2), LambdaContext("ingest", clock=clock))
    assert log_kinesis_seqs(aws, SHARD) == []


def test_empty_event_is_a_no_op(aws: AwsEnv) -> None:
    handle = create_handler(_settings(aws), aws.fresh_clients())
    assert handle({"Records": []}, LambdaContext("ingest")) == {"batchItemFailures": []}


def test_settings_validated_from_the_environment() -> None:
    env = {
        C.ENV_BUCKET_NAME: "my-bucket",
        C.ENV_PARTITIONS_TABLE: "parts",
        C.ENV_CONSUMERS_TABLE: "cons",
        C.ENV_SEGMENT_MAX_RECORDS: "500",
    }
    settings = IngestSettings.from_env(env)
    assert settings.segment_max_records == 500
    assert settings.lease_duration_ms == C.DEFAULT_LEASE_DURATION_MS
    with pytest.raises(ConfigurationError, match=C.ENV_BUCKET_NAME):
        IngestSettings.from_env({k: v for k, v in env.items() if k != C.ENV_BUCKET_NAME})
    with pytest.raises(ConfigurationError, match=C.ENV_SEGMENT_MAX_RECORDS):
        IngestSettings.from_env({**env, C.ENV_SEGMENT_MAX_RECORDS: "0"})
    with pytest.raises(ConfigurationError, match=C.ENV_LEASE_DURATION_MS):
        IngestSettings.from_env({**env, C.ENV_LEASE_DURATION_MS: "soon"})


def _published(name: str) -> bool:
    """Whether the last invocation added metric ``name`` (tests run with metrics disabled, so
    the set is never flushed; each invocation starts it empty)."""
    return name in metrics.metric_set


def test_a_commit_fenced_by_a_lease_takeover_is_counted_apart(
    aws: AwsEnv, clock: ManualClock
) -> None:
    clients = aws.fresh_clients()
    handle = create_handler(_settings(aws), clients, clock)
    thief = LeaseManager(aws.clients, aws.config.consumers_table, clock=clock)

    def take_over_before_the_commit(**_: Any) -> None:
        # The invocation stalled past its lease; another one took the shard meanwhile.
        clock.advance(C.DEFAULT_LEASE_DURATION_MS + 1)
        thief.acquire(C.INGEST_GROUP, SHARD, "the-next-invocation")

    clients.add_hook("before-call.dynamodb.TransactWriteItems", take_over_before_the_commit)
    with pytest.raises(LeaseLostError):
        handle(kinesis_event(0, 3), LambdaContext("ingest", clock=clock))
    assert _published(C.METRIC_COMMIT_FENCED)
    assert not _published(C.METRIC_BATCH_FAILED)
    assert log_kinesis_seqs(aws, SHARD) == [], "nothing of a fenced batch is committed"


def test_a_commit_fenced_by_a_moved_head_is_counted_apart(aws: AwsEnv, clock: ManualClock) -> None:
    clients = aws.fresh_clients()
    handle = create_handler(_settings(aws), clients, clock)
    handle(kinesis_event(0, 2), LambdaContext("ingest", clock=clock))

    def move_the_head(**_: Any) -> None:
        # Only a foreign writer (never shardlog's own) moves the head without the lease.
        aws.clients.dynamodb.update_item(
            TableName=aws.config.partitions_table,
            Key=partition_key(SHARD),
            UpdateExpression="SET #n = #n + :one",
            ExpressionAttributeNames={"#n": C.ATTR_NEXT_SEQUENCE_NUMBER},
            ExpressionAttributeValues={":one": {"N": "1"}},
        )

    clients.add_hook("before-call.dynamodb.TransactWriteItems", move_the_head)
    with pytest.raises(CommitConflictError):
        handle(kinesis_event(2, 2), LambdaContext("ingest", clock=clock))
    assert _published(C.METRIC_COMMIT_FENCED)
    assert not _published(C.METRIC_BATCH_FAILED)


def test_other_failures_count_as_batch_failed(aws: AwsEnv, clock: ManualClock) -> None:
    settings = _settings(aws).model_copy(update={"bucket": "no-such-bucket-for-this-test"})
    handle = create_handler(settings, aws.fresh_clients(), clock)
    with pytest.raises(Exception, match="NoSuchBucket"):
        handle(kinesis_event(0, 2), LambdaContext("ingest", clock=clock))
    assert _published(C.METRIC_BATCH_FAILED)
    assert not _published(C.METRIC_COMMIT_FENCED)


def test_a_lease_shorter_than_the_invocation_fails_loudly(aws: AwsEnv, clock: ManualClock) -> None:
    handle = create_handler(_settings(aws, lease_duration_ms=30_000), aws.fresh_clients(), clock)
    invocation = LambdaContext("ingest", clock=clock, timeout_ms=60_000)
    with pytest.raises(ConfigurationError, match=f"{C.ENV_LEASE_DURATION_MS}=30000 is shorter"):
        handle(kinesis_event(0, 2), invocation)
    assert _published(C.METRIC_LEASE_TOO_SHORT)
    assert log_kinesis_seqs(aws, SHARD) == [], "refused before any write"
    # The same lease outlasts a shorter invocation: the batch goes in.
    handle(kinesis_event(0, 2), LambdaContext("ingest", clock=clock, timeout_ms=30_000))
    assert not _published(C.METRIC_LEASE_TOO_SHORT)
    assert len(log_kinesis_seqs(aws, SHARD)) == 2
