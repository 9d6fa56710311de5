"""The embedded AWS: moto's server on 127.0.0.1 with shardlog's fidelity patches, and
shardlog's resources.

Every component talks to it over HTTP through boto3 with ``endpoint_url``, the
same code paths as against AWS. The server runs in this process (``EmbeddedAWS``: tests
that read moto's state or record requests in memory need that), or in a process of its own
(``shardlog.local.server_process.EmbeddedAWSProcess``: its interpreter lock is then its
own, not the runtime's). ``resource_specs`` is what gets created; the
CDK parity test compares it with the synthesized template.
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

from botocore.exceptions import ClientError

from shardlog import constants as C
from shardlog.aws import Clients
from shardlog.config import ShardlogConfig
from shardlog.exceptions import aws_error_code
from shardlog.local import (
    cloudformation,
    conditional_writes,
    dynamodb_answers,
    emr_serverless,
    event_source_mappings,
    expressions,
    glue_fidelity,
    http_server,
    kinesis_fidelity,
    transactions,
)


def apply_fidelity() -> None:
    """Patch moto's in-process backends where shardlog depends on AWS's behaviour
    (idempotent): in the process that serves the embedded AWS, before its first request."""
    kinesis_fidelity.apply()
    conditional_writes.apply()
    transactions.apply()  # a cancelled transaction undone in place, not by table copies
    expressions.apply()  # update expressions parsed once, their sections counted once
    dynamodb_answers.apply()  # item answers (GetItem, Query, ...) without moto's serializer
    emr_serverless.apply()  # job runs execute with a local spark-submit
    cloudformation.apply()  # the stack's EMR application, Glue db, Athena workgroup (lazily)
    event_source_mappings.apply()  # mappings leave streams and queues to the local sources
    glue_fidelity.apply()  # UpdateTable honours VersionId: Iceberg's optimistic lock
    http_server.remember_action_names()  # moto lists a class's methods on every request
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one line per request otherwise


class EmbeddedServer(Protocol):
    """The embedded AWS as the local runtime uses it, wherever its server runs."""

    host: str
    port: int

    def start(self) -> str: ...

    @property
    def endpoint_url(self) -> str: ...

    def stop(self) -> None: ...


class EmbeddedAWS:
    """moto's server app (behind keep-alive connections, ``shardlog.local.http_server``)
    with shardlog's fidelity patches applied, in this process."""

    def __init__(self, port: int = 0, host: str = "127.0.0.1") -> None:
        if host not in ("127.0.0.1", "localhost"):
            raise ValueError("the embedded AWS only listens on the loopback interface")
        self.host = host
        self.port = port
        self._server: Any = None

    def start(self) -> str:
        from shardlog.local.http_server import KeepAliveMotoServer

        apply_fidelity()
        self._server = KeepAliveMotoServer(self.host, self.port)
        self.port = self._server.start()
        return self.endpoint_url

    @property
    def endpoint_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()
            self._server = None

    def __enter__(self) -> EmbeddedAWS:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def live_index() -> dict[str, Any]:
    """The partitions table's sparse index of the live set (shardlog/retirement.py)."""
    return {
        "IndexName": C.LIVE_INDEX,
        "KeySchema": [
            {"AttributeName": C.ATTR_LIVE, "KeyType": "HASH"},
            {"AttributeName": C.ATTR_PARTITION_ID, "KeyType": "RANGE"},
        ],
        "Projection": {"ProjectionType": "ALL"},
    }


def groups_index() -> dict[str, Any]:
    """The consumers table's sparse index of the groups (only "$group" items have a kind)."""
    return {
        "IndexName": C.GROUPS_INDEX,
        "KeySchema": [
            {"AttributeName": C.ATTR_GROUP_KIND, "KeyType": "HASH"},
            {"AttributeName": C.ATTR_CONSUMER_GROUP, "KeyType": "RANGE"},
        ],
        "Projection": {"ProjectionType": "KEYS_ONLY"},
    }


