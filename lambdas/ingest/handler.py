"""Kinesis-triggered ingest Lambda: append each batch of one shard to the S3 log.

Thin on purpose: parse the event with Powertools, call LogWriter.append, map the
outcome. Success is returned only after the commit. Any failure raises, so the
whole batch is delivered again (the writer drops what was already committed and
adopts what a crashed attempt left); partial batch responses are not used
because a batch is committed all or nothing.
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.data_classes import KinesisStreamEvent
from aws_lambda_powertools.utilities.typing import LambdaContext

from lambdas.entry import Handler, LazyHandler
from lambdas.ingest.settings import IngestSettings
from shardlog import constants as C
from shardlog.aws import Clients
from shardlog.clock import Clock
from shardlog.exceptions import LeaseHeldError
from shardlog.format import IncomingRecord
from shardlog.writer import LogWriter

logger = Logger(service=C.POWERTOOLS_SERVICE_NAME)
metrics = Metrics(namespace=C.METRICS_NAMESPACE, service=C.POWERTOOLS_SERVICE_NAME)
tracer = Tracer(service=C.POWERTOOLS_SERVICE_NAME)


def to_incoming(event: KinesisStreamEvent) -> tuple[str, list[IncomingRecord]]:
    """The shard id and the records of one Kinesis event, in order."""
    records = list(event.records)
    if not records:
        return "", []
    shard_id = records[0].event_id.split(":", 1)[0]
    incoming = [
        IncomingRecord(
            partition_key=r.kinesis.partition_key,
            data=r.kinesis.data_as_bytes(),
            kinesis_sequence_number=r.kinesis.sequence_number,
            arrival_ms=round(r.kinesis.approximate_arrival_timestamp * 1000),
        )
        for r in records
    ]
    return shard_id, incoming


def create_handler(
    settings: IngestSettings | None = None,
    clients: Clients | None = None,
    clock: Clock | None = None,
) -> Handler:
    """Build the handler; the local runtime and tests inject settings, clients and clock."""
    writer = LogWriter(
        clients or Clients(), (settings or IngestSettings.from_env()).writer_settings(), clock=clock
    )

    @metrics.log_metrics
    @tracer.capture_lambda_handler(capture_response=False)
    @logger.inject_lambda_context(clear_state=True)
    def handle(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
        # With POWERTOOLS_METRICS_DISABLED (the local runtime) nothing flushes the
        # metric set, so it would grow across invocations: start each one empty.
        metrics.clear_metrics()
        shard_id, records = to_incoming(KinesisStreamEvent(event))
        if not records:
            return {"batchItemFailures": []}
        logger.append_keys(shard_id=shard_id)
        owner = f"ingest:{context.aws_request_id}"
        try:
            result = writer.append(shard_id, records, owner=owner)
        except LeaseHeldError as exc:
            logger.warning("ingest lease held elsewhere; batch will be retried", owner=exc.owner)
            metrics.add_metric(C.METRIC_LEASE_HELD, MetricUnit.Count, 1)
            raise
        except Exception:
            logger.exception("batch not committed; it will be retried")
            metrics.add_metric(C.METRIC_BATCH_FAILED, MetricUnit.Count, 1)
            raise
        metrics.add_metric(C.METRIC_RECORDS_INGESTED, MetricUnit.Count, result.committed)
        metrics.add_metric(C.METRIC_RECORDS_REDELIVERED, MetricUnit.Count, result.redelivered)
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

    return handle


handler = LazyHandler(create_handler)
"""The Lambda entry point."""
