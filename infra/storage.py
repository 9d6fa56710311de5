"""Storage: the S3 log bucket, the partitions and consumers tables and the Kinesis stream.

One customer-managed KMS key (rotated yearly) encrypts the stream, the log bucket, both
tables and the ingest failure queue, so a single key policy and a handful of explicit
grants describe who can read shardlog data.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from aws_cdk import Aws, Duration, RemovalPolicy
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kinesis as kinesis
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from infra.buckets import hardened_bucket
from infra.settings import StackSettings
from shardlog import constants as C
from shardlog.retention import TRIMMED_NONCURRENT_DAYS, expiry_rule
from shardlog.tables import TableNames

STRING = dynamodb.AttributeType.STRING  # every key attribute of shardlog is a string
# Old object versions only exist after an overwrite or delete (the log never overwrites;
# a compaction retry rewrites its deterministic Parquet file names): keep them long enough
# to recover from a mistake, then let them go.
NONCURRENT_VERSION_DAYS = 30
# A writer that crashed mid-upload leaves an incomplete multipart upload that no reader
# sees and no writer resumes (uploads are single PutObject calls with If-None-Match); it
# only costs storage, so abort it after a day.
ABORT_MULTIPART_DAYS = 1


def own_items(*groups: str) -> dict[str, Any]:
    """IAM conditions: only the consumers-table items of these consumer groups.

    The table's partition key is the group, and dynamodb:LeadingKeys holds the partition key
    values a request names (every item of a transactional write is checked as its own
    UpdateItem). The key is multivalued, hence ForAllValues; ForAllValues alone also holds
    when a request names no key at all (a Scan), so Null=false requires one.
    """
    return {
        "ForAllValues:StringEquals": {"dynamodb:LeadingKeys": list(groups)},
        "Null": {"dynamodb:LeadingKeys": "false"},
    }


def failure_queue(scope: Construct, construct_id: str, key: kms.IKey) -> sqs.Queue:
    """A queue where failures wait for a human: encrypted, TLS only, kept 14 days (the SQS
    maximum: time to investigate), and kept with the stack gone (it may be the only record)."""
    return sqs.Queue(
        scope,
        construct_id,
        encryption=sqs.QueueEncryption.KMS,
        encryption_master_key=key,
        enforce_ssl=True,
        retention_period=Duration.days(14),
        removal_policy=RemovalPolicy.RETAIN,
    )


def name_in_key_policy(
    key: kms.IKey, role: iam.IRole, actions: Sequence[str], services: Sequence[str]
) -> None:
    """Say in the key policy that ``role`` uses ``key`` through ``services`` (s3, kinesis...).

    The key policy's account statement (CDK's default) still delegates to IAM, so the role's
    identity policy stays the gate; these statements make the key policy say who uses the key,
    and how, and keep those roles working if the account statement is ever narrowed.
    """
    key.add_to_resource_policy(
        iam.PolicyStatement(
            sid=("UseBy" + re.sub(r"[^A-Za-z0-9]", "", role.node.path))[:128],
            principals=[iam.ArnPrincipal(role.role_arn)],
            actions=list(actions),
            resources=["*"],  # in a key policy, "*" means this key
            conditions={
                "StringEquals": {
                    "kms:ViaService": [f"{svc}.{Aws.REGION}.amazonaws.com" for svc in services]
                }
            },
        )
    )


class Storage(Construct):
    """The durable state of shardlog. Data resources are retained when the stack goes."""

    def __init__(self, scope: Construct, construct_id: str, *, settings: StackSettings) -> None:
        super().__init__(scope, construct_id)
        self.settings = settings
        self.key = self._data_key()
        self.access_logs_bucket = self._access_logs_bucket()
        self.bucket = self._log_bucket()
        self._write_once_log()
        self.partitions_table = self._table(
            "PartitionsTable",
            settings.partitions_table_name,
            partition_key=C.ATTR_PARTITION_ID,
            # Every commit moves a head: the stream wakes Lambda consumer groups.
            stream=dynamodb.StreamViewType[C.PARTITIONS_STREAM_VIEW_TYPE],
        )
        self.consumers_table = self._table(
            "ConsumersTable",
            settings.consumers_table_name,
            partition_key=C.ATTR_CONSUMER_GROUP,
            sort_key=C.ATTR_PARTITION_ID,
        )
        self._indexes()
        self.stream = self._stream()

    @property
    def tables(self) -> TableNames:
        """The log's tables by their deployed names (tokens until deployed)."""
        return TableNames(self.partitions_table.table_name, self.consumers_table.table_name)

    def _data_key(self) -> kms.Key:
        return kms.Key(
            self,
            "DataKey",
            description="shardlog: encrypts the stream, the log bucket, the tables and the DLQ",
            enable_key_rotation=True,
            removal_policy=RemovalPolicy.RETAIN,
        )

    def _access_logs_bucket(self) -> s3.Bucket:
        # S3 server access logging can only deliver to SSE-S3 buckets, hence no KMS here.
        return hardened_bucket(
            self,
            "AccessLogsBucket",
            # No TLS-version condition here (as deployed so far): only S3's log delivery
            # writes to this bucket.
            minimum_tls_version=None,
            lifecycle_rules=[
                s3.LifecycleRule(
                    id="expire-access-logs",
                    expiration=Duration.days(365),
                    noncurrent_version_expiration=Duration.days(NONCURRENT_VERSION_DAYS),
                )
            ],
        )

    def _log_bucket(self) -> s3.Bucket:
        return hardened_bucket(
            self,
            "LogBucket",
            bucket_name=self.settings.bucket_name,
            key=self.key,
            access_logs=self.access_logs_bucket,
            access_logs_name="log-bucket",
            lifecycle_rules=[
                # Uncommitted leftovers that are whole objects are never deleted by lifecycle:
                # the next writer adopts them (ARCHITECTURE.md, write path step 3).
                s3.LifecycleRule(
                    id="abort-incomplete-uploads",
                    abort_incomplete_multipart_upload_after=Duration.days(ABORT_MULTIPART_DAYS),
                ),
                s3.LifecycleRule(
                    id="expire-noncurrent-versions",
                    noncurrent_version_expiration=Duration.days(NONCURRENT_VERSION_DAYS),
                ),
                *self._trimmed_segments_rule(),
            ],
        )

    def _trimmed_segments_rule(self) -> list[s3.LifecycleRule]:
        """With record retention set: expire the segments retention tagged (below a trim
        horizon already written, shardlog/retention.py). S3 itself deletes them: no principal
        gets a delete right on events/. None without the setting: the log is kept forever."""
        days = self.settings.record_retention_days
        if days is None:
            return []
        rule = expiry_rule(days)  # the one declaration, also applied by the local runtime
        return [
            s3.LifecycleRule(
                id=str(rule["ID"]),
                prefix=C.EVENTS_PREFIX,
                tag_filters={C.EXPIRY_TAG_KEY: C.EXPIRY_TAG_VALUE},
                expiration=Duration.days(days),
                noncurrent_version_expiration=Duration.days(TRIMMED_NONCURRENT_DAYS),
            )
        ]

    def _write_once_log(self) -> None:
        """The committed log is write-once on AWS, whatever any identity policy allows.

        Overwrites: the writer creates every segment with PutObject If-None-Match: * (S3
        answers 412 when the key exists). The condition key s3:if-none-match holds that
        header's value and is absent (Null) when the request has none; s3:ObjectCreationOperation
        is true for the requests that create an object (PutObject, CopyObject,
        CompleteMultipartUpload) and false for CreateMultipartUpload and UploadPart, which
        carry no conditional header (AWS's "enforce conditional writes" recipe). So the deny
        below refuses any creation under events/ without If-None-Match: a plain PUT over a
        segment, an If-Match overwrite, a copy onto one. Deletes: no one deletes a segment
        (a versioned bucket would keep it, but a DeleteObjectVersion would not).

        Object Lock (governance mode) was considered and left off: it is bucket-wide (the
        compaction's deterministic rewrites under compacted/ would pile up locked versions),
        cannot be turned off once on, and governance retention is bypassed by anyone granted
        s3:BypassGovernanceRetention, so it adds little over these denies for a log that
        may need a reviewed erasure one day. The break-glass role (shardlog:breakGlassRoleArn,
        docs/DEPLOY.md) is the one principal the denies exempt.
        """
        events = self.bucket.arn_for_objects(f"{C.EVENTS_PREFIX}*")
        exempt: dict[str, Any] = {}
        if self.settings.break_glass_role_arn:
            exempt = {"ArnNotEquals": {"aws:PrincipalArn": self.settings.break_glass_role_arn}}
        self.bucket.add_to_resource_policy(
            iam.PolicyStatement(
                sid="DenySegmentWritesWithoutIfNoneMatch",
                effect=iam.Effect.DENY,
                principals=[iam.AnyPrincipal()],
                actions=["s3:PutObject"],
                resources=[events],
                conditions={
                    "Null": {"s3:if-none-match": "true"},
                    "Bool": {"s3:ObjectCreationOperation": "true"},
                    **exempt,
                },
            )
        )
        self.bucket.add_to_resource_policy(
            iam.PolicyStatement(
                sid="DenySegmentDeletes",
                effect=iam.Effect.DENY,
                principals=[iam.AnyPrincipal()],
                actions=["s3:DeleteObject*"],
                resources=[events],
                conditions=exempt or None,
            )
        )

    def _indexes(self) -> None:
        """The sparse indexes of the live set and of the groups (shardlog/retirement.py)."""
        self.partitions_table.add_global_secondary_index(
            index_name=C.LIVE_INDEX,
            partition_key=dynamodb.Attribute(name=C.ATTR_LIVE, type=STRING),
            sort_key=dynamodb.Attribute(name=C.ATTR_PARTITION_ID, type=STRING),
            projection_type=dynamodb.ProjectionType.ALL,
        )
        self.consumers_table.add_global_secondary_index(
            index_name=C.GROUPS_INDEX,
            partition_key=dynamodb.Attribute(name=C.ATTR_GROUP_KIND, type=STRING),
            sort_key=dynamodb.Attribute(name=C.ATTR_CONSUMER_GROUP, type=STRING),
            projection_type=dynamodb.ProjectionType.KEYS_ONLY,
        )

    @property
    def live_index_arn(self) -> str:
        return f"{self.partitions_table.table_arn}/index/{C.LIVE_INDEX}"

    @property
    def groups_index_arn(self) -> str:
        return f"{self.consumers_table.table_arn}/index/{C.GROUPS_INDEX}"

    def grant_live_set(self, grantee: iam.IGrantable) -> None:
        """Query the live index (the hot paths' read of the partitions), nothing else of it."""
        grantee.grant_principal.add_to_principal_policy(
            iam.PolicyStatement(actions=["dynamodb:Query"], resources=[self.live_index_arn])
        )

    def grant_consumer_items(
        self, grantee: iam.IGrantable, actions: Sequence[str], *groups: str
    ) -> None:
        """``actions`` on the consumers table, limited to the items of ``groups``."""
        grantee.grant_principal.add_to_principal_policy(
            iam.PolicyStatement(
                actions=list(actions),
                resources=[self.consumers_table.table_arn],
                conditions=own_items(*groups),
            )
        )

    def _table(
        self,
        construct_id: str,
        table_name: str | None,
        *,
        partition_key: str,
        sort_key: str | None = None,
        stream: dynamodb.StreamViewType | None = None,
    ) -> dynamodb.Table:
        return dynamodb.Table(
            self,
            construct_id,
            table_name=table_name,
            partition_key=dynamodb.Attribute(name=partition_key, type=STRING),
            sort_key=dynamodb.Attribute(name=sort_key, type=STRING) if sort_key else None,
            stream=stream,
            billing_mode=dynamodb.BillingMode.PAY_PER_REQUEST,
            point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(
                point_in_time_recovery_enabled=True
            ),
            encryption=dynamodb.TableEncryption.CUSTOMER_MANAGED,
            encryption_key=self.key,
            deletion_protection=True,
            removal_policy=RemovalPolicy.RETAIN,
        )

    def _stream(self) -> kinesis.Stream:
        on_demand = self.settings.on_demand
        mode = kinesis.StreamMode.ON_DEMAND if on_demand else kinesis.StreamMode.PROVISIONED
        return kinesis.Stream(
            self,
            "Stream",
            stream_name=self.settings.stream_name,
            stream_mode=mode,
            shard_count=None if on_demand else self.settings.shard_count,
            # A week by default: time for a stalled ingest to be noticed and fixed before the
            # event source gives records up (StackSettings.max_record_age_s).
            retention_period=Duration.hours(self.settings.retention_hours),
            encryption=kinesis.StreamEncryption.KMS,
            encryption_key=self.key,
        )
