"""The Spark schedules: one EventBridge Scheduler schedule per job invokes the trigger Lambda
(lambdas/spark_trigger) with the job and the schedule time; the Lambda starts a run only
when none of that job is active, with a clientToken derived from the schedule time
(docs/SPARK.md). A start that fails for good lands in the dead-letter queue (alarmed).
With compaction by volume on, ``volume_source`` maps the partitions table's stream to the
same trigger, which starts a compaction run per threshold crossing.

Each builder makes its resources in the scope it is given (the Analytics construct), so
their logical ids are those of the construct that composes them.
"""

from __future__ import annotations

import json

from aws_cdk import Aws, Duration, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_scheduler as scheduler
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from infra import constants as IC
from infra.functions import FunctionSpec, QueueDestination, ShardlogFunction
from infra.lambda_consumers import KMS_DATA_ACTIONS, STREAM_READ_ACTIONS, after_role_policy
from infra.storage import Storage, failure_queue, name_in_key_policy, own_items
from shardlog import constants as C

# Sending to the KMS-encrypted dead-letter queue (SQS makes a data key with the sender's rights).
DLQ_SEND_ACTIONS = ["sqs:SendMessage"]
DLQ_KMS_ACTIONS = ["kms:Decrypt", "kms:GenerateDataKey"]
SCHEDULER_PRINCIPAL = "scheduler.amazonaws.com"
# Compaction by volume: count, claim and confirm on the $volume item (shardlog/dal/volume.py).
VOLUME_COUNTER_ACTIONS = ["dynamodb:UpdateItem"]
# EventBridge Scheduler puts the invocation's schedule time here (a context attribute).
SCHEDULED_TIME = "<aws.scheduler.scheduled-time>"


def rate_expression(minutes: int) -> str:
    return f"rate({minutes} minute{'s' if minutes != 1 else ''})"


def dead_letter_queue(scope: Construct, key: kms.IKey) -> sqs.Queue:
    """Where a Spark start that failed for good ends: a schedule that could not invoke
    the trigger, or a trigger invocation that failed after Lambda's retries."""
    return failure_queue(scope, "DeadLetterQueue", key)


def grant_dead_letters(role: iam.IRole, queue: sqs.IQueue, key: kms.IKey) -> None:
    """What sending to the KMS-encrypted dead-letter queue takes."""
    role.add_to_principal_policy(
        iam.PolicyStatement(actions=DLQ_SEND_ACTIONS, resources=[queue.queue_arn])
    )
    role.add_to_principal_policy(
        iam.PolicyStatement(actions=DLQ_KMS_ACTIONS, resources=[key.key_arn])
    )
    name_in_key_policy(key, role, DLQ_KMS_ACTIONS, ["sqs"])


def trigger_function(
    scope: Construct,
    code: lambda_.Code,
    environment: dict[str, str],
    dead_letters: sqs.IQueue,
    key: kms.IKey,
    log_retention_days: int,
) -> ShardlogFunction:
    """The Lambda that starts a scheduled run (lambdas/spark_trigger), never overlapping."""
    spec = FunctionSpec(
        handler=IC.SPARK_TRIGGER_HANDLER,
        description="Starts the scheduled Spark runs on EMR Serverless, never overlapping",
        timeout_s=IC.SPARK_TRIGGER_TIMEOUT_S,
        environment=environment,
    )
    fn = ShardlogFunction(
        scope,
        "SparkTrigger",
        spec=spec,
        code=code,
        log_retention_days=log_retention_days,
    )
    # EventBridge Scheduler invokes Lambda asynchronously: a failing trigger is retried by
    # Lambda, not the scheduler, then dead-lettered here (and its Errors are alarmed).
    fn.function.configure_async_invoke(
        retry_attempts=IC.SPARK_TRIGGER_ASYNC_RETRIES,
        max_event_age=Duration.seconds(IC.SPARK_TRIGGER_MAX_EVENT_AGE_S),
        on_failure=QueueDestination(dead_letters),
    )
    grant_dead_letters(fn.role, dead_letters, key)
    return fn


def schedule_group(scope: Construct) -> scheduler.CfnScheduleGroup:
    """The schedules' own group: the scheduler role trusts only schedules of it."""
    stack_name = Stack.of(scope).stack_name
    name = f"{stack_name[: 64 - len(IC.SCHEDULE_GROUP_SUFFIX)]}{IC.SCHEDULE_GROUP_SUFFIX}"
    return scheduler.CfnScheduleGroup(scope, "ScheduleGroup", name=name)


