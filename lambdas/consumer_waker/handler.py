"""Wakes Lambda consumer groups: the partitions table's stream (a head moved, a partition
ENDED) or the scheduled sweep -> this Lambda -> each group's wake queue (SQS FIFO).

Thin on purpose: parse the event with Powertools, call ``wakes_from_changes`` or
``sweep``, send the wakes. A failure raises: the stream batch is delivered again, or the
next sweep runs; a wake sent twice is deduplicated by SQS and harmless to the runner.
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.data_classes import DynamoDBStreamEvent
from aws_lambda_powertools.utilities.typing import LambdaContext

from lambdas.entry import Handler, LazyHandler
from lambdas.observability import instrumented, logger, metrics
from shardlog import constants as C
from shardlog.aws import Clients
from shardlog.clock import Clock, SystemClock
from shardlog.function_settings import WakerSettings
from shardlog.lambda_consumer.wake import WakeSender, sweep, wakes_from_changes
from shardlog.tables import Tables

SWEEP_BUCKET_MS = 60_000  # sweeps within one minute share their deduplication ids


def create_handler(
    settings: WakerSettings | None = None,
    clients: Clients | None = None,
    clock: Clock | None = None,
) -> Handler:
    settings = settings or WakerSettings.from_env()
    clients = clients or Clients()
    clock = clock or SystemClock()
    sender = WakeSender(clients, settings.queues)
    tables = Tables(clients, settings.tables)
    groups = sorted(settings.queues)

    def handle(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
        if "Records" in event:
            stream = DynamoDBStreamEvent(event)
            changes = [
                (
                    r.dynamodb.old_image if r.dynamodb else None,
                    r.dynamodb.new_image if r.dynamodb else None,
                )
                for r in stream.records
            ]
            wakes = wakes_from_changes(changes, groups)
            source = "stream"
        else:  # the scheduled sweep
            now = clock.now_ms()
            wakes = sweep(tables, groups, now, str(now // SWEEP_BUCKET_MS))
            source = "sweep"
        sent = sender.send(wakes)
        metrics.add_metric(C.METRIC_WAKES_SENT, MetricUnit.Count, sent)
        logger.info("wakes sent", source=source, wakes=sent)
        return {"source": source, "wakes": sent}

    return instrumented(handle)


handler = LazyHandler(create_handler)
"""The Lambda entry point."""
