"""Scheduled shard sync: ListShards into the partitions table (lineage, CLOSED, ENDED)."""

from __future__ import annotations

import os
from typing import Any

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext

from shardlog import constants as C
from shardlog.aws import Clients
from shardlog.exceptions import ConfigurationError
from shardlog.shardsync import ShardSync
from shardlog.tables import TableNames

logger = Logger(service=C.POWERTOOLS_SERVICE_NAME)
metrics = Metrics(namespace=C.METRICS_NAMESPACE, service=C.POWERTOOLS_SERVICE_NAME)
tracer = Tracer(service=C.POWERTOOLS_SERVICE_NAME)


def create_sync(clients: Clients | None = None) -> ShardSync:
    missing = [
        name
        for name in (C.ENV_STREAM_NAME, C.ENV_PARTITIONS_TABLE, C.ENV_CONSUMERS_TABLE)
        if not os.environ.get(name)
    ]
    if missing:
        raise ConfigurationError(f"missing environment variables: {', '.join(missing)}")
    return ShardSync(
        clients or Clients(),
        os.environ[C.ENV_STREAM_NAME],
        TableNames(os.environ[C.ENV_PARTITIONS_TABLE], os.environ[C.ENV_CONSUMERS_TABLE]),
    )


_sync: ShardSync | None = None


@metrics.log_metrics
@tracer.capture_lambda_handler
@logger.inject_lambda_context
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    global _sync
    if _sync is None:
        _sync = create_sync()
    result = _sync.sync()
    metrics.add_metric(C.METRIC_PARTITIONS_CLOSED, MetricUnit.Count, len(result.closed))
    metrics.add_metric(C.METRIC_PARTITIONS_ENDED, MetricUnit.Count, len(result.ended))
    logger.info("shard sync done", **result.__dict__)
    return {"shards": result.shards, "created": result.created, "ended": result.ended}
