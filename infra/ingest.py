"""Ingest: the Kinesis-triggered ingest Lambda, its event source mapping and failure queue,
and the scheduled shard sync that records shard lineage in the partitions table.

The mapping's batch size and window are settings (``shardlog:ingestBatchSize``,
``shardlog:ingestBatchingWindowMs``: the latency/cost dial, docs/SCALE.md). With
``shardlog:ingestFanOut`` the mapping reads the stream through an enhanced fan-out consumer
of its own (records pushed over SubscribeToShard, about 70 ms, instead of a GetRecords poll
of each shard every second), and the role may subscribe through that consumer only.
"""

from __future__ import annotations

import jsii
from aws_cdk import Duration
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kinesis as kinesis
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from infra import constants as IC
from infra.functions import FunctionSpec, ShardlogFunction
from infra.settings import StackSettings
from infra.storage import Storage, failure_queue, name_in_key_policy
from shardlog import constants as C
from shardlog.function_settings import IngestSettings, ShardSyncSettings

# Read actions the event source mapping performs with the function's role (Lambda docs,
# "Kinesis execution role permissions"; kinesis:ListStreams is account-level and not needed).
# The writer itself lists shards too: the look-up of a resent record learns a child's parents
# from ListShards when shard sync has not recorded them yet (shardlog/dedupe.py).
KINESIS_ESM_ACTIONS = [
    "kinesis:DescribeStream",
    "kinesis:DescribeStreamSummary",
    "kinesis:GetRecords",
    "kinesis:GetShardIterator",
    "kinesis:ListShards",
]
# Through an enhanced fan-out consumer the mapping still finds the stream's shards
# (DescribeStream*, ListShards, on the stream) but reads none with GetRecords: it subscribes
# to each shard through the consumer, so SubscribeToShard and DescribeStreamConsumer are
# granted on that consumer only, and GetRecords/GetShardIterator not at all.
KINESIS_FAN_OUT_STREAM_ACTIONS = [
    "kinesis:DescribeStream",
    "kinesis:DescribeStreamSummary",
    "kinesis:ListShards",
]
KINESIS_FAN_OUT_CONSUMER_ACTIONS = ["kinesis:DescribeStreamConsumer", "kinesis:SubscribeToShard"]
# S3 SSE-KMS and Kinesis/DynamoDB encryption: read needs Decrypt, write needs GenerateDataKey.
KMS_DATA_ACTIONS = ["kms:Decrypt", "kms:DescribeKey", "kms:GenerateDataKey"]
# The services through which each role uses the data key (named in the key policy).
INGEST_KEY_SERVICES = ["kinesis", "s3", "dynamodb", "sqs"]
SHARD_SYNC_KEY_SERVICES = ["kinesis", "dynamodb"]
# The writer: GetObject of a leftover to adopt it, and conditional PutObject of segments:
# only with If-None-Match (the bucket policy denies the rest to everyone, too). A batch with
# records flagged as resent reads the partition's tail for their ids: it lists the
# partition's segments back from its head (ListObjectsV2), under events/ only
# (shardlog/dedupe.py).
INGEST_S3_READ_ACTIONS = ["s3:GetObject"]
INGEST_S3_LIST_ACTIONS = ["s3:ListBucket"]
INGEST_S3_CREATE_ACTIONS = ["s3:PutObject"]
IF_NONE_MATCH_SENT = {"Null": {"s3:if-none-match": "false"}}
# The commit is one transaction of two Update items; IAM checks each item as UpdateItem.
INGEST_PARTITIONS_ACTIONS = ["dynamodb:GetItem", "dynamodb:UpdateItem"]
# Lease: UpdateItem creates (an upsert), takes, renews and checkpoints it, GetItem reads it
# (in the transactional read of step 2); all on the $ingest items only
# (Storage.grant_consumer_items).
INGEST_CONSUMERS_ACTIONS = ["dynamodb:GetItem", "dynamodb:UpdateItem"]
SHARD_SYNC_KINESIS_ACTIONS = [
    "kinesis:GetRecords",
    "kinesis:GetShardIterator",
    "kinesis:ListShards",
]
# The partitions: the live set listed (a Query of the live index, Storage.grant_live_set),
# a shard the index does not show read by key, and created, moved OPEN -> CLOSED -> ENDED
# or retired with conditional UpdateItem (an upsert creates a new partition).
SHARD_SYNC_PARTITIONS_ACTIONS = ["dynamodb:GetItem", "dynamodb:UpdateItem"]
# The sync reads the ingest checkpoint of a closed shard ($ingest items only).
SHARD_SYNC_CONSUMERS_ACTIONS = ["dynamodb:GetItem"]
# Retirement (shardlog/retirement.py) reads every group's lease items on the ENDED partitions
# of the live set, and the lake's watermark mirror, by key (BatchGetItem, every group: it
# must see them all), and lists the groups from the groups index (a Scan of "$group" keys).
SHARD_SYNC_RETIREMENT_ACTIONS = ["dynamodb:BatchGetItem"]
# Infinite retries: a batch that keeps failing blocks its shard (the iterator-age and stall
# alarms fire) instead of being skipped. It is given up only at MaximumRecordAgeInSeconds
# (StackSettings.max_record_age_s, below the stream's retention): Lambda then sends the shard
# and sequence range to the failure queue, whose depth alarm makes that loss loud while the
# records can still be replayed from the stream. With -1 for the age, Lambda discards nothing
# and the stream's retention decides: the on-failure destination is for records Lambda
# discards, so a record trimmed while still retried comes with no such report. Hence an age.
UNLIMITED = -1


