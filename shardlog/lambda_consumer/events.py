"""The event a Lambda consumer's function gets, and what its answer means.

The event is Lambda's Kinesis event, record for record, with the log seq as
``sequenceNumber``: a function written for a Kinesis event source (Powertools'
``BatchProcessor(EventType.KinesisDataStreams)``, say) runs unchanged, and its partial
batch response (``batchItemFailures[].itemIdentifier`` = ``sequenceNumber``) names log seqs.

With a tumbling window (shardlog/lambda_consumer/windows.py) the event also carries what
Lambda's ``KinesisTimeWindowEvent`` does: ``window`` (``start``, ``end``: ISO 8601, UTC),
``state`` (what the window's previous invocation returned; ``{}`` at its start),
``shardId``, ``eventSourceARN``, ``isFinalInvokeForWindow`` and ``isWindowTerminatedEarly``;
the answer must then carry ``state``, a JSON object (``window_state``).

An answer is one of: success; a partial failure from a given record on; or a whole-batch
failure (the function raised or timed out, its result is not JSON, or it names an
``itemIdentifier`` that is missing or not in the batch), with a reason for the log.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from shardlog.format import LogRecord

EVENT_SOURCE = "aws:kinesis"
EVENT_NAME = "aws:kinesis:record"
SCHEMA_VERSION = "1.0"


def kinesis_event_record(
    *,
    shard_id: str,
    partition_key: str,
    sequence_number: str,
    data: bytes,
    arrival_s: float,
    event_source_arn: str | None,
    region: str,
    invoke_identity_arn: str,
) -> dict[str, Any]:
    """One record of Lambda's Kinesis event, as an event source mapping delivers it: the one
    builder of this shape (the runner's events here, the local poller's, the benchmarks')."""
    return {
        "kinesis": {
            "kinesisSchemaVersion": SCHEMA_VERSION,
            "partitionKey": partition_key,
            "sequenceNumber": sequence_number,
            "data": base64.b64encode(data).decode("ascii"),
            "approximateArrivalTimestamp": arrival_s,
        },
        "eventSource": EVENT_SOURCE,
        "eventVersion": "1.0",
        "eventID": f"{shard_id}:{sequence_number}",
        "eventName": EVENT_NAME,
        "invokeIdentityArn": invoke_identity_arn,
        "awsRegion": region,
        "eventSourceARN": event_source_arn,
    }


def kinesis_event(
    records: Sequence[LogRecord], *, event_source_arn: str, region: str, invoke_identity_arn: str
) -> dict[str, Any]:
    """Lambda's Kinesis event for these records of one partition (in log order)."""
    return {
        "Records": [
            kinesis_event_record(
                shard_id=r.partition_id,
                partition_key=r.partition_key,
                sequence_number=str(r.seq),
                data=r.data,
                arrival_s=r.arrival_ms / 1000,
                event_source_arn=event_source_arn,
                region=region,
                invoke_identity_arn=invoke_identity_arn,
            )
            for r in records
        ]
    }


def with_window(
    event: dict[str, Any],
    *,
    window: dict[str, str],
    state: dict[str, Any],
    shard_id: str,
    event_source_arn: str,
    final: bool = False,
    terminated_early: bool = False,
) -> dict[str, Any]:
    """A Kinesis event (``kinesis_event``; no records for a final invocation) with the
    tumbling window's fields, as Lambda's ``KinesisTimeWindowEvent``."""
    return {
        **event,
        "window": window,
        "state": state,
        "shardId": shard_id,
        "eventSourceARN": event_source_arn,
        "isFinalInvokeForWindow": final,
        "isWindowTerminatedEarly": terminated_early,
    }


@dataclass(frozen=True)
class InvokeResult:
    """What an invocation returned: Lambda's FunctionError (None when the function
    returned normally) and the response payload's bytes."""

    function_error: str | None
    payload: bytes
    status_code: int = 200


@dataclass(frozen=True)
class Answer:
    """``failed_from``: the index of the first record to retry (None: all succeeded;
    0: the whole batch failed). ``reason``: why, for the log line."""

    failed_from: int | None
    reason: str = ""

    @property
    def ok(self) -> bool:
        return self.failed_from is None


def interpret(
    result: InvokeResult, records: Sequence[LogRecord], *, partial_responses: bool
) -> Answer:
    """What an invocation's result means for the batch ``records``."""
    if result.function_error is not None:
        return Answer(0, f"the function failed ({result.function_error}): {_excerpt(result)}")
    try:
        body = json.loads(result.payload) if result.payload.strip() else None
    except (ValueError, UnicodeDecodeError):
        return Answer(0, f"the function's result is not JSON: {_excerpt(result)}")
    if not partial_responses:
        return Answer(None)
    failures = body.get("batchItemFailures") if isinstance(body, dict) else None
    if not failures:  # None, [] or absent: Lambda treats all of them as success
        return Answer(None)
    if not isinstance(failures, list):
        return Answer(0, f"batchItemFailures is not a list: {_excerpt(result)}")
    positions = {str(r.seq): i for i, r in enumerate(records)}
    first: int | None = None
    for failure in failures:
        identifier = failure.get("itemIdentifier") if isinstance(failure, dict) else None
        if not isinstance(identifier, str) or not identifier:
            return Answer(0, f"a batchItemFailures entry has no itemIdentifier: {failure!r}")
        if identifier not in positions:
            return Answer(0, f"batchItemFailures names {identifier!r}, not a record of the batch")
        index = positions[identifier]
        first = index if first is None else min(first, index)
    assert first is not None
    return Answer(first, f"the function reported records from seq {records[first].seq} failed")


def window_state(result: InvokeResult) -> dict[str, Any] | None:
    """The ``state`` a successful windowed invocation returned; None when it returned none
    or not a JSON object (Lambda: an answer without ``state`` is a failed invocation)."""
    if result.function_error is not None:
        return None
    try:
        body = json.loads(result.payload) if result.payload.strip() else None
    except (ValueError, UnicodeDecodeError):
        return None
    state = body.get("state") if isinstance(body, dict) else None
    return state if isinstance(state, dict) else None


def _excerpt(result: InvokeResult) -> str:
    return result.payload[:300].decode("utf-8", "replace")
