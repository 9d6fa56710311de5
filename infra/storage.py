"""Storage: the S3 log bucket, the partitions and consumers tables and the Kinesis stream.

One customer-managed KMS key (rotated yearly) encrypts the stream, the log bucket, both
tables and the ingest failure queue, so a single key policy and a handful of explicit
grants describe who can read shardlog data.
"""

from __future__ import annotations

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_kinesis as kinesis
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from constructs import Construct

from infra import constants as IC
from infra.settings import StackSettings
from shardlog import constants as C

STRING = dynamodb.AttributeType.STRING  # every key attribute of shardlog is a string
# Old object versions only exist after an overwrite or delete (the log never overwrites;
# a compaction retry rewrites its deterministic Parquet file names): keep them long enough
# to recover from a mistake, then let them go.
NONCURRENT_VERSION_DAYS = 30
# A writer that crashed mid-upload leaves an incomplete multipart upload that no reader
# sees and no writer resumes (uploads are single PutObject calls with If-None-Match); it
# only costs storage, so abort it after a day.
ABORT_MULTIPART_DAYS = 1


class Storage(Construct):
    """The durable state of shardlog. Data resources are retained when the stack goes."""

    def __init__(self, scope: Construct, construct_id: str, *, settings: StackSettings) -> None:
        super().__init__(scope, construct_id)
        self.settings = settings
        self.key = self._data_key()
        self.access_logs_bucket = self._access_logs_bucket()
        self.bucket = self._log_bucket()
        self.partitions_table = self._table(
            "PartitionsTable",
            settings.partitions_table_name,
            partition_key=C.ATTR_PARTITION_ID,
        )
        self.consumers_table = self._table(
            "ConsumersTable",
            settings.consumers_table_name,
            partition_key=C.ATTR_CONSUMER_GROUP,
            sort_key=C.ATTR_PARTITION_ID,
        )
        self.stream = self._stream()

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
        return s3.Bucket(
            self,
            "AccessLogsBucket",
            encryption=s3.BucketEncryption.S3_MANAGED,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            enforce_ssl=True,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            versioned=True,
            lifecycle_rules=[
                s3.LifecycleRule(
                    id="expire-access-logs",
                    expiration=Duration.days(365),
                    noncurrent_version_expiration=Duration.days(NONCURRENT_VERSION_DAYS),
                )
            ],
            removal_policy=RemovalPolicy.RETAIN,
        )

    def _log_bucket(self) -> s3.Bucket:
        return s3.Bucket(
            self,
            "LogBucket",
            bucket_name=self.settings.bucket_name,
            encryption=s3.BucketEncryption.KMS,
            encryption_key=self.key,
            # One data key per bucket instead of one KMS call per PutObject/GetObject.
            bucket_key_enabled=True,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            enforce_ssl=True,
            minimum_tls_version=1.2,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            versioned=True,
            server_access_logs_bucket=self.access_logs_bucket,
            server_access_logs_prefix=f"{IC.ACCESS_LOGS_PREFIX}log-bucket/",
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
            ],
            removal_policy=RemovalPolicy.RETAIN,
        )

    def _table(
        self,
        construct_id: str,
        table_name: str | None,
        *,
        partition_key: str,
        sort_key: str | None = None,
    ) -> dynamodb.Table:
        return dynamodb.Table(
            self,
            construct_id,
            table_name=table_name,
            partition_key=dynamodb.Attribute(name=partition_key, type=STRING),
            sort_key=dynamodb.Attribute(name=sort_key, type=STRING) if sort_key else None,
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
            retention_period=Duration.hours(self.settings.retention_hours),
            encryption=kinesis.StreamEncryption.KMS,
            encryption_key=self.key,
        )