@jsii.implements(lambda_.IEventSourceDlq)
class QueueOnFailure:
    """The on-failure destination, without CDK's implicit wildcard KMS grant.

    lambda_event_sources.SqsDlq grants kms:ReEncrypt* and kms:GenerateDataKey*; the ingest role
    gets named actions instead (Ingest._grant_ingest).
    """

    def __init__(self, queue: sqs.IQueue) -> None:
        self._queue = queue

    def bind(
        self, _target: lambda_.IEventSourceMapping, _handler: lambda_.IFunction
    ) -> lambda_.DlqDestinationConfig:
        return lambda_.DlqDestinationConfig(destination=self._queue.queue_arn)


class Ingest(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        storage: Storage,
        settings: StackSettings,
        code: lambda_.Code,
    ) -> None:
        super().__init__(scope, construct_id)
        self.storage = storage
        self.settings = settings
        self.failure_queue = self._failure_queue()
        self.fan_out_consumer = self._fan_out_consumer() if settings.ingest_fan_out else None
        self.ingest = self._ingest_function(code)
        self.event_source = self._event_source()
        self.shard_sync = self._shard_sync_function(code)
        self.shard_sync_rule = self._shard_sync_schedule()

    @property
    def function(self) -> lambda_.Function:
        return self.ingest.function

    def _failure_queue(self) -> sqs.Queue:
        # The shard and sequence ranges of given-up batches: the only record of them.
        return failure_queue(self, "FailureQueue", self.storage.key)

    def _fan_out_consumer(self) -> kinesis.CfnStreamConsumer:
        # Dedicated 2 MB/s per shard, pushed: billed per consumer-shard-hour and per GB
        # retrieved (bench/pricing.py), hence off unless asked for.
        return kinesis.CfnStreamConsumer(
            self,
            "IngestFanOutConsumer",
            consumer_name=IC.INGEST_FAN_OUT_CONSUMER_NAME,
            stream_arn=self.storage.stream.stream_arn,
        )

    @property
    def event_source_arn(self) -> str:
        """What the mapping reads: the fan-out consumer, or the stream itself."""
        if self.fan_out_consumer is not None:
            return self.fan_out_consumer.attr_consumer_arn
        return self.storage.stream.stream_arn

    def _kinesis_statements(self) -> list[tuple[list[str], list[str]]]:
        stream = self.storage.stream.stream_arn
        if self.fan_out_consumer is None:
            return [(KINESIS_ESM_ACTIONS, [stream])]
        return [
            (KINESIS_FAN_OUT_STREAM_ACTIONS, [stream]),
            (KINESIS_FAN_OUT_CONSUMER_ACTIONS, [self.fan_out_consumer.attr_consumer_arn]),
        ]

    def _ingest_function(self, code: lambda_.Code) -> ShardlogFunction:
        s = self.settings
        storage = self.storage
        spec = FunctionSpec(
            handler=IC.INGEST_HANDLER,
            description="Appends each Kinesis batch of one shard to the S3 log, exactly once",
            timeout_s=IC.INGEST_TIMEOUT_S,
            memory_mb=IC.INGEST_MEMORY_MB,
            environment=IngestSettings.for_stack(
                bucket=storage.bucket.bucket_name,
                tables=storage.tables,
                lease_duration_ms=s.lease_duration_ms,
                segment_max_records=s.segment_max_records,
                segment_max_bytes=s.segment_max_bytes,
                dedupe_window_s=s.dedupe_window_s,
                segment_compression=s.segment_compression,
            ).environment(),
            # One invocation per shard at a time (parallelization factor 1), so this bounds
            # what ingest can take from the account, and guarantees it that much.
            reserved_concurrency=s.ingest_concurrency,
        )
        fn = ShardlogFunction(
            self, "IngestFunction", spec=spec, code=code, log_retention_days=s.log_retention_days
        )
        self._grant_ingest(fn.role)
        return fn

    def _grant_ingest(self, role: iam.IRole) -> None:
        storage = self.storage
        events = storage.bucket.arn_for_objects(f"{C.EVENTS_PREFIX}*")
        statements = [
            *self._kinesis_statements(),
            (INGEST_S3_READ_ACTIONS, [events]),
            (INGEST_PARTITIONS_ACTIONS, [storage.partitions_table.table_arn]),
            (["sqs:SendMessage"], [self.failure_queue.queue_arn]),
            (KMS_DATA_ACTIONS, [storage.key.key_arn]),
        ]
        for actions, resources in statements:
            role.add_to_principal_policy(iam.PolicyStatement(actions=actions, resources=resources))
        role.add_to_principal_policy(
            iam.PolicyStatement(
                actions=INGEST_S3_CREATE_ACTIONS, resources=[events], conditions=IF_NONE_MATCH_SENT
            )
        )
        role.add_to_principal_policy(
            iam.PolicyStatement(
                actions=INGEST_S3_LIST_ACTIONS,
                resources=[storage.bucket.bucket_arn],
                conditions={"StringLike": {"s3:prefix": [f"{C.EVENTS_PREFIX}*"]}},
            )
        )
        storage.grant_consumer_items(role, INGEST_CONSUMERS_ACTIONS, C.INGEST_GROUP)
        name_in_key_policy(storage.key, role, KMS_DATA_ACTIONS, INGEST_KEY_SERVICES)

    def _event_source(self) -> lambda_.EventSourceMapping:
        mapping = lambda_.EventSourceMapping(
            self,
            "KinesisEventSource",
            target=self.ingest.function,
            event_source_arn=self.event_source_arn,
            starting_position=lambda_.StartingPosition[C.INGEST_STARTING_POSITION],
            batch_size=self.settings.ingest_batch_size,
            # Whole seconds: the settings refuse a window that is not (shardlog/settings.py).
            max_batching_window=Duration.millis(self.settings.ingest_batching_window_ms),
            # 1, because the log of a shard is one ordered sequence behind one lease: with a
            # higher factor Lambda runs several batches of the same shard at once, which would
            # contend for that lease and could commit records out of arrival order.
            parallelization_factor=C.INGEST_PARALLELIZATION_FACTOR,
            # Halving a failing batch is safe: the writer drops redelivered records and adopts
            # leftovers, and halves isolate a poison record faster.
            bisect_batch_on_error=True,
            # The handler commits a batch all or nothing and raises on any failure, so it never
            # returns partial batch responses: ReportBatchItemFailures stays off.
            report_batch_item_failures=False,
            on_failure=QueueOnFailure(self.failure_queue),
        )
        # CDK rejects -1 (it only models "unset"); write it explicitly so the template says it.
        resource = mapping.node.default_child
        assert isinstance(resource, lambda_.CfnEventSourceMapping)
        resource.maximum_retry_attempts = UNLIMITED
        resource.maximum_record_age_in_seconds = self.settings.max_record_age_s
        # The mapping must not start polling before its role may read the stream.
        policy = self.ingest.role.node.try_find_child("DefaultPolicy")
        if policy is not None:
            mapping.node.add_dependency(policy)
        return mapping

    def _shard_sync_function(self, code: lambda_.Code) -> ShardlogFunction:
        storage = self.storage
        spec = FunctionSpec(
            handler=IC.SHARD_SYNC_HANDLER,
            description="Records Kinesis shard lineage and state in the partitions table",
            timeout_s=IC.SHARD_SYNC_TIMEOUT_S,
            environment=ShardSyncSettings.for_stack(
                stream_name=storage.stream.stream_name, tables=storage.tables
            ).environment(),
        )
        fn = ShardlogFunction(
            self,
            "ShardSyncFunction",
            spec=spec,
            code=code,
            log_retention_days=self.settings.log_retention_days,
        )
        statements = [
            (SHARD_SYNC_KINESIS_ACTIONS, [storage.stream.stream_arn]),
            (SHARD_SYNC_PARTITIONS_ACTIONS, [storage.partitions_table.table_arn]),
            (SHARD_SYNC_RETIREMENT_ACTIONS, [storage.consumers_table.table_arn]),
            (["dynamodb:Scan"], [storage.groups_index_arn]),
            (KMS_DATA_ACTIONS, [storage.key.key_arn]),
        ]
        for actions, resources in statements:
            fn.role.add_to_principal_policy(
                iam.PolicyStatement(actions=actions, resources=resources)
            )
        storage.grant_consumer_items(fn.role, SHARD_SYNC_CONSUMERS_ACTIONS, C.INGEST_GROUP)
        storage.grant_live_set(fn.role)
        name_in_key_policy(storage.key, fn.role, KMS_DATA_ACTIONS, SHARD_SYNC_KEY_SERVICES)
        return fn

    def _shard_sync_schedule(self) -> events.Rule:
        return events.Rule(
            self,
            "ShardSyncSchedule",
            description="Runs the shardlog shard sync",
            schedule=events.Schedule.rate(Duration.minutes(self.settings.shard_sync_rate_minutes)),
            # The sync is idempotent and the next tick repeats it, so a couple of retries is
            # enough; persistent failures show up in the shard-sync errors alarm.
            targets=[targets.LambdaFunction(self.shard_sync.function, retry_attempts=2)],
        )
