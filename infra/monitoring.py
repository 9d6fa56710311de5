"""Monitoring: alarms on an encrypted SNS topic, and one dashboard for the whole pipeline
(infra/dashboard.py), both from the same metrics (infra/metrics.py).

Alarms fire on what needs a human: ingest failing, stalled or falling behind, records given
up (failure queue), commits fenced again and again, a lease shorter than an invocation, shard
sync failing, producer API errors, Kinesis throttling producers, and Spark starts or runs
failing. Most alarms treat missing data as "nothing failed"; the stall alarm cannot, since a
stalled event source publishes nothing at all, so it treats missing data as breaching.
"""

from __future__ import annotations

import hashlib

from aws_cdk import Annotations, Aws, RemovalPolicy
from aws_cdk import aws_cloudwatch as cw
from aws_cdk import aws_cloudwatch_actions as cw_actions
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subs
from constructs import Construct

from infra import constants as IC
from infra.analytics import Analytics
from infra.dashboard import PipelineDashboard
from infra.ingest import Ingest
from infra.lambda_consumers import LambdaConsumers
from infra.metrics import (
    PERIOD,
    PipelineMetrics,
    group_metric,
    queue_depth,
    shardlog_metric,
)
from infra.producer_api import ProducerApi
from infra.settings import StackSettings
from infra.storage import Storage
from shardlog import constants as C

# Three 5-minute periods in a row: longer than any batch takes to commit, so a period whose
# records commit in the next one never alarms alone.
STALL_PERIODS = 3
# Fenced commits happen alone when a zombie invocation loses its lease; in every period of
# this many in a row, two writers keep overtaking each other.
FENCED_PERIODS = 3


