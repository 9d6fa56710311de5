"""A Lambda consumer group's runner: its wake queue (SQS FIFO) -> this Lambda -> the group's
function, partition by partition, in log order (docs/CONSUMERS.md, "Lambda consumers").

Thin on purpose: parse the SQS event with Powertools, call ``Runner.run`` for each woken
partition, publish the group's metrics. A wake that raised (an AWS error) is reported in
``batchItemFailures``, and so is every later message of the batch, so SQS FIFO keeps the
wakes of a partition in order; the runner's own outcomes (busy, caught up, ...) are
successes.
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.data_classes import SQSEvent
from aws_lambda_powertools.utilities.typing import LambdaContext

from lambdas.entry import Handler, LazyHandler
from lambdas.observability import instrumented, logger, metrics
from shardlog import constants as C
from shardlog.aws import Clients
from shardlog.clock import Clock
from shardlog.lambda_consumer.invoke import Invoker, LambdaInvoker
from shardlog.lambda_consumer.runner import Runner, RunReport
from shardlog.lambda_consumer.settings import RunnerSettings
from shardlog.lambda_consumer.wake import Wake, WakeSender


def publish(report: RunReport) -> None:
    metrics.add_dimension(C.DIMENSION_CONSUMER_GROUP, report.group)
    metrics.add_metric(C.METRIC_RECORDS_DELIVERED, MetricUnit.Count, report.delivered)
    metrics.add_metric(C.METRIC_BATCHES_FAILED, MetricUnit.Count, report.failed_invocations)
    metrics.add_metric(C.METRIC_RECORDS_TO_ON_FAILURE, MetricUnit.Count, report.sent_to_destination)
    metrics.add_metric(C.METRIC_EVENT_COUNT, MetricUnit.Count, report.event_count)
    metrics.add_metric(C.METRIC_FILTERED_OUT_EVENT_COUNT, MetricUnit.Count, report.filtered_out)
    metrics.add_metric(C.METRIC_DROPPED_EVENT_COUNT, MetricUnit.Count, report.sent_to_destination)
    metrics.add_metric(C.METRIC_CONSUMER_LAG_RECORDS, MetricUnit.Count, report.lag_records)
    metrics.add_metric(C.METRIC_CONSUMER_LAG_MS, MetricUnit.Milliseconds, report.lag_ms)
    if report.trimmed_unread:
        metrics.add_metric(C.METRIC_RECORDS_TRIMMED_UNREAD, MetricUnit.Count, report.trimmed_unread)


def create_handler(
    settings: RunnerSettings | None = None,
    clients: Clients | None = None,
    clock: Clock | None = None,
    *,
    invoker: Invoker | None = None,
) -> Handler:
    """Build the handler; the local runtime and tests inject settings, clients, clock, invoker."""
    settings = settings or RunnerSettings.from_env()
    clients = clients or Clients()
    consumer = settings.consumer
    invoker = invoker or LambdaInvoker(
        clients, consumer.function_name, consumer.function_timeout_ms
    )
    wakes = WakeSender(clients, {consumer.group: settings.wake_queue_url})
    runner = Runner(clients, settings, invoker, wakes, clock=clock)

    def handle(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
        failures: list[dict[str, str]] = []
        for record in SQSEvent(event).records:
            if failures:  # FIFO: nothing after a failed wake, so a partition's wakes stay in order
                failures.append({"itemIdentifier": record.message_id})
                continue
            try:
                wake = Wake.parse(record.body)
                if wake.group != consumer.group:
                    logger.error("a wake for another group; dropped", wake_group=wake.group)
                    continue
                logger.append_keys(group=wake.group, partition_id=wake.partition_id)
                report = runner.run(
                    wake.partition_id,
                    request_id=context.aws_request_id,
                    remaining_ms=context.get_remaining_time_in_millis,
                    head=wake.head,
                )
            except Exception:
                logger.exception("wake failed; SQS delivers it again")
                failures.append({"itemIdentifier": record.message_id})
                continue
            publish(report)
            logger.info("run done", **report.as_dict())
        return {"batchItemFailures": failures}

    return instrumented(handle)


handler = LazyHandler(create_handler)
"""The Lambda entry point."""