def schedules(
    scope: Construct,
    group: scheduler.CfnScheduleGroup,
    trigger: ShardlogFunction,
    rates: dict[str, int],
    dead_letters: sqs.IQueue,
    key: kms.IKey,
) -> tuple[iam.Role, dict[str, scheduler.CfnSchedule]]:
    """One schedule per job (``rates``: job -> minutes) invoking the trigger, and the role
    EventBridge Scheduler invokes it with."""
    role = iam.Role(
        scope,
        "SchedulerRole",
        description="shardlog: EventBridge Scheduler invokes the Spark trigger",
        # Only schedules of shardlog's group, in this account (confused deputy); Scheduler
        # names the schedule group, never a schedule, as the source.
        assumed_by=iam.ServicePrincipal(
            SCHEDULER_PRINCIPAL,
            conditions={
                "StringEquals": {"aws:SourceAccount": Aws.ACCOUNT_ID},
                "ArnEquals": {"aws:SourceArn": group.attr_arn},
            },
        ),
    )
    role.add_to_policy(
        iam.PolicyStatement(
            actions=["lambda:InvokeFunction"], resources=[trigger.function.function_arn]
        )
    )
    grant_dead_letters(role, dead_letters, key)
    schedules = {
        job: scheduler.CfnSchedule(
            scope,
            f"{job.title()}Schedule",
            group_name=group.ref,  # Ref: the group's name, and a dependency on it
            description=f"shardlog: start the Spark {job} job",
            schedule_expression=rate_expression(minutes),
            flexible_time_window=scheduler.CfnSchedule.FlexibleTimeWindowProperty(mode="OFF"),
            target=scheduler.CfnSchedule.TargetProperty(
                arn=trigger.function.function_arn,
                role_arn=role.role_arn,
                input=json.dumps({"job": job, "scheduledTime": SCHEDULED_TIME}),
                # A retry carries the same schedule time, hence the same clientToken.
                retry_policy=scheduler.CfnSchedule.RetryPolicyProperty(
                    maximum_event_age_in_seconds=60 * minutes,
                    maximum_retry_attempts=10,
                ),
                # An invocation the scheduler could not make (throttled, denied) after
                # its retries: kept, and alarmed through the queue's depth.
                dead_letter_config=scheduler.CfnSchedule.DeadLetterConfigProperty(
                    arn=dead_letters.queue_arn
                ),
            ),
        )
        for job, minutes in rates.items()
    }
    return role, schedules


def volume_source(
    scope: Construct, trigger: ShardlogFunction, storage: Storage
) -> lambda_.EventSourceMapping:
    """Compaction by volume: the partitions table's stream feeds the trigger too, which
    counts commits in the consumers table's ``$compaction``/``$volume`` item and starts a
    compaction run per threshold crossing (shardlog/spark/volume.py). Its role gets the
    stream, UpdateItem on the ``$compaction`` group's items only, and the tables' key."""
    stream_arn = storage.partitions_table.table_stream_arn
    assert stream_arn is not None  # the table has its stream (infra/storage.py)
    statements = [
        iam.PolicyStatement(actions=STREAM_READ_ACTIONS, resources=[stream_arn]),
        iam.PolicyStatement(
            actions=VOLUME_COUNTER_ACTIONS,
            resources=[storage.consumers_table.table_arn],
            conditions=own_items(C.COMPACTION_GROUP),
        ),
        iam.PolicyStatement(actions=KMS_DATA_ACTIONS, resources=[storage.key.key_arn]),
    ]
    for statement in statements:
        trigger.role.add_to_principal_policy(statement)
    name_in_key_policy(storage.key, trigger.role, KMS_DATA_ACTIONS, ["dynamodb"])
    mapping = lambda_.EventSourceMapping(
        scope,
        "PartitionsStreamVolume",
        target=trigger.function,
        event_source_arn=stream_arn,
        # What was committed before is the schedule's: the first run counts from now.
        starting_position=lambda_.StartingPosition.LATEST,
        batch_size=IC.VOLUME_BATCH_SIZE,
        retry_attempts=IC.VOLUME_MAX_RETRY_ATTEMPTS,
        filters=[
            lambda_.FilterCriteria.filter({"eventName": lambda_.FilterRule.is_equal("MODIFY")}),
            lambda_.FilterCriteria.filter({"eventName": lambda_.FilterRule.is_equal("INSERT")}),
        ],
    )
    after_role_policy(mapping, trigger.role)
    return mapping