def group_id(group: str) -> str:
    """A construct id for a group, whatever characters its name has."""
    return hashlib.sha256(group.encode()).hexdigest()[:12]


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
        lambda_consumers: LambdaConsumers | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        self.lambda_consumers = lambda_consumers
        self.settings = settings
        self.storage = storage
        self.ingest = ingest
        self.producer_api = producer_api
        self.analytics = analytics
        self.metrics = PipelineMetrics(storage, ingest, producer_api, analytics)
        self.topic = self._alarm_topic()
        self.alarms: list[cw.Alarm] = []
        self._ingest_alarms()
        self._other_alarms()
        self._lambda_consumer_alarms()
        self._lake_alarms()
        self.dashboard = PipelineDashboard(
            self.metrics, settings, self.alarms, lambda_consumers
        ).build(self)

    # --- alarms -------------------------------------------------------------------------
    def _alarm_topic(self) -> sns.Topic:
        key = kms.Key(
            self,
            "AlarmTopicKey",
            description="shardlog: encrypts the alarm topic",
            enable_key_rotation=True,
            removal_policy=RemovalPolicy.DESTROY,
        )
        # CloudWatch publishes to an encrypted topic only if the key lets it make data keys;
        # only for alarms of this account and region (confused deputy).
        key.add_to_resource_policy(
            iam.PolicyStatement(
                principals=[iam.ServicePrincipal("cloudwatch.amazonaws.com")],
                actions=["kms:Decrypt", "kms:GenerateDataKey*"],
                resources=["*"],  # in a key policy, "*" means this key
                conditions={
                    "StringEquals": {"aws:SourceAccount": Aws.ACCOUNT_ID},
                    "ArnLike": {
                        "aws:SourceArn": (
                            f"arn:{Aws.PARTITION}:cloudwatch:{Aws.REGION}:{Aws.ACCOUNT_ID}:alarm:*"
                        )
                    },
                },
            )
        )
        topic = sns.Topic(
            self, "AlarmTopic", display_name="shardlog alarms", master_key=key, enforce_ssl=True
        )
        if self.settings.alarm_email:
            topic.add_subscription(subs.EmailSubscription(self.settings.alarm_email))
        else:  # StackSettings allows it only with shardlog:noAlarmSubscriber=true
            Annotations.of(self).add_warning_v2(
                "shardlog:noAlarmSubscriber",
                f"{IC.CTX_NO_ALARM_SUBSCRIBER}=true: alarms reach a topic nobody subscribes to; "
                f"subscribe to the {IC.OUTPUT_ALARM_TOPIC_ARN} output.",
            )
        return topic

    def add_alarm(
        self,
        construct_id: str,
        metric: cw.IMetric,
        *,
        threshold: float,
        description: str,
        evaluation_periods: int = 1,
        treat_missing_data: cw.TreatMissingData = cw.TreatMissingData.NOT_BREACHING,
    ) -> cw.Alarm:
        """Alarm at or above threshold, notifying the topic; other domains add theirs here.

        By default no data means nothing ran or nothing failed, never an incident by itself.
        """
        alarm = cw.Alarm(
            self,
            construct_id,
            metric=metric,
            threshold=threshold,
            evaluation_periods=evaluation_periods,
            comparison_operator=cw.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
            treat_missing_data=treat_missing_data,
            alarm_description=description,
        )
        alarm.add_alarm_action(cw_actions.SnsAction(self.topic))
        alarm.add_ok_action(cw_actions.SnsAction(self.topic))
        self.alarms.append(alarm)
        return alarm

    def _ingest_alarms(self) -> None:
        ingest = self.ingest.function
        self.add_alarm(
            "IngestErrors",
            ingest.metric_errors(period=PERIOD, statistic="Sum"),
            threshold=1,
            description="The ingest Lambda failed batches; they are retried, the shard waits.",
        )
        self.add_alarm(
            "IngestStalled",
            self.metrics.stall(),
            threshold=1,
            evaluation_periods=STALL_PERIODS,
            # A stalled event source mapping invokes nothing and publishes nothing.
            treat_missing_data=cw.TreatMissingData.BREACHING,
            description="Records keep arriving in Kinesis but ingest commits none (or its "
            "metrics are missing): the event source mapping or the function is stuck.",
        )
        self.add_alarm(
            "IngestIteratorAge",
            self.metrics.iterator_age(),
            threshold=self.settings.iterator_age_alarm_minutes * 60 * 1000,
            evaluation_periods=2,
            description="Ingest is falling behind the stream.",
        )
        self.add_alarm(
            "IngestRecordsHalfwayToGivenUp",
            self.metrics.iterator_age(),
            threshold=self.settings.max_record_age_s * 1000 // 2,
            description="Unprocessed records are half-way to the event source's maximum "
            "record age: past it they are given up (failure queue) and must be replayed.",
        )
        self.add_alarm(
            "IngestFailureQueueDepth",
            queue_depth(self.ingest.failure_queue),
            threshold=1,
            description="Records were given up before ingest committed them: the queue holds "
            "their shard and sequence ranges; replay them while the stream still has them.",
        )
        self.add_alarm(
            "IngestCommitsFenced",
            shardlog_metric(C.METRIC_COMMIT_FENCED),
            threshold=1,
            evaluation_periods=FENCED_PERIODS,
            description="Ingest commits keep being fenced by another writer (lease lost or "
            "head moved): two writers overtake each other, e.g. a lease shorter than a batch.",
        )
        self.add_alarm(
            "IngestLeaseTooShort",
            shardlog_metric(C.METRIC_LEASE_TOO_SHORT),
            threshold=1,
            description="The ingest lease is shorter than an invocation may run: ingest "
            f"refuses every batch until {C.ENV_LEASE_DURATION_MS} or the timeout is fixed.",
        )
        self.add_alarm(
            "IngestThrottled",
            ingest.metric_throttles(period=PERIOD, statistic="Sum"),
            threshold=1,
            evaluation_periods=3,
            description="The ingest Lambda is throttled: raise "
            f"{IC.CTX_INGEST_RESERVED_CONCURRENCY} (one invocation per open shard).",
        )

    def _other_alarms(self) -> None:
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
            self.metrics.emr_metric("FailedJobs", "Maximum"),
            threshold=1,
            description="An EMR Serverless Spark run failed.",
        )
        self.add_alarm(
            "SparkTriggerErrors",
            self.analytics.trigger.function.metric_errors(period=PERIOD, statistic="Sum"),
            threshold=1,
            description="The Spark trigger failed to start a run (Lambda retries it, then "
            "dead-letters it).",
        )
        self.add_alarm(
            "SparkDeadLetters",
            queue_depth(self.analytics.dead_letter_queue),
            threshold=1,
            description="A scheduled Spark run never started: the dead-letter queue holds the "
            "schedule's event (job and schedule time) and why.",
        )

    def _lake_alarms(self) -> None:
        """A typed lake table refused records into its dead-letter table (docs/LAKE.md)."""
        for declared in self.analytics.lake_tables.tables:
            table = f"{IC.LAKE_DATABASE}.{declared.name}"
            self.add_alarm(
                f"LakeRejected{group_id(declared.name)}",
                cw.Metric(
                    namespace=C.METRICS_NAMESPACE,
                    metric_name=C.METRIC_LAKE_RECORDS_REJECTED,
                    dimensions_map={C.DIMENSION_LAKE_TABLE: table},
                    period=PERIOD,
                    statistic="Sum",
                ),
                threshold=1,
                description=f"Compaction refused records into {table}_rejected: they do not "
                f"fit {table}'s declared schema (the table's named query shows which field).",
            )

    def _lambda_consumer_alarms(self) -> None:
        if self.lambda_consumers is None:
            return
        for group, consumer in self.lambda_consumers.groups.items():
            name = group_id(group)
            self.add_alarm(
                f"LambdaConsumer{name}Lag",
                group_metric(C.METRIC_CONSUMER_LAG_MS, group, "Maximum"),
                threshold=IC.LAMBDA_CONSUMER_LAG_ALARM_MS,
                evaluation_periods=2,
                description=f"Lambda consumer group {group!r} is more than "
                f"{IC.LAMBDA_CONSUMER_LAG_ALARM_MS // 60_000} minutes behind the log.",
            )
            self.add_alarm(
                f"LambdaConsumer{name}OnFailure",
                group_metric(C.METRIC_RECORDS_TO_ON_FAILURE, group),
                threshold=1,
                description=f"Lambda consumer group {group!r} gave up on records: its on-failure "
                "destination names them; replay them with `shardlog read`.",
            )
            self.add_alarm(
                f"LambdaConsumer{name}WakesDeadLettered",
                queue_depth(consumer.dead_letters),
                threshold=1,
                description=f"Wakes of Lambda consumer group {group!r} failed "
                f"{C.LAMBDA_CONSUMER_WAKE_MAX_RECEIVES} times (its runner keeps failing).",
            )
            self.add_alarm(
                f"LambdaConsumer{name}RunnerErrors",
                consumer.runner.function.metric_errors(period=PERIOD, statistic="Sum"),
                threshold=1,
                evaluation_periods=3,
                description=f"The runner of Lambda consumer group {group!r} keeps failing.",
            )
        if self.lambda_consumers.waker is not None:
            self.add_alarm(
                "LambdaConsumersWakerErrors",
                self.lambda_consumers.waker.function.metric_errors(period=PERIOD, statistic="Sum"),
                threshold=1,
                evaluation_periods=3,
                description="The Lambda consumers' waker keeps failing: groups wake only by the "
                "sweep (once a minute).",
            )
