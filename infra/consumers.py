"""Consumers: one IAM managed policy per consumer group named in shardlog:consumerGroups.

A consumer group's workers (`shardlog consume`, shardlog.consumer.Worker) run wherever their
owner runs them, under a role the stack does not know; attach the group's policy to it. The
policy reads the committed log and the partitions table, and reads and writes the consumers
table's items of that group only (its leases and checkpoints): never the ingest leases
($ingest), the compaction watermark ($compaction) or another group's.
"""

from __future__ import annotations

import hashlib

from aws_cdk import Stack
from aws_cdk import aws_iam as iam
from constructs import Construct

from infra.settings import StackSettings
from infra.storage import Storage, own_items
from shardlog import constants as C

# Balancing reads the live set (a Query of the live index, Storage.grant_live_set) and
# parents it does not show by key (BatchGetItem); get_partition reads one; a group's
# creation scans the whole table once (history included) and revives the retired partitions
# the new group reads (UpdateItem: ``live`` back, shardlog/retirement.py).
CONSUMER_PARTITIONS_ACTIONS = [
    "dynamodb:BatchGetItem",
    "dynamodb:GetItem",
    "dynamodb:Scan",
    "dynamodb:UpdateItem",
]
# Leases: PutItem creates a missing one, UpdateItem takes, renews, steals and checkpoints,
# BatchGetItem reads the group's on the live set, GetItem reads one.
CONSUMER_LEASE_ACTIONS = [
    "dynamodb:BatchGetItem",
    "dynamodb:GetItem",
    "dynamodb:PutItem",
    "dynamodb:UpdateItem",
]
KMS_DATA_ACTIONS = ["kms:Decrypt", "kms:DescribeKey", "kms:GenerateDataKey"]


class ConsumerGroups(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        storage: Storage,
        settings: StackSettings,
    ) -> None:
        super().__init__(scope, construct_id)
        self.storage = storage
        self.policies = {group: self._policy(group) for group in settings.consumer_groups}

    def policy_arns_json(self) -> str:
        """{group: managed policy ARN}, as JSON (the ConsumerGroupPolicyArns output)."""
        arns = {group: policy.managed_policy_arn for group, policy in self.policies.items()}
        return Stack.of(self).to_json_string(arns)

    def _policy(self, group: str) -> iam.ManagedPolicy:
        storage = self.storage
        bucket = storage.bucket
        statements = [
            iam.PolicyStatement(
                actions=["s3:ListBucket"],
                resources=[bucket.bucket_arn],
                conditions={"StringLike": {"s3:prefix": [f"{C.EVENTS_PREFIX}*"]}},
            ),
            iam.PolicyStatement(
                actions=["s3:GetObject"], resources=[bucket.arn_for_objects(f"{C.EVENTS_PREFIX}*")]
            ),
            iam.PolicyStatement(
                actions=CONSUMER_PARTITIONS_ACTIONS, resources=[storage.partitions_table.table_arn]
            ),
            iam.PolicyStatement(
                actions=CONSUMER_LEASE_ACTIONS,
                resources=[storage.consumers_table.table_arn],
                conditions=own_items(group),
            ),
            iam.PolicyStatement(actions=["dynamodb:Query"], resources=[storage.live_index_arn]),
            iam.PolicyStatement(actions=KMS_DATA_ACTIONS, resources=[storage.key.key_arn]),
        ]
        # A digest keeps the construct id valid whatever characters the group name has, and
        # stable whatever the order of the list.
        digest = hashlib.sha256(group.encode()).hexdigest()[:12]
        return iam.ManagedPolicy(
            self,
            f"Group{digest}",
            description=f"shardlog consumer group {group!r}: read the log, own its leases"[:1000],
            statements=statements,
        )
