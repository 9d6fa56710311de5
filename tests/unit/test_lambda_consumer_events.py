"""The Kinesis event a Lambda consumer's function gets, and how its answer is read."""

from __future__ import annotations

import base64
import json

import pytest
from aws_lambda_powertools.utilities.batch import (
    BatchProcessor,
    EventType,
    process_partial_response,
)
from aws_lambda_powertools.utilities.data_classes import KinesisStreamEvent
from aws_lambda_powertools.utilities.data_classes.kinesis_stream_event import KinesisStreamRecord

from shardlog.format import LogRecord
from shardlog.lambda_consumer.events import InvokeResult, interpret, kinesis_event

RECORDS = [
    LogRecord(
        "shardId-000000000001",
        40 + i,
        f"k{i}",
        f"v{i}".encode(),
        str(900 + i),
        1_700_000_000_123 + i,
    )
    for i in range(3)
]
ARN = "arn:aws:kinesis:us-east-1:123456789012:stream/shardlog-events"


def event() -> dict:
    return kinesis_event(
        RECORDS, event_source_arn=ARN, region="us-east-1", invoke_identity_arn="me"
    )


def test_the_event_is_lambdas_kinesis_event_with_log_seqs() -> None:
    records = event()["Records"]
    assert [r["kinesis"]["sequenceNumber"] for r in records] == ["40", "41", "42"]
    first = records[0]
    assert first["eventSource"] == "aws:kinesis"
    assert first["eventName"] == "aws:kinesis:record"
    assert first["eventID"] == "shardId-000000000001:40"
    assert first["eventSourceARN"] == ARN
    assert first["kinesis"]["kinesisSchemaVersion"] == "1.0"
    assert first["kinesis"]["approximateArrivalTimestamp"] == pytest.approx(1_700_000_000.123)
    parsed = list(KinesisStreamEvent(event()).records)
    assert [r.kinesis.data_as_bytes() for r in parsed] == [b"v0", b"v1", b"v2"]
    assert [r.kinesis.partition_key for r in parsed] == ["k0", "k1", "k2"]
    json.dumps(event())  # what Invoke sends


def ok(payload: object) -> InvokeResult:
    return InvokeResult(None, json.dumps(payload).encode())


@pytest.mark.parametrize(
    "payload", [None, {}, {"batchItemFailures": []}, {"batchItemFailures": None}, "done"]
)
def test_success(payload: object) -> None:
    assert interpret(ok(payload), RECORDS, partial_responses=True).ok


def test_partial_failure_starts_at_the_first_failed_record_whatever_the_order() -> None:
    answer = interpret(
        ok({"batchItemFailures": [{"itemIdentifier": "42"}, {"itemIdentifier": "41"}]}),
        RECORDS,
        partial_responses=True,
    )
    assert answer.failed_from == 1 and "seq 41" in answer.reason


def test_partial_responses_off_means_a_returned_list_is_ignored() -> None:
    answer = interpret(
        ok({"batchItemFailures": [{"itemIdentifier": "41"}]}), RECORDS, partial_responses=False
    )
    assert answer.ok


@pytest.mark.parametrize(
    ("result", "reason"),
    [
        (InvokeResult("Unhandled", b'{"errorMessage": "boom"}'), "the function failed (Unhandled)"),
        (InvokeResult(None, b"not json {"), "not JSON"),
        (ok({"batchItemFailures": [{"itemIdentifier": "7"}]}), "not a record of the batch"),
        (ok({"batchItemFailures": [{}]}), "has no itemIdentifier"),
        (ok({"batchItemFailures": [{"itemIdentifier": ""}]}), "has no itemIdentifier"),
        (ok({"batchItemFailures": "41"}), "is not a list"),
    ],
)
def test_whole_batch_failures_say_why(result: InvokeResult, reason: str) -> None:
    answer = interpret(result, RECORDS, partial_responses=True)
    assert answer.failed_from == 0
    assert reason in answer.reason


def test_an_unchanged_powertools_kinesis_batch_handler_reads_the_event_and_answers() -> None:
    processor = BatchProcessor(event_type=EventType.KinesisDataStreams)

    def record_handler(record: KinesisStreamRecord) -> None:
        if record.kinesis.data_as_bytes() == b"v1":
            raise ValueError("poison")

    response = process_partial_response(
        event=event(), record_handler=record_handler, processor=processor, context=None
    )
    answer = interpret(ok(response), RECORDS, partial_responses=True)
    assert answer.failed_from == 1
    assert base64.b64decode(event()["Records"][1]["kinesis"]["data"]) == b"v1"
