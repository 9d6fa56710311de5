"""Monitoring: one dashboard for the whole pipeline and alarms on an encrypted SNS topic.

Alarms fire on what needs a human: ingest failing or falling behind, records expiring
unprocessed (failure queue), shard sync failing, producer API errors, Kinesis throttling
producers, and failed Spark runs.
"""

from __future__ import annotations

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_cloudwatch as cw
from aws_cdk import aws_cloudwatch_actions as cw_actions
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subs
from constructs import Construct

from infra import constants as IC
from infra.analytics import Analytics
from infra.ingest import Ingest
from infra.producer_api import ProducerApi
from infra.settings import StackSettings
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


class Monitoring(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        settings: StackSettings,
        storage: Storage,
        ingest: Ingest,
        producer_api: ProducerApi,
        analytics: Analytics,
    ) -> None:
        super().__init__(scope, construct_id)
        self.settings = settings
        self.storage = storage
        self.ingest = ingest
        self.producer_api = producer_api
        self.analytics = analytics
        self.topic = self._alarm_topic()
        self.alarms: list[cw.Alarm] = []
        self._alarms()
        self.dashboard = self._dashboard()

    # --- alarms -------------------------------------------------------------------------
    def _alarm_topic(self) -> sns.Topic:
        key = kms.Key(
            self,
            "AlarmTopicKey",
            description="shardlog: encrypts the alarm topic",
            enable_key_rotation=True,
            removal_policy=RemovalPolicy.DESTROY,
        )
        # CloudWatch publishes to an encrypted topic only if the key lets it make data keys.
        key.add_to_resource_policy(
            iam.PolicyStatement(
                principals=[iam.ServicePrincipal("cloudwatch.amazonaws.com")],
                actions=["kms:Decrypt", "kms:GenerateDataKey*"],
                resources=["*"],  # in a key policy, "*" means this key
            )
        )
        topic = sns.Topic(
            self, "AlarmTopic", display_name="shardlog alarms", master_key=key, enforce_ssl=True
        )
        if self.settings.alarm_email:
            topic.add_subscription(subs.EmailSubscription(self.settings.alarm_email))
        return topic

    def add_alarm(
        self,
        construct_id: str,
        metric: cw.IMetric,
        *,
        threshold: float,
        description: str,
        evaluation_periods: int = 1,
    ) -> cw.Alarm:
        """Alarm at or above threshold, notifying the topic; other domains add theirs here."""
        alarm = cw.Alarm(
            self,
            construct_id,
            metric=metric,
            threshold=threshold,
            evaluation_periods=evaluation_periods,
            comparison_operator=cw.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
            # No data means nothing ran or nothing failed, never an incident by itself.
            treat_missing_data=cw.TreatMissingData.NOT_BREACHING,
            alarm_description=description,
        )
        alarm.add_alarm_action(cw_actions.SnsAction(self.topic))
        alarm.add_ok_action(cw_actions.SnsAction(self.topic))
        self.alarms.append(alarm)
        return alarm

    def _alarms(self) -> None:
        ingest = self.ingest.function
        self.add_alarm(
            "IngestErrors",
            ingest.metric_errors(period=PERIOD, statistic="Sum"),
            threshold=1,
            description="The ingest Lambda failed batches; they are retried, the shard waits.",
        )
        self.add_alarm(
            "IngestIteratorAge",
            self._iterator_age(),
            threshold=self.settings.iterator_age_alarm_minutes * 60 * 1000,
            evaluation_periods=2,
            description="Ingest is falling behind the stream; records expire at the end of "
            "the stream's retention.",
        )
        self.add_alarm(
            "IngestFailureQueueDepth",
            self.ingest.failure_queue.metric_approximate_number_of_messages_visible(
                period=PERIOD, statistic="Maximum"
            ),
            threshold=1,
            description="Records expired from the stream before ingest committed them: data "
            "loss. The queue holds their shard and sequence ranges.",
        )
        self.add_alarm(
            "ShardSyncErrors",
            self.ingest.shard_sync.function.metric_errors(period=PERIOD, statistic="Sum"),
            threshold=1,
            evaluation_periods=3,
            description="The shard sync keeps failing: new shards get no lineage, "
            "closed shards never end.",
        )
        self.add_alarm(
            "ProducerApiServerErrors",
            self.producer_api.api.metric_server_error(period=PERIOD, statistic="Sum"),
            threshold=1,
            description="The producer API returned 5XX responses.",
        )
        self.add_alarm(
            "StreamWriteThrottled",
            self.storage.stream.metric_write_provisioned_throughput_exceeded(
                period=PERIOD, statistic="Sum"
            ),
            threshold=1,
            evaluation_periods=3,
            description="Kinesis throttles producers: add shards (shardlog:shardCount).",
        )
        self.add_alarm(
            "SparkFailedJobs",
            self._emr_metric("FailedJobs", "Maximum"),
            threshold=1,
            description="An EMR Serverless Spark run failed.",
        )

    # --- metrics -------------------------------------------------------------------------
    def _iterator_age(self) -> cw.Metric:
        return self.ingest.function.metric(
            "IteratorAge", period=PERIOD, statistic="Maximum", unit=cw.Unit.MILLISECONDS
        )

    def _emr_metric(self, name: str, statistic: str = "Sum") -> cw.Metric:
        return cw.Metric(
            namespace=EMR_NAMESPACE,
            metric_name=name,
            dimensions_map={"ApplicationId": self.analytics.application.attr_application_id},
            statistic=statistic,
            period=PERIOD,
        )

    def _consumer_lag(self) -> cw.MathExpression:
        # One line per consumer group, whatever groups exist: a search, not a fixed list.
        search = (
            f"SEARCH('{{{C.METRICS_NAMESPACE},{IC.DIMENSION_CONSUMER_GROUP},"
            f'{IC.DIMENSION_SERVICE}}} MetricName="{IC.METRIC_CONSUMER_LAG_RECORDS}"\', '
            f"'Maximum', {int(PERIOD.to_seconds())})"
        )
        return cw.MathExpression(expression=search, using_metrics={}, label="", period=PERIOD)

    # --- dashboard -----------------------------------------------------------------------
    def _dashboard(self) -> cw.Dashboard:
        stream = self.storage.stream
        ingest = self.ingest
        api = self.producer_api
        graph = cw.GraphWidget
        dashboard = cw.Dashboard(self, "Dashboard", default_interval=Duration.hours(3))
        dashboard.add_widgets(
            graph(
                title="Records ingested",
                left=[
                    stream.metric_incoming_records(period=PERIOD, statistic="Sum"),
                    shardlog_metric(IC.METRIC_RECORDS_INGESTED),
                ],
                width=12,
            ),
            graph(
                title="Bytes ingested",
                left=[stream.metric_incoming_bytes(period=PERIOD, statistic="Sum")],
                width=12,
            ),
        )
        dashboard.add_widgets(
            graph(title="Ingest iterator age (ms)", left=[self._iterator_age()], width=12),
            graph(title="Consumer lag per group (records)", left=[self._consumer_lag()], width=12),
        )
        dashboard.add_widgets(
            graph(
                title="Errors",
                left=[
                    ingest.function.metric_errors(period=PERIOD, statistic="Sum"),
                    ingest.shard_sync.function.metric_errors(period=PERIOD, statistic="Sum"),
                    api.function.metric_errors(period=PERIOD, statistic="Sum"),
                    api.api.metric_server_error(period=PERIOD, statistic="Sum"),
                    shardlog_metric(IC.METRIC_BATCH_FAILED),
                    shardlog_metric(IC.METRIC_LEASE_HELD),
                ],
                width=12,
            ),
            graph(
                title="Failure queue depth (expired records)",
                left=[
                    ingest.failure_queue.metric_approximate_number_of_messages_visible(
                        period=PERIOD, statistic="Maximum"
                    )
                ],
                width=12,
            ),
        )
        dashboard.add_widgets(
            graph(
                title="Spark runs",
                left=[
                    self._emr_metric("SuccessJobs", "Maximum"),
                    self._emr_metric("FailedJobs", "Maximum"),
                    self._emr_metric("RunningJobs", "Maximum"),
                ],
                width=12,
            ),
            cw.AlarmStatusWidget(title="Alarms", alarms=list(self.alarms), width=12),
        )
        return dashboard
