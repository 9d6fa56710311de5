"""The pipeline's dashboard: throughput, lag, errors, limits, the producer API, Spark and each
Lambda consumer group, with the alarms' states beside them.
"""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import Duration
from aws_cdk import aws_cloudwatch as cw
from constructs import Construct

from infra import constants as IC
from infra.lambda_consumers import LambdaConsumers
from infra.metrics import PERIOD, PipelineMetrics, group_metric, queue_depth, shardlog_metric
from infra.settings import StackSettings
from shardlog import constants as C


class PipelineDashboard:
    """Builds the dashboard in a scope (the Monitoring construct) from the pipeline's metrics."""

    def __init__(
        self,
        metrics: PipelineMetrics,
        settings: StackSettings,
        alarms: Sequence[cw.Alarm],
        lambda_consumers: LambdaConsumers | None,
    ) -> None:
        self.metrics = metrics
        self.settings = settings
        self.alarms = alarms
        self.lambda_consumers = lambda_consumers
        self.storage = metrics.storage
        self.ingest = metrics.ingest
        self.producer_api = metrics.producer_api
        self.analytics = metrics.analytics

    def build(self, scope: Construct) -> cw.Dashboard:
        dashboard = cw.Dashboard(scope, "Dashboard", default_interval=Duration.hours(3))
        for row in (
            self._throughput_row(),
            self._lag_row(),
            self._errors_row(),
            self._limits_row(),
            self._api_row(),
            self._spark_row(),
            *self._lambda_consumer_rows(),
        ):
            dashboard.add_widgets(*row)
        return dashboard

    def _throughput_row(self) -> list[cw.IWidget]:
        stream = self.storage.stream
        return [
            cw.GraphWidget(
                title="Records ingested",
                left=[
                    stream.metric_incoming_records(period=PERIOD, statistic="Sum"),
                    shardlog_metric(C.METRIC_RECORDS_INGESTED),
                ],
                right=[self.metrics.stall()],
                width=12,
            ),
            cw.GraphWidget(
                title="Bytes ingested",
                left=[stream.metric_incoming_bytes(period=PERIOD, statistic="Sum")],
                width=12,
            ),
        ]

    def _lag_row(self) -> list[cw.IWidget]:
        give_up_ms = self.settings.max_record_age_s * 1000
        return [
            cw.GraphWidget(
                title="Ingest iterator age (ms)",
                left=[self.metrics.iterator_age()],
                left_annotations=[
                    cw.HorizontalAnnotation(value=give_up_ms // 2, label="half-way to given up"),
                    cw.HorizontalAnnotation(value=give_up_ms, label="records given up"),
                ],
                width=12,
            ),
            cw.GraphWidget(
                title="Consumer lag per group (records)",
                left=[self.metrics.consumer_lag()],
                width=12,
            ),
        ]

    def _errors_row(self) -> list[cw.IWidget]:
        return [
            cw.GraphWidget(
                title="Errors",
                left=[
                    fn.metric_errors(period=PERIOD, statistic="Sum", label=f"{name} errors")
                    for name, fn in self.metrics.functions().items()
                ]
                + [
                    self.producer_api.api.metric_server_error(period=PERIOD, statistic="Sum"),
                    shardlog_metric(C.METRIC_BATCH_FAILED),
                    shardlog_metric(C.METRIC_LEASE_HELD),
                    shardlog_metric(C.METRIC_LEASE_TOO_SHORT),
                ],
                width=12,
            ),
            cw.GraphWidget(
                title="Commits fenced (lease lost or head moved)",
                left=[shardlog_metric(C.METRIC_COMMIT_FENCED)],
                right=[queue_depth(self.ingest.failure_queue, "failure queue depth")],
                width=12,
            ),
        ]

    def _limits_row(self) -> list[cw.IWidget]:
        """Throttles, time against the timeout, DynamoDB throttling."""
        functions = self.metrics.functions()
        ingest = self.ingest.function
        timeout_ms = IC.INGEST_TIMEOUT_S * 1000
        tables = {
            "partitions": self.storage.partitions_table,
            "consumers": self.storage.consumers_table,
        }
        return [
            cw.GraphWidget(
                title="Lambda throttles",
                left=[
                    fn.metric_throttles(period=PERIOD, statistic="Sum", label=f"{name} throttled")
                    for name, fn in functions.items()
                ],
                width=8,
            ),
            cw.GraphWidget(
                title="Ingest duration vs timeout (ms)",
                left=[ingest.metric_duration(period=PERIOD, statistic="Maximum")],
                left_annotations=[
                    cw.HorizontalAnnotation(value=timeout_ms * 0.8, label="80% of timeout"),
                    cw.HorizontalAnnotation(value=timeout_ms, label="timeout"),
                ],
                width=8,
            ),
            cw.GraphWidget(
                title="DynamoDB throttled requests",
                left=[
                    table.metric(
                        metric,
                        period=PERIOD,
                        statistic="Sum",
                        label=f"{name} {metric}",
                    )
                    for name, table in tables.items()
                    for metric in ("ReadThrottleEvents", "WriteThrottleEvents")
                ],
                width=8,
            ),
        ]

    def _api_row(self) -> list[cw.IWidget]:
        api = self.producer_api.api
        return [
            cw.GraphWidget(
                title="Producer API responses",
                left=[
                    api.metric_count(period=PERIOD, statistic="Sum"),
                    api.metric_client_error(period=PERIOD, statistic="Sum"),
                    api.metric_server_error(period=PERIOD, statistic="Sum"),
                    cw.Metric(
                        namespace=C.METRICS_NAMESPACE,
                        metric_name=IC.METRIC_API_THROTTLED,
                        statistic="Sum",
                        period=PERIOD,
                        label="429 (throttled)",
                    ),
                ],
                width=12,
            ),
            cw.GraphWidget(
                title="Producer API latency (ms)",
                left=[api.metric_latency(period=PERIOD, statistic="p99")],
                width=12,
            ),
        ]

    def _lambda_consumer_rows(self) -> list[list[cw.IWidget]]:
        if self.lambda_consumers is None or not self.lambda_consumers.groups:
            return []
        rows: list[list[cw.IWidget]] = []
        for group, consumer in self.lambda_consumers.groups.items():
            rows.append(
                [
                    cw.GraphWidget(
                        title=f"Lambda consumer {group}: delivered and given up",
                        left=[
                            group_metric(C.METRIC_RECORDS_DELIVERED, group),
                            group_metric(C.METRIC_RECORDS_TO_ON_FAILURE, group),
                            group_metric(C.METRIC_BATCHES_FAILED, group),
                        ],
                        right=[queue_depth(consumer.dead_letters, "wakes dead-lettered")],
                        width=12,
                    ),
                    cw.GraphWidget(
                        title=f"Lambda consumer {group}: lag",
                        left=[group_metric(C.METRIC_CONSUMER_LAG_MS, group, "Maximum")],
                        right=[group_metric(C.METRIC_CONSUMER_LAG_RECORDS, group, "Maximum")],
                        width=12,
                    ),
                ]
            )
            rows.append([self._event_counts(group)])
        return rows

    @staticmethod
    def _event_counts(group: str) -> cw.IWidget:
        """The group's records as Lambda's event source mapping counts them (MetricsConfig
        EventCount): through the checkpoint, filtered out, dropped."""
        return cw.GraphWidget(
            title=f"Lambda consumer {group}: events (EventCount, filtered out, dropped)",
            left=[
                group_metric(C.METRIC_EVENT_COUNT, group),
                group_metric(C.METRIC_FILTERED_OUT_EVENT_COUNT, group),
                group_metric(C.METRIC_DROPPED_EVENT_COUNT, group),
            ],
            width=24,
        )

    def _spark_row(self) -> list[cw.IWidget]:
        analytics = self.analytics
        return [
            cw.GraphWidget(
                title="Spark runs",
                left=[
                    self.metrics.emr_metric("SuccessJobs", "Maximum"),
                    self.metrics.emr_metric("FailedJobs", "Maximum"),
                    self.metrics.emr_metric("RunningJobs", "Maximum"),
                ],
                right=[queue_depth(analytics.dead_letter_queue, "runs never started (DLQ)")],
                width=12,
            ),
            cw.AlarmStatusWidget(title="Alarms", alarms=list(self.alarms), width=12),
        ]