def resource_specs(config: ShardlogConfig, shard_count: int) -> dict[str, Any]:
    """The resources the local runtime creates, in the shape of their create calls."""
    string = "S"
    return {
        "partitions_table": {
            "TableName": config.partitions_table,
            "KeySchema": [{"AttributeName": C.ATTR_PARTITION_ID, "KeyType": "HASH"}],
            "AttributeDefinitions": [
                {"AttributeName": C.ATTR_PARTITION_ID, "AttributeType": string},
                {"AttributeName": C.ATTR_LIVE, "AttributeType": string},
            ],
            "GlobalSecondaryIndexes": [live_index()],
            "BillingMode": "PAY_PER_REQUEST",
            "StreamSpecification": {
                "StreamEnabled": True,
                "StreamViewType": C.PARTITIONS_STREAM_VIEW_TYPE,
            },
        },
        "consumers_table": {
            "TableName": config.consumers_table,
            "KeySchema": [
                {"AttributeName": C.ATTR_CONSUMER_GROUP, "KeyType": "HASH"},
                {"AttributeName": C.ATTR_PARTITION_ID, "KeyType": "RANGE"},
            ],
            "AttributeDefinitions": [
                {"AttributeName": C.ATTR_CONSUMER_GROUP, "AttributeType": string},
                {"AttributeName": C.ATTR_PARTITION_ID, "AttributeType": string},
                {"AttributeName": C.ATTR_GROUP_KIND, "AttributeType": string},
            ],
            "GlobalSecondaryIndexes": [groups_index()],
            "BillingMode": "PAY_PER_REQUEST",
        },
        "stream": {"StreamName": config.stream_name, "ShardCount": shard_count},
        "bucket": {"Bucket": config.bucket},
        "event_source": {
            "BatchSize": C.INGEST_BATCH_SIZE,
            "MaximumBatchingWindowInSeconds": C.INGEST_BATCHING_WINDOW_S,
            "ParallelizationFactor": C.INGEST_PARALLELIZATION_FACTOR,
            "StartingPosition": C.INGEST_STARTING_POSITION,
            "BisectBatchOnFunctionError": True,
            "MaximumRetryAttempts": -1,
        },
        # Lambda consumer groups (shardlog.local.lambda_consumers builds these per group).
        "lambda_consumers": {
            "wake_event_source": {
                "BatchSize": C.LAMBDA_CONSUMER_WAKE_BATCH_SIZE,
                "FunctionResponseTypes": ["ReportBatchItemFailures"],
            },
            "wake_queue": {
                "FifoQueue": True,
                "DeduplicationScope": C.LAMBDA_CONSUMER_WAKE_DEDUPLICATION_SCOPE,
                "FifoThroughputLimit": C.LAMBDA_CONSUMER_WAKE_FIFO_THROUGHPUT_LIMIT,
                "maxReceiveCount": C.LAMBDA_CONSUMER_WAKE_MAX_RECEIVES,
                "VisibilityTimeout": C.LAMBDA_CONSUMER_RUNNER_TIMEOUT_S + 60,
            },
            "runner_timeout_s": C.LAMBDA_CONSUMER_RUNNER_TIMEOUT_S,
            "stream_event_source": {
                "BatchSize": C.WAKER_BATCH_SIZE,
                "StartingPosition": C.WAKER_STARTING_POSITION,
            },
            "sweep_rate_minutes": C.LAMBDA_CONSUMER_SWEEP_RATE_MINUTES,
        },
    }


def provision(clients: Clients, config: ShardlogConfig, shard_count: int = 4) -> None:
    """Create the stream, tables and bucket (idempotent), encrypted and private."""
    specs = resource_specs(config, shard_count)
    ddb = clients.dynamodb
    for table in ("partitions_table", "consumers_table"):
        try:
            ddb.create_table(**specs[table], SSESpecification={"Enabled": True})
        except ClientError as exc:
            if aws_error_code(exc) != "ResourceInUseException":
                raise
    for table in ("partitions_table", "consumers_table"):
        ddb.get_waiter("table_exists").wait(
            TableName=specs[table]["TableName"], WaiterConfig={"Delay": 0.1, "MaxAttempts": 100}
        )
    kinesis = clients.kinesis
    try:
        kinesis.create_stream(**specs["stream"])
    except ClientError as exc:
        if aws_error_code(exc) != "ResourceInUseException":
            raise
    kinesis.get_waiter("stream_exists").wait(
        StreamName=config.stream_name, WaiterConfig={"Delay": 0.1, "MaxAttempts": 100}
    )
    s3 = clients.s3
    try:
        if clients.region == "us-east-1":
            s3.create_bucket(Bucket=config.bucket)
        else:
            s3.create_bucket(
                Bucket=config.bucket,
                CreateBucketConfiguration={"LocationConstraint": clients.region},
            )
    except ClientError as exc:
        if aws_error_code(exc) not in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
            raise
    s3.put_public_access_block(
        Bucket=config.bucket,
        PublicAccessBlockConfiguration={
            "BlockPublicAcls": True,
            "IgnorePublicAcls": True,
            "BlockPublicPolicy": True,
            "RestrictPublicBuckets": True,
        },
    )
    s3.put_bucket_encryption(
        Bucket=config.bucket,
        ServerSideEncryptionConfiguration={
            "Rules": [{"ApplyServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256"}}]
        },
    )
    # No TLS-only bucket policy here: moto enforces it, and the embedded AWS speaks
    # plain HTTP on loopback. The CDK stack attaches it (enforceSSL) on AWS.
