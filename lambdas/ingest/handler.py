"""Kinesis-triggered ingest Lambda: append each batch of one shard to the S3 log.

Thin on purpose: parse the event with Powertools, call LogWriter.append, map the
outcome. Success is returned only after the commit. Any failure raises, so the
whole batch is delivered again (the writer drops what was already committed and
adopts what a crashed attempt left); partial batch responses are not used
because a batch is committed all or nothing.
"""

from __future__ import annotations

import binascii
from typing import Any

from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.data_classes import KinesisStreamEvent
from aws_lambda_powertools.utilities.typing import LambdaContext

from lambdas.entry import Handler, LazyHandler
from lambdas.observability import instrumented, logger, metrics
from shardlog import constants as C
from shardlog.aws import Clients
from shardlog.clock import Clock
from shardlog.exceptions import (
    CommitConflictError,
    ConfigurationError,
    LeaseHeldError,
    LeaseLostError,
)
from shardlog.format import IncomingRecord
from shardlog.function_settings import IngestSettings
from shardlog.idempotence import MAGIC as ENVELOPE_MAGIC
from shardlog.writer import LogWriter


def to_incoming(event: KinesisStreamEvent) -> tuple[str, list[IncomingRecord]]:
    """The shard id and the records of one Kinesis event, in order.

    Reads the event's own dicts (the shape Powertools' KinesisStreamRecordPayload reads):
    a wrapper object per field access cost a quarter of the handler's time per batch. A
    record without an idempotence envelope (most) is built directly; one with goes through
    ``IncomingRecord.from_kinesis``, which opens it (a call per record cost 0.12 ms a batch).
    """
    records = event.raw_event.get("Records") or []
    if not records:
        return "", []
    shard_id = records[0]["eventID"].split(":", 1)[0]
    incoming: list[IncomingRecord] = []
    append, record_of = incoming.append, IncomingRecord
    for record in records:
        payload = record["kinesis"]
        data = binascii.a2b_base64(payload["data"])  # base64.b64decode, minus its wrapper
        fields = (
            payload["partitionKey"],
            data,
            payload["sequenceNumber"],
            round(payload["approximateArrivalTimestamp"] * 1000),
        )
        if data.startswith(ENVELOPE_MAGIC):
            append(record_of.from_kinesis(*fields))
        else:
            append(record_of(*fields))
    return shard_id, incoming


def stream_of(event: KinesisStreamEvent) -> str | None:
    """The ARN of the stream the event's records come from (``eventSourceARN``): the
    writer lists its shards when a resent record's partition has no lineage recorded yet."""
    records = event.raw_event.get("Records") or []
    return records[0].get("eventSourceARN") if records else None


def check_lease_outlasts_invocation(lease_duration_ms: int, context: LambdaContext) -> None:
    """Refuse to write when this invocation may outlive the lease it is about to take.

    The stack keeps the lease at least twice the function timeout, but the timeout or the
    variable can be changed outside it (the console, another template). A lease that expires
    mid-batch is safe (every commit is fenced) yet never makes progress: another invocation
    takes the lease, fences this one, and the shard stalls retrying. Fail loudly instead.
    """
    remaining_ms = context.get_remaining_time_in_millis()
    if lease_duration_ms < remaining_ms:
        metrics.add_metric(C.METRIC_LEASE_TOO_SHORT, MetricUnit.Count, 1)
        raise ConfigurationError(
            f"{C.ENV_LEASE_DURATION_MS}={lease_duration_ms} is shorter than this invocation "
            f"may still run ({remaining_ms} ms): set it to at least twice the function "
            "timeout (the stack does: shardlog:leaseDurationMs), or lower the timeout"
        )


def create_handler(
    settings: IngestSettings | None = None,
    clients: Clients | None = None,
    clock: Clock | None = None,
) -> Handler:
    """Build the handler; the local runtime and tests inject settings, clients and clock."""
    settings = settings or IngestSettings.from_env()
    writer = LogWriter(clients or Clients(), settings.writer_settings(), clock=clock)

    def handle(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
        check_lease_outlasts_invocation(settings.lease_duration_ms, context)
        parsed = KinesisStreamEvent(event)
        shard_id, records = to_incoming(parsed)
        if not records:
            return {"batchItemFailures": []}
        logger.append_keys(shard_id=shard_id)
        owner = f"ingest:{context.aws_request_id}"
        try:
            result = writer.append(shard_id, records, owner=owner, stream=stream_of(parsed))
        except LeaseHeldError as exc:
            logger.warning("ingest lease held elsewhere; batch will be retried", owner=exc.owner)
            metrics.add_metric(C.METRIC_LEASE_HELD, MetricUnit.Count, 1)
            raise
        except (LeaseLostError, CommitConflictError) as exc:
            # Another writer took the lease or committed first: the fence worked and nothing
            # of this batch counts. Rare and harmless alone; sustained, it means two writers
            # keep overtaking each other (a lease shorter than a batch, two mappings).
            logger.warning("commit fenced; batch will be retried", reason=str(exc))
            metrics.add_metric(C.METRIC_COMMIT_FENCED, MetricUnit.Count, 1)
            raise
        except Exception:
            logger.exception("batch not committed; it will be retried")
            metrics.add_metric(C.METRIC_BATCH_FAILED, MetricUnit.Count, 1)
            raise
        metrics.add_metric(C.METRIC_RECORDS_INGESTED, MetricUnit.Count, result.committed)
        metrics.add_metric(C.METRIC_RECORDS_REDELIVERED, MetricUnit.Count, result.redelivered)
        metrics.add_metric(C.METRIC_RECORDS_DEDUPLICATED, MetricUnit.Count, result.deduplicated)
        if result.resent_unchecked:
            logger.warning(
                "the look-up of resent records stopped at its limits before the window's "
                "start: resent records not found were kept",
                kept=result.resent_unchecked,
            )
            metrics.add_metric(C.METRIC_RESENT_UNCHECKED, MetricUnit.Count, result.resent_unchecked)
        metrics.add_metric(C.METRIC_SEGMENTS_WRITTEN, MetricUnit.Count, result.segments_written)
        metrics.add_metric(C.METRIC_SEGMENTS_ADOPTED, MetricUnit.Count, result.segments_adopted)
        logger.info(
            "batch committed",
            first_seq=result.first_seq,
            next_seq=result.next_seq,
            received=result.received,
            redelivered=result.redelivered,
            segments=result.segments_written + result.segments_adopted,
        )
        return {"batchItemFailures": []}

    return instrumented(handle)


handler = LazyHandler(create_handler)
"""The Lambda entry point."""
