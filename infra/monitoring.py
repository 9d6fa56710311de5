"""Monitoring: one dashboard for the whole pipeline and alarms on an encrypted SNS topic.

Alarms fire on what needs a human: ingest failing, stalled or falling behind, records given
up (failure queue), commits fenced again and again, a lease shorter than an invocation, shard
sync failing, producer API errors, Kinesis throttling producers, and Spark starts or runs
failing. Most alarms treat missing data as "nothing failed"; the stall alarm cannot, since a
stalled event source publishes nothing at all, so it treats missing data as breaching.
"""

from __future__ import annotations

import hashlib

from aws_cdk import Annotations, Aws, Duration, RemovalPolicy
from aws_cdk import aws_cloudwatch as cw
from aws_cdk import aws_cloudwatch_actions as cw_actions
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subs
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from infra import constants as IC
from infra.analytics import Analytics
from infra.ingest import Ingest
from infra.lambda_consumers import LambdaConsumers
from infra.producer_api import ProducerApi
from infra.settings import StackSettings
from infra.storage import Storage
from shardlog import constants as C

PERIOD = Duration.minutes(5)
EMR_NAMESPACE = "AWS/EMRServerless"
# Three 5-minute periods in a row: longer than any batch takes to commit, so a period whose
# records commit in the next one never alarms alone.
STALL_PERIODS = 3
# Fenced commits happen alone when a zombie invocation loses its lease; in every period of
# this many in a row, two writers keep overtaking each other.
FENCED_PERIODS = 3


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
            IC.DIMENSION_CONSUMER_GROUP: group,
            IC.DIMENSION_SERVICE: C.POWERTOOLS_SERVICE_NAME,
        },
        statistic=statistic,
        period=PERIOD,
    )


def group_id(group: str) -> str:
    """A construct id for a group, whatever characters its name has."""
    return hashlib.sha256(group.encode()).hexdigest()[:12]


def queue_depth(queue: sqs.IQueue, label: str | None = None) -> cw.Metric:
    """Messages waiting in a queue of failures (each one is something given up)."""
    return queue.metric_approximate_number_of_messages_visible(
        period=PERIOD, statistic="Maximum", label=label
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
        lambda_consumers: LambdaConsumers | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        self.lambda_consumers = lambda_consumers
        self.settings = settings
        self.storage = storage
        self.ingest = ingest
        self.producer_api = producer_api
        self.analytics = analytics
        self.topic = self._alarm_topic()
        self.alarms: list[cw.Alarm] = []
        self._ingest_alarms()
        self._other_alarms()
        self._lambda_consumer_alarms()
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
            self._stall(),
            threshold=1,
            evaluation_periods=STALL_PERIODS,
            # A stalled event source mapping invokes nothing and publishes nothing.
            treat_missing_data=cw.TreatMissingData.BREACHING,
            description="Records keep arriving in Kinesis but ingest commits none (or its "
            "metrics are missing): the event source mapping or the function is stuck.",
        )
        self.add_alarm(
            "IngestIteratorAge",
            self._iterator_age(),
            threshold=self.settings.iterator_age_alarm_minutes * 60 * 1000,
            evaluation_periods=2,
            description="Ingest is falling behind the stream.",
        )
        self.add_alarm(
            "IngestRecordsHalfwayToGivenUp",
            self._iterator_age(),
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
            shardlog_metric(IC.METRIC_COMMIT_FENCED),
            threshold=1,
            evaluation_periods=FENCED_PERIODS,
            description="Ingest commits keep being fenced by another writer (lease lost or "
            "head moved): two writers overtake each other, e.g. a lease shorter than a batch.",
        )
        self.add_alarm(
            "IngestLeaseTooShort",
            shardlog_metric(IC.METRIC_LEASE_TOO_SHORT),
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
            self._emr_metric("FailedJobs", "Maximum"),
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

    # --- metrics -------------------------------------------------------------------------
    def _stall(self) -> cw.MathExpression:
        """1 in a period where Kinesis took records and ingest committed none (or published
        nothing). Kinesis publishes its stream metrics every minute, zero included, so a
        period without them is itself a reason to look."""
        return cw.MathExpression(
            expression="IF(incoming > 0 AND FILL(ingested, 0) <= 0, 1, 0)",
            using_metrics={
                "incoming": self.storage.stream.metric_incoming_records(
                    period=PERIOD, statistic="Sum"
                ),
                "ingested": shardlog_metric(IC.METRIC_RECORDS_INGESTED),
            },
            label="stalled (records in, none committed)",
            period=PERIOD,
        )

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

    def _functions(self) -> dict[str, lambda_.Function]:
        return {
            "ingest": self.ingest.function,
            "shard sync": self.ingest.shard_sync.function,
            "producer API": self.producer_api.function,
            "Spark trigger": self.analytics.trigger.function,
        }

    # --- dashboard -----------------------------------------------------------------------
    def _dashboard(self) -> cw.Dashboard:
        dashboard = cw.Dashboard(self, "Dashboard", default_interval=Duration.hours(3))
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
                    shardlog_metric(IC.METRIC_RECORDS_INGESTED),
                ],
                right=[self._stall()],
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
                left=[self._iterator_age()],
                left_annotations=[
                    cw.HorizontalAnnotation(value=give_up_ms // 2, label="half-way to given up"),
                    cw.HorizontalAnnotation(value=give_up_ms, label="records given up"),
                ],
                width=12,
            ),
            cw.GraphWidget(
                title="Consumer lag per group (records)", left=[self._consumer_lag()], width=12
            ),
        ]

    def _errors_row(self) -> list[cw.IWidget]:
        return [
            cw.GraphWidget(
                title="Errors",
                left=[
                    fn.metric_errors(period=PERIOD, statistic="Sum", label=f"{name} errors")
                    for name, fn in self._functions().items()
                ]
                + [
                    self.producer_api.api.metric_server_error(period=PERIOD, statistic="Sum"),
                    shardlog_metric(IC.METRIC_BATCH_FAILED),
                    shardlog_metric(IC.METRIC_LEASE_HELD),
                    shardlog_metric(IC.METRIC_LEASE_TOO_SHORT),
                ],
                width=12,
            ),
            cw.GraphWidget(
                title="Commits fenced (lease lost or head moved)",
                left=[shardlog_metric(IC.METRIC_COMMIT_FENCED)],
                right=[queue_depth(self.ingest.failure_queue, "failure queue depth")],
                width=12,
            ),
        ]

    def _limits_row(self) -> list[cw.IWidget]:
        """Throttles, time against the timeout, DynamoDB throttling."""
        functions = self._functions()
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
        return rows

    def _spark_row(self) -> list[cw.IWidget]:
        analytics = self.analytics
        return [
            cw.GraphWidget(
                title="Spark runs",
                left=[
                    self._emr_metric("SuccessJobs", "Maximum"),
                    self._emr_metric("FailedJobs", "Maximum"),
                    self._emr_metric("RunningJobs", "Maximum"),
                ],
                right=[queue_depth(analytics.dead_letter_queue, "runs never started (DLQ)")],
                width=12,
            ),
            cw.AlarmStatusWidget(title="Alarms", alarms=list(self.alarms), width=12),
        ]
