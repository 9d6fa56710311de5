"""EventBridge Scheduler -> this Lambda -> EMR Serverless StartJobRun, one job per schedule;
and, with compaction by volume on, the partitions table's stream -> this Lambda -> a
compaction run when the backlog passes the threshold.

Thin on purpose: parse the scheduler's input (``{"job": ..., "scheduledTime":
"<aws.scheduler.scheduled-time>"}``), call ``SparkTrigger.trigger``, return what it did.
The trigger starts nothing while a run of the job is active, and its clientToken comes
from the schedule time, so a scheduler retry for the same time never starts a second run.
A stream batch (``Records``) goes to ``VolumeTrigger.on_changes`` (shardlog/spark/volume.py:
one run per threshold crossing); a failure raises, so the batch is delivered again, which
counts nothing twice and resends a claimed start under the same clientToken. A scheduled
compaction run that starts resets the backlog (``scheduled_run_started``).
"""

from __future__ import annotations

from typing import Any, Literal

from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.data_classes import DynamoDBStreamEvent
from aws_lambda_powertools.utilities.parser import BaseModel, Field, parse
from aws_lambda_powertools.utilities.typing import LambdaContext

from lambdas.entry import Handler, LazyHandler
from lambdas.observability import instrumented, logger, metrics
from shardlog import constants as C
from shardlog.aws import Clients
from shardlog.clock import Clock
from shardlog.dal.volume import BacklogCounter
from shardlog.function_settings import SparkTriggerSettings
from shardlog.spark.jobs import COMPACT
from shardlog.spark.trigger import SparkTrigger
from shardlog.spark.volume import VolumeTrigger


class ScheduledJob(BaseModel):
    """The target input of a schedule (infra/analytics.py writes it)."""

    job: Literal["compact", "analytics", "maintain"]
    scheduled_time: str = Field(alias="scheduledTime", min_length=1)


def create_handler(
    settings: SparkTriggerSettings | None = None,
    clients: Clients | None = None,
    clock: Clock | None = None,
) -> Handler:
    """Build the handler; the local runtime, the CLI and tests inject its parts."""
    settings = settings or SparkTriggerSettings.from_env()
    clients = clients or Clients()
    trigger = SparkTrigger(
        clients.client("emr-serverless"),
        settings.target(),
        settings.job_args(clients.endpoint_url),
        clock=clock,
    )
    volume = VolumeTrigger(
        trigger,
        BacklogCounter(clients, settings.tables.consumers),
        settings.volume_threshold(),
    )

    def on_stream(event: dict[str, Any]) -> dict[str, Any]:
        if not volume.threshold.enabled:
            raise ValueError(
                "a partitions-table stream batch, but compaction by volume is off: set "
                f"{C.ENV_COMPACT_AFTER_RECORDS} or {C.ENV_COMPACT_AFTER_BYTES}"
            )
        stream = DynamoDBStreamEvent(event)
        changes = [
            (r.dynamodb.old_image, r.dynamodb.new_image) if r.dynamodb else (None, None)
            for r in stream.records
        ]
        result = volume.on_changes(changes)
        if result.started:
            metrics.add_metric(C.METRIC_SPARK_RUNS_STARTED, MetricUnit.Count, 1)
        logger.info("compaction by volume", **result.as_dict())
        return result.as_dict()

    def handle(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
        if "Records" in event:
            return on_stream(event)
        scheduled = parse(event=event, model=ScheduledJob)
        logger.append_keys(job=scheduled.job, scheduled_time=scheduled.scheduled_time)
        result = trigger.trigger(scheduled.job, scheduled.scheduled_time)
        if result.started:
            metrics.add_metric(C.METRIC_SPARK_RUNS_STARTED, MetricUnit.Count, 1)
            logger.info("job run started", job_run_id=result.job_run_id)
            if scheduled.job == COMPACT and volume.threshold.enabled:
                volume.scheduled_run_started()  # the backlog counts from this run
        else:
            metrics.add_metric(C.METRIC_SPARK_RUNS_SKIPPED, MetricUnit.Count, 1)
            logger.info(
                "a run of this job is active: nothing started", active=result.active_run_ids
            )
        return result.as_dict()

    return instrumented(handle)


handler = LazyHandler(create_handler)
"""The Lambda entry point."""
