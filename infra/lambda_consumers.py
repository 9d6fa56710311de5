"""Lambda consumers: consumer groups that are Lambda functions, woken by new commits.

Shared by every group (``LambdaConsumers``):

- the **waker**: a Lambda fed by the partitions table's stream (a head moved, a partition
  ENDED) and, every minute, by a **sweep** schedule; it sends wakes to each group's queue;
- the **registration**: a Lambda behind one CloudFormation custom resource per group
  (``Custom::ShardlogConsumerGroup``) that creates the group at deploy, its start position
  fixed per partition, before the group's wake queue feeds its runner;

Per group (``LambdaConsumerGroup``, usable on its own in any CDK app):

- an SQS FIFO **wake queue** (one message group per partition: one runner per (group,
  partition) in flight) with a dead-letter queue, both encrypted and TLS-only;
- the **runner**: shardlog's Lambda (the same asset as the other handlers) that holds the
  group's lease on a partition and invokes the group's function synchronously with the
  Kinesis event shape; its role may invoke that function only, and touch the group's own
  consumers-table items only;
- an **on-failure destination** (the given SQS queue, SNS topic or S3 bucket, else a new
  encrypted queue);
- alarms: the group's lag in ms, records sent to the on-failure destination, wakes
  dead-lettered, runner errors.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from aws_cdk import ArnFormat, CustomResource, Duration, RemovalPolicy, Stack
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from infra import constants as IC
from infra.functions import FunctionSpec, ShardlogFunction
from infra.settings import SettingsError
from infra.storage import Storage, failure_queue, name_in_key_policy, own_items
from shardlog import constants as C
from shardlog.function_settings import RegistrationSettings, WakerSettings
from shardlog.lambda_consumer.settings import (
    RESOURCE_TYPE,
    LambdaConsumerSettings,
    RunnerSettings,
    group_properties,
)
from shardlog.tables import TableNames

KMS_DATA_ACTIONS = ["kms:Decrypt", "kms:DescribeKey", "kms:GenerateDataKey"]
# The waker reads the partitions table's stream (its event source) and, for the sweep, the
# partitions and every group's leases.
STREAM_READ_ACTIONS = [
    "dynamodb:DescribeStream",
    "dynamodb:GetRecords",
    "dynamodb:GetShardIterator",
    "dynamodb:ListStreams",
]
# The runner: a partition's head and lineage, its parents; at SHARD_END its children from
# the live set (a Query of the live index, Storage.grant_live_set).
RUNNER_PARTITIONS_ACTIONS = ["dynamodb:GetItem"]
# Its group's leases: create (PutItem), take/renew/checkpoint/release (UpdateItem), read.
RUNNER_CONSUMERS_ACTIONS = ["dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem"]
# Registration: the partitions and their heads (one consistent Scan: history included), and
# the revival of the retired ones the new group reads (UpdateItem: ``live`` back); the
# group's "$group" and lease items: read, created (PutItem, conditional: never
# overwritten); segments, for AT_TIMESTAMP's first record at or after the timestamp.
REGISTRATION_PARTITIONS_ACTIONS = ["dynamodb:Scan", "dynamodb:UpdateItem"]
REGISTRATION_CONSUMERS_ACTIONS = ["dynamodb:GetItem", "dynamodb:PutItem"]
# The SQS event source mapping's actions on the wake queue (Lambda's documented three), plus
# sending (rewake, children). A failed wake is left to reappear: no ChangeMessageVisibility.
WAKE_QUEUE_ACTIONS = [
    "sqs:ReceiveMessage",
    "sqs:DeleteMessage",
    "sqs:GetQueueAttributes",
    "sqs:SendMessage",
]
# Lambda's limit on a function's environment: every variable, names and values, 4 KB.
LAMBDA_ENVIRONMENT_BYTES = 4_096
# What the runner's environment holds beside its settings document as synthesized: the
# deploy-time names in place of the placeholders (bucket, tables, queue URL, stream ARN,
# region; about 450 bytes at their usual length) and the other variables, with room to spare.
RUNNER_ENVIRONMENT_RESERVE_BYTES = 1_024


def check_runner_environment(group: str, document: str, filters: str) -> None:
    """Refuse at synth a group whose settings would not fit the runner's environment (a
    deploy would fail): in practice, filter patterns past about 2,300 bytes in all."""
    size = len(document.encode()) + RUNNER_ENVIRONMENT_RESERVE_BYTES
    if size > LAMBDA_ENVIRONMENT_BYTES:
        raise SettingsError(
            f"Lambda consumer group {group!r}: filterCriteria ({len(filters.encode())} bytes "
            f"as JSON) do not fit the runner's environment: its settings would take {size} of "
            f"the {LAMBDA_ENVIRONMENT_BYTES} bytes Lambda allows a function's environment "
            "variables; shorten the patterns or merge them"
        )


@dataclass(frozen=True)
class GroupProps:
    """A group: its settings, and the function to invoke when the app defines it (else
    ``settings.function_name`` names it, e.g. an ARN in another stack or account)."""

    settings: LambdaConsumerSettings
    function: lambda_.IFunction | None = None


class LambdaConsumerGroup(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        props: GroupProps,
        storage: Storage,
        code: lambda_.Code,
        log_retention_days: int,
    ) -> None:
        super().__init__(scope, construct_id)
        self.storage = storage
        self.group = props.settings.group
        function_name = (
            props.function.function_arn
            if props.function is not None
            else props.settings.function_name
        )
        self.settings = props.settings.model_copy(update={"function_name": function_name})
        self.dead_letters = self._queue("WakeDeadLetters", dead_letter_of=None)
        self.wake_queue = self._queue("WakeQueue", dead_letter_of=self.dead_letters)
        self.failure_queue: sqs.Queue | None = None
        self.destination_kind = self.settings.destination_kind or "sqs"
        if self.settings.on_failure_destination is None:
            self.failure_queue = failure_queue(self, "OnFailureQueue", storage.key)
            self.settings = self.settings.model_copy(
                update={"on_failure_destination": self.failure_queue.queue_arn}
            )
        self.runner = self._runner(code, log_retention_days)
        self._grant(props.function)
        self.event_source = self._event_source()
        self.registration: CustomResource | None = None  # LambdaConsumers.register

    # --- resources -------------------------------------------------------------------------
    def _queue(self, construct_id: str, *, dead_letter_of: sqs.IQueue | None) -> sqs.Queue:
        wake = dead_letter_of is not None
        return sqs.Queue(
            self,
            construct_id,
            fifo=True,
            content_based_deduplication=False,  # wakes carry their own deduplication id
            # The wake queue in high-throughput mode (C.LAMBDA_CONSUMER_WAKE_FIFO_THROUGHPUT_LIMIT
            # says why; the local runtime's queues take those constants, compared by
            # tests/infra/test_parity.py); its dead letters stay a plain FIFO queue.
            deduplication_scope=sqs.DeduplicationScope.MESSAGE_GROUP if wake else None,
            fifo_throughput_limit=sqs.FifoThroughputLimit.PER_MESSAGE_GROUP_ID if wake else None,
            encryption=sqs.QueueEncryption.KMS,
            encryption_master_key=self.storage.key,
            enforce_ssl=True,
            retention_period=Duration.days(14 if dead_letter_of is None else 4),
            # A runner may run up to its timeout; the wake stays invisible that long.
            visibility_timeout=Duration.seconds(C.LAMBDA_CONSUMER_RUNNER_TIMEOUT_S + 60),
            dead_letter_queue=(
                sqs.DeadLetterQueue(
                    queue=dead_letter_of, max_receive_count=C.LAMBDA_CONSUMER_WAKE_MAX_RECEIVES
                )
                if dead_letter_of is not None
                else None
            ),
            removal_policy=RemovalPolicy.RETAIN
            if dead_letter_of is None
            else RemovalPolicy.DESTROY,
        )

    def _runner(self, code: lambda_.Code, log_retention_days: int) -> ShardlogFunction:
        storage = self.storage
        settings = RunnerSettings(
            consumer=self.settings,
            bucket="bucket-placeholder",
            tables=TableNames("partitions-placeholder", "consumers-placeholder"),
            wake_queue_url="queue-placeholder",
            event_source_arn="stream-placeholder",
        )
        # The document with the deploy-time names (tokens) in place of the placeholders: the
        # model validated everything else at synth.
        raw = settings.model_dump_json()
        filters = json.dumps(self.settings.model_dump(mode="json")["filter_criteria"])
        check_runner_environment(self.group, raw, filters)
        document = json.loads(raw)
        document.update(
            bucket=storage.bucket.bucket_name,
            tables=asdict(storage.tables),
            wake_queue_url=self.wake_queue.queue_url,
            event_source_arn=storage.stream.stream_arn,
            region=Stack.of(self).region,
        )
        spec = FunctionSpec(
            handler=IC.LAMBDA_CONSUMER_HANDLER,
            description=f"shardlog Lambda consumer group {self.group!r}: invokes its function"[
                :256
            ],
            timeout_s=C.LAMBDA_CONSUMER_RUNNER_TIMEOUT_S,
            memory_mb=512,
            environment={C.ENV_LAMBDA_CONSUMER: Stack.of(self).to_json_string(document)},
        )
        return ShardlogFunction(
            self, "Runner", spec=spec, code=code, log_retention_days=log_retention_days
        )

    def _grant(self, function: lambda_.IFunction | None) -> None:
        storage, role = self.storage, self.runner.role
        statements = [
            *read_segments(storage),
            iam.PolicyStatement(
                actions=RUNNER_PARTITIONS_ACTIONS, resources=[storage.partitions_table.table_arn]
            ),
            iam.PolicyStatement(actions=WAKE_QUEUE_ACTIONS, resources=[self.wake_queue.queue_arn]),
            iam.PolicyStatement(actions=KMS_DATA_ACTIONS, resources=[storage.key.key_arn]),
            self._invoke_statement(function),
            *self._destination_statements(),
        ]
        for statement in statements:
            role.add_to_principal_policy(statement)
        storage.grant_consumer_items(role, RUNNER_CONSUMERS_ACTIONS, self.group)
        storage.grant_live_set(role)
        name_in_key_policy(storage.key, role, KMS_DATA_ACTIONS, ["dynamodb", "s3", "sqs"])

    def _invoke_statement(self, function: lambda_.IFunction | None) -> iam.PolicyStatement:
        """lambda:InvokeFunction on the group's function only (its versions and aliases too)."""
        if function is not None:
            arn = function.function_arn
        elif self.settings.function_name.startswith("arn:"):
            arn = self.settings.function_name
        else:  # a name (or name:alias) in this account and region
            arn = Stack.of(self).format_arn(
                service="lambda",
                resource="function",
                resource_name=self.settings.function_name.split(":")[0],
                arn_format=ArnFormat.COLON_RESOURCE_NAME,
            )
        return iam.PolicyStatement(actions=["lambda:InvokeFunction"], resources=[arn, f"{arn}:*"])

    def _destination_statements(self) -> list[iam.PolicyStatement]:
        arn = self.settings.on_failure_destination
        assert arn is not None
        kind = self.destination_kind
        if kind == "sqs":
            return [
                iam.PolicyStatement(actions=["sqs:SendMessage", "sqs:GetQueueUrl"], resources=[arn])
            ]
        if kind == "sns":
            return [iam.PolicyStatement(actions=["sns:Publish"], resources=[arn])]
        bucket = arn.split(":")[-1]
        return [
            iam.PolicyStatement(
                actions=["s3:PutObject"],
                resources=[f"arn:aws:s3:::{bucket}/shardlog-on-failure/{self.group}/*"],
            )
        ]

    def register(self, registration: ShardlogFunction) -> CustomResource:
        """The group's creation at deploy, before its runner is fed any wake."""
        resource = CustomResource(
            self,
            "Registration",
            service_token=registration.function.function_arn,
            resource_type=RESOURCE_TYPE,
            properties=group_properties(self.settings),
        )
        resource.node.add_dependency(registration.role)  # its grants, before it runs
        self.event_source.node.add_dependency(resource)
        self.registration = resource
        return resource

    def _event_source(self) -> lambda_.EventSourceMapping:
        mapping = lambda_.EventSourceMapping(
            self,
            "WakeEventSource",
            target=self.runner.function,
            event_source_arn=self.wake_queue.queue_arn,
            batch_size=C.LAMBDA_CONSUMER_WAKE_BATCH_SIZE,
            report_batch_item_failures=True,
        )
        after_role_policy(mapping, self.runner.role)
        return mapping


