"""Record retention: the scheduled trim (present only with `shardlog:recordRetentionDays`).

A daily rule runs ``lambdas.retention.handler`` (shardlog/retention.py): it raises each
partition's ``trimHorizonSeq`` and tags the segments below it; the log bucket's lifecycle
rule (infra/storage.py) expires the tagged ones. The function's role may read both tables
(the consumers table whole: every group's checkpoint holds segments), write the partitions
table, list ``events/`` and tag objects under it: no delete, no put of an object.
"""

from __future__ import annotations

from aws_cdk import Duration
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from constructs import Construct

from infra import constants as IC
from infra.functions import FunctionSpec, ShardlogFunction
from infra.settings import StackSettings
from infra.storage import Storage, name_in_key_policy
from shardlog import constants as C
from shardlog.function_settings import TrimmerSettings

TRIMMER_PARTITIONS_ACTIONS = ["dynamodb:GetItem", "dynamodb:Scan", "dynamodb:UpdateItem"]
TRIMMER_CONSUMERS_ACTIONS = ["dynamodb:Scan"]
TRIMMER_OBJECT_ACTIONS = ["s3:PutObjectTagging"]
TRIMMER_KMS_ACTIONS = ["kms:Decrypt", "kms:DescribeKey", "kms:GenerateDataKey"]
TRIMMER_KEY_SERVICES = ["dynamodb"]


class Retention(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        storage: Storage,
        settings: StackSettings,
        code: lambda_.Code,
        days: int,
    ) -> None:
        super().__init__(scope, construct_id)
        self.storage = storage
        self.trimmer = self._function(code, settings.log_retention_days, days)
        self.schedule = events.Rule(
            self,
            "TrimSchedule",
            description="Runs the shardlog record retention trim",
            schedule=events.Schedule.rate(Duration.hours(IC.TRIMMER_SCHEDULE_HOURS)),
            # The trim is idempotent and the next day's run finishes an interrupted one.
            targets=[targets.LambdaFunction(self.trimmer.function, retry_attempts=2)],
        )

    def _function(self, code: lambda_.Code, log_retention_days: int, days: int) -> ShardlogFunction:
        storage = self.storage
        spec = FunctionSpec(
            handler=IC.TRIMMER_HANDLER,
            description="Trims the log below each partition's retention horizon",
            timeout_s=IC.TRIMMER_TIMEOUT_S,
            environment=TrimmerSettings.for_stack(
                bucket=storage.bucket.bucket_name, tables=storage.tables, days=days
            ).environment(),
        )
        fn = ShardlogFunction(
            self, "TrimmerFunction", spec=spec, code=code, log_retention_days=log_retention_days
        )
        events_prefix = {"StringLike": {"s3:prefix": [f"{C.EVENTS_PREFIX}*"]}}
        statements = [
            iam.PolicyStatement(
                actions=TRIMMER_PARTITIONS_ACTIONS, resources=[storage.partitions_table.table_arn]
            ),
            iam.PolicyStatement(
                actions=TRIMMER_CONSUMERS_ACTIONS, resources=[storage.consumers_table.table_arn]
            ),
            iam.PolicyStatement(
                actions=["s3:ListBucket"],
                resources=[storage.bucket.bucket_arn],
                conditions=events_prefix,
            ),
            iam.PolicyStatement(
                actions=TRIMMER_OBJECT_ACTIONS,
                resources=[storage.bucket.arn_for_objects(f"{C.EVENTS_PREFIX}*")],
            ),
            iam.PolicyStatement(actions=TRIMMER_KMS_ACTIONS, resources=[storage.key.key_arn]),
        ]
        for statement in statements:
            fn.role.add_to_principal_policy(statement)
        name_in_key_policy(storage.key, fn.role, TRIMMER_KMS_ACTIONS, TRIMMER_KEY_SERVICES)
        return fn
