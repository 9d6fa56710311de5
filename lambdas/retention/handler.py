"""Scheduled record retention: one trim of every partition (shardlog/retention.py)."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext

from lambdas.entry import Handler, LazyHandler
from lambdas.observability import instrumented, logger, metrics
from shardlog import constants as C
from shardlog.aws import Clients
from shardlog.clock import Clock
from shardlog.function_settings import TrimmerSettings
from shardlog.retention import RetentionPolicy, Trimmer


def create_handler(
    settings: TrimmerSettings | None = None,
    clients: Clients | None = None,
    clock: Clock | None = None,
) -> Handler:
    """Build the handler; tests and the local runtime inject settings, clients and clock."""
    settings = settings or TrimmerSettings.from_env()
    policy = RetentionPolicy(settings.days, settings.hold_for_groups)
    trimmer = Trimmer(clients or Clients(), settings.bucket, settings.tables, policy, clock)

    def handle(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
        trims = trimmer.run()
        tagged = sum(len(t.tagged) for t in trims)
        metrics.add_metric(C.METRIC_SEGMENTS_TAGGED_FOR_EXPIRY, MetricUnit.Count, tagged)
        for trim in trims:
            logger.info("trim", partition_id=trim.partition_id, detail=trim.describe())
        return {"horizons": {t.partition_id: t.horizon for t in trims}, "tagged": tagged}

    return instrumented(handle)


handler = LazyHandler(create_handler)
"""The Lambda entry point."""