def read_segments(storage: Storage) -> list[iam.PolicyStatement]:
    """List and read the log's committed segments (events/ only)."""
    events_prefix = f"{C.EVENTS_PREFIX}*"
    return [
        iam.PolicyStatement(
            actions=["s3:ListBucket"],
            resources=[storage.bucket.bucket_arn],
            conditions={"StringLike": {"s3:prefix": [events_prefix]}},
        ),
        iam.PolicyStatement(
            actions=["s3:GetObject"], resources=[storage.bucket.arn_for_objects(events_prefix)]
        ),
    ]


def after_role_policy(mapping: lambda_.EventSourceMapping, role: iam.IRole) -> None:
    """An event source mapping must not start polling before its role may read the source."""
    policy = role.node.try_find_child("DefaultPolicy")
    if policy is not None:
        mapping.node.add_dependency(policy)


class LambdaConsumers(Construct):
    """Every Lambda consumer group of the stack, and the waker they share."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        groups: Sequence[GroupProps],
        storage: Storage,
        code: lambda_.Code,
        log_retention_days: int,
    ) -> None:
        super().__init__(scope, construct_id)
        self.storage = storage
        self.groups = {
            g.settings.group: LambdaConsumerGroup(
                self,
                "Group" + hashlib.sha256(g.settings.group.encode()).hexdigest()[:12],
                props=g,
                storage=storage,
                code=code,
                log_retention_days=log_retention_days,
            )
            for g in groups
        }
        self.waker: ShardlogFunction | None = None
        self.registration: ShardlogFunction | None = None
        if self.groups:
            self.registration = self._registration(code, log_retention_days)
            for group in self.groups.values():
                group.register(self.registration)
            self.waker = self._waker(code, log_retention_days)
            self.stream_source = self._stream_source()
            self.sweep = self._sweep()

    def _registration(self, code: lambda_.Code, log_retention_days: int) -> ShardlogFunction:
        storage = self.storage
        spec = FunctionSpec(
            handler=IC.GROUP_REGISTRATION_HANDLER,
            description="Creates Lambda consumer groups at deploy: start positions fixed then",
            timeout_s=300,
            environment=RegistrationSettings.for_stack(
                bucket=storage.bucket.bucket_name, tables=storage.tables
            ).environment(),
        )
        fn = ShardlogFunction(
            self, "Registration", spec=spec, code=code, log_retention_days=log_retention_days
        )
        statements = [
            iam.PolicyStatement(
                actions=REGISTRATION_PARTITIONS_ACTIONS,
                resources=[storage.partitions_table.table_arn],
            ),
            *read_segments(storage),
            iam.PolicyStatement(actions=KMS_DATA_ACTIONS, resources=[storage.key.key_arn]),
        ]
        for statement in statements:
            fn.role.add_to_principal_policy(statement)
        storage.grant_consumer_items(fn.role, REGISTRATION_CONSUMERS_ACTIONS, *self.groups)
        name_in_key_policy(storage.key, fn.role, KMS_DATA_ACTIONS, ["dynamodb", "s3"])
        return fn

    def _waker(self, code: lambda_.Code, log_retention_days: int) -> ShardlogFunction:
        storage = self.storage
        queues = {group: g.wake_queue.queue_url for group, g in self.groups.items()}
        spec = FunctionSpec(
            handler=IC.CONSUMER_WAKER_HANDLER,
            description="Wakes Lambda consumer groups on new commits, and sweeps for lost wakes",
            timeout_s=60,
            # The queue URLs are tokens: CDK writes the JSON object they resolve into.
            environment=WakerSettings.for_stack(
                queues=Stack.of(self).to_json_string(queues), tables=storage.tables
            ).environment(),
        )
        fn = ShardlogFunction(
            self, "Waker", spec=spec, code=code, log_retention_days=log_retention_days
        )
        stream_arn = storage.partitions_table.table_stream_arn
        assert stream_arn is not None
        statements = [
            iam.PolicyStatement(actions=STREAM_READ_ACTIONS, resources=[stream_arn]),
            iam.PolicyStatement(actions=["dynamodb:Query"], resources=[storage.live_index_arn]),
            # The sweep: parents the live index does not show (retired ones), by key.
            iam.PolicyStatement(
                actions=["dynamodb:BatchGetItem"], resources=[storage.partitions_table.table_arn]
            ),
            # ...and each group's leases on the live set, by key.
            iam.PolicyStatement(
                actions=["dynamodb:BatchGetItem"],
                resources=[storage.consumers_table.table_arn],
                conditions=own_items(*self.groups),
            ),
            iam.PolicyStatement(
                actions=["sqs:SendMessage"],
                resources=[g.wake_queue.queue_arn for g in self.groups.values()],
            ),
            iam.PolicyStatement(actions=KMS_DATA_ACTIONS, resources=[storage.key.key_arn]),
        ]
        for statement in statements:
            fn.role.add_to_principal_policy(statement)
        name_in_key_policy(storage.key, fn.role, KMS_DATA_ACTIONS, ["dynamodb", "sqs"])
        return fn

    def _stream_source(self) -> lambda_.EventSourceMapping:
        assert self.waker is not None
        mapping = lambda_.EventSourceMapping(
            self,
            "PartitionsStream",
            target=self.waker.function,
            event_source_arn=self.storage.partitions_table.table_stream_arn,
            starting_position=lambda_.StartingPosition[C.WAKER_STARTING_POSITION],
            batch_size=C.WAKER_BATCH_SIZE,
            bisect_batch_on_error=True,
            # A wake that keeps failing is dropped after these: the sweep finds what it missed.
            retry_attempts=C.WAKER_MAX_RETRY_ATTEMPTS,
            filters=[
                lambda_.FilterCriteria.filter({"eventName": lambda_.FilterRule.is_equal("MODIFY")}),
                lambda_.FilterCriteria.filter({"eventName": lambda_.FilterRule.is_equal("INSERT")}),
            ],
        )
        after_role_policy(mapping, self.waker.role)
        return mapping

    def _sweep(self) -> events.Rule:
        assert self.waker is not None
        return events.Rule(
            self,
            "Sweep",
            description="Wakes every Lambda consumer group that has lag and no live lease",
            schedule=events.Schedule.rate(Duration.minutes(C.LAMBDA_CONSUMER_SWEEP_RATE_MINUTES)),
            targets=[
                targets.LambdaFunction(
                    self.waker.function,
                    event=events.RuleTargetInput.from_object({"source": "shardlog.sweep"}),
                    retry_attempts=2,
                )
            ],
        )

    def outputs_json(self) -> str:
        """{group: {wakeQueueUrl, wakeDeadLetterQueueUrl, onFailureDestination, runner}}."""
        return Stack.of(self).to_json_string(
            {
                group: {
                    "wakeQueueUrl": g.wake_queue.queue_url,
                    "wakeDeadLetterQueueUrl": g.dead_letters.queue_url,
                    "onFailureDestination": g.settings.on_failure_destination,
                    "runner": g.runner.function.function_name,
                }
                for group, g in self.groups.items()
            }
        )
