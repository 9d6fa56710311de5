"""Scheduled shard sync: ListShards into the partitions table (lineage, CLOSED, ENDED)."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext

from lambdas.entry import Handler, LazyHandler
from lambdas.observability import instrumented, logger, metrics
from shardlog import constants as C
from shardlog.aws import Clients
from shardlog.function_settings import ShardSyncSettings
from shardlog.shardsync import ShardSync


def create_handler(
    settings: ShardSyncSettings | None = None, clients: Clients | None = None
) -> Handler:
    """Build the handler; tests inject settings and clients."""
    settings = settings or ShardSyncSettings.from_env()
    sync = ShardSync(clients or Clients(), settings.stream_name, settings.tables)

    def handle(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
        result = sync.sync()
        metrics.add_metric(C.METRIC_PARTITIONS_CLOSED, MetricUnit.Count, len(result.closed))
        metrics.add_metric(C.METRIC_PARTITIONS_ENDED, MetricUnit.Count, len(result.ended))
        # Not **result.__dict__: `created` is a LogRecord attribute, and logging refuses an
        # extra key that would overwrite one (KeyError at INFO level, Lambda's default).
        logger.info(
            "shard sync done",
            shards=result.shards,
            partitions_created=result.created,
            partitions_closed=result.closed,
            partitions_ended=result.ended,
        )
        return {"shards": result.shards, "created": result.created, "ended": result.ended}

    return instrumented(handle)


handler = LazyHandler(create_handler)
"""The Lambda entry point."""
