"""The metrics monitoring reads: the handlers' own (Powertools EMF), Kinesis', Lambda's and EMR
Serverless', each with the period and statistic its alarm or graph uses. The alarms
(infra/monitoring.py) and the dashboard (infra/dashboard.py) read the same ones.
"""

from __future__ import annotations

from aws_cdk import Duration
from aws_cdk import aws_cloudwatch as cw
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sqs as sqs

from infra import constants as IC
from infra.analytics import Analytics
from infra.ingest import Ingest
from infra.producer_api import ProducerApi
from infra.storage import Storage
from shardlog import constants as C

PERIOD = Duration.minutes(5)
EMR_NAMESPACE = "AWS/EMRServerless"


def shardlog_metric(name: str, statistic: str = "Sum") -> cw.Metric:
    """A metric the handlers publish with Powertools (it adds the service dimension)."""
    return cw.Metric(
        namespace=C.METRICS_NAMESPACE,
        metric_name=name,
        dimensions_map={IC.DIMENSION_SERVICE: C.POWERTOOLS_SERVICE_NAME},
        statistic=statistic,
        period=PERIOD,
    )


def group_metric(name: str, group: str, statistic: str = "Sum") -> cw.Metric:
    """A metric a Lambda consumer group's runner publishes (per group)."""
    return cw.Metric(
        namespace=C.METRICS_NAMESPACE,
        metric_name=name,
        dimensions_map={
            C.DIMENSION_CONSUMER_GROUP: group,
            IC.DIMENSION_SERVICE: C.POWERTOOLS_SERVICE_NAME,
        },
        statistic=statistic,
        period=PERIOD,
    )


def queue_depth(queue: sqs.IQueue, label: str | None = None) -> cw.Metric:
    """Messages waiting in a queue of failures (each one is something given up)."""
    return queue.metric_approximate_number_of_messages_visible(
        period=PERIOD, statistic="Maximum", label=label
    )


class PipelineMetrics:
    """The pipeline's metrics that depend on its resources."""

    def __init__(
        self, storage: Storage, ingest: Ingest, producer_api: ProducerApi, analytics: Analytics
    ) -> None:
        self.storage = storage
        self.ingest = ingest
        self.producer_api = producer_api
        self.analytics = analytics

    def stall(self) -> cw.MathExpression:
        """1 in a period where Kinesis took records and ingest committed none (or published
        nothing). Kinesis publishes its stream metrics every minute, zero included, so a
        period without them is itself a reason to look."""
        return cw.MathExpression(
            expression="IF(incoming > 0 AND FILL(ingested, 0) <= 0, 1, 0)",
            using_metrics={
                "incoming": self.storage.stream.metric_incoming_records(
                    period=PERIOD, statistic="Sum"
                ),
                "ingested": shardlog_metric(C.METRIC_RECORDS_INGESTED),
            },
            label="stalled (records in, none committed)",
            period=PERIOD,
        )

    def iterator_age(self) -> cw.Metric:
        return self.ingest.function.metric(
            "IteratorAge", period=PERIOD, statistic="Maximum", unit=cw.Unit.MILLISECONDS
        )

    def emr_metric(self, name: str, statistic: str = "Sum") -> cw.Metric:
        return cw.Metric(
            namespace=EMR_NAMESPACE,
            metric_name=name,
            dimensions_map={"ApplicationId": self.analytics.application.attr_application_id},
            statistic=statistic,
            period=PERIOD,
        )

    def consumer_lag(self) -> cw.MathExpression:
        # One line per consumer group, whatever groups exist: a search, not a fixed list.
        search = (
            f"SEARCH('{{{C.METRICS_NAMESPACE},{C.DIMENSION_CONSUMER_GROUP},"
            f'{IC.DIMENSION_SERVICE}}} MetricName="{C.METRIC_CONSUMER_LAG_RECORDS}"\', '
            f"'Maximum', {int(PERIOD.to_seconds())})"
        )
        return cw.MathExpression(expression=search, using_metrics={}, label="", period=PERIOD)

    def functions(self) -> dict[str, lambda_.Function]:
        return {
            "ingest": self.ingest.function,
            "shard sync": self.ingest.shard_sync.function,
            "producer API": self.producer_api.function,
            "Spark trigger": self.analytics.trigger.function,
        }
