"""What an error means for the person who met it: one line saying what is wrong and what to do.

``explain`` turns missing credentials, an endpoint nobody answers on, a stream, table or bucket
that does not exist, throttling, refused identities and shardlog's own errors into that line,
or answers None for anything else (a bug, which keeps its traceback). The CLI
(``shardlog.cli.errors``) prints it as ``error: <line>`` with exit 2; the console shows it on
its page.
"""

from __future__ import annotations

import functools
import urllib.error

from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    CredentialRetrievalError,
    HTTPClientError,
    NoCredentialsError,
    NoRegionError,
    PartialCredentialsError,
    SSOError,
    TokenRetrievalError,
)
from botocore.exceptions import ConnectionError as AwsConnectionError

from shardlog import constants as C
from shardlog.config import ShardlogConfig
from shardlog.exceptions import ShardlogError, aws_error_code

NOT_FOUND = frozenset({"ResourceNotFoundException", "NoSuchBucket", "NotFound"})
# What botocore's retry modes treat as throttling: seen here, retries are used up.
THROTTLED = frozenset(
    {
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "RequestThrottledException",
        "TooManyRequestsException",
        "ProvisionedThroughputExceededException",
        "RequestLimitExceeded",
        "BandwidthLimitExceeded",
        "LimitExceededException",
        "RequestThrottled",
        "SlowDown",
    }
)
REFUSED_IDENTITY = frozenset(
    {
        "AccessDenied",
        "AccessDeniedException",
        "UnrecognizedClientException",
        "InvalidClientTokenId",
        "InvalidAccessKeyId",
        "InvalidSignatureException",
        "SignatureDoesNotMatch",
        "ExpiredToken",
        "ExpiredTokenException",
    }
)
NO_CREDENTIALS = (
    NoCredentialsError,
    PartialCredentialsError,
    CredentialRetrievalError,
    TokenRetrievalError,
    SSOError,
)
# The services shardlog calls, in the order a shared operation name is attributed to them.
SERVICES = ("kinesis", "dynamodb", "s3", "emr-serverless")
LOCAL_HINT = "or run `shardlog local up` and use its endpoint"


def explain(exc: BaseException, config: ShardlogConfig | None) -> str | None:
    """One line for an error the user can fix, or None for anything else."""
    config = config or ShardlogConfig()
    if isinstance(exc, NO_CREDENTIALS):
        return (
            f"no AWS credentials ({exc}): set AWS_PROFILE, or AWS_ACCESS_KEY_ID and "
            "AWS_SECRET_ACCESS_KEY (`aws configure` writes them), "
            f"{LOCAL_HINT} (--endpoint-url)"
        )
    if isinstance(exc, NoRegionError):
        return f"no AWS region: pass --region or set {C.ENV_REGION}"
    if isinstance(exc, AwsConnectionError | HTTPClientError):
        endpoint = getattr(exc, "kwargs", {}).get("endpoint_url") or _endpoint(config)
        return (
            f"cannot reach {endpoint} ({type(exc).__name__}) after retries: check "
            f"--endpoint-url / {C.ENV_ENDPOINT_URL} and your network, {LOCAL_HINT}"
        )
    if isinstance(exc, urllib.error.URLError):
        return (
            f"cannot reach the producer API ({exc.reason}): check --api-url, or that "
            "`shardlog local up` is running"
        )
    if isinstance(exc, ClientError):
        return _refused(exc, config)
    if isinstance(exc, ShardlogError):
        cause = exc.__cause__
        if isinstance(cause, ClientError | BotoCoreError):
            return explain(cause, config) or str(exc)
        return str(exc)
    return None


def _refused(exc: ClientError, config: ShardlogConfig) -> str:
    code = aws_error_code(exc) or "an error"
    operation = exc.operation_name
    said = str(exc.response.get("Error", {}).get("Message") or "").rstrip(".")
    where = f"in {config.region} at {_endpoint(config)}"
    if code in NOT_FOUND:
        return _not_found(code, operation, said, where, config)
    if code in THROTTLED:
        return (
            f"AWS throttled {operation} ({code}) {where}, and kept doing so through every "
            "retry: wait a moment and run it again; if it lasts, raise the capacity (Kinesis "
            "shards, DynamoDB throughput)"
        )
    if code in REFUSED_IDENTITY:
        return (
            f"AWS refused {operation} for these credentials ({code}: {said}): check the "
            "identity in use (`aws sts get-caller-identity`) and that its policy allows it"
        )
    return f"AWS refused {operation} {where} ({code}: {said})"


def _not_found(code: str, operation: str, said: str, where: str, config: ShardlogConfig) -> str:
    service = "s3" if code == "NoSuchBucket" else _service_of(operation)
    if service == "kinesis":
        return (
            f"stream {config.stream_name!r} not found {where}: pass --stream (or set "
            f"{C.ENV_STREAM_NAME}) to the stack's StreamName output, {LOCAL_HINT}"
        )
    if service == "dynamodb":
        return (
            f"table not found {where} (shardlog uses {config.partitions_table!r} and "
            f"{config.consumers_table!r}): set {C.ENV_PARTITIONS_TABLE} and "
            f"{C.ENV_CONSUMERS_TABLE} to the stack's PartitionsTableName and "
            f"ConsumersTableName outputs, {LOCAL_HINT}"
        )
    if service == "s3":
        return (
            f"bucket {config.bucket!r} not found {where}: pass --bucket (or set "
            f"{C.ENV_BUCKET_NAME}) to the stack's BucketName output, {LOCAL_HINT}"
        )
    return f"{said or code} ({operation}) {where}: check the names and ids given"


def _endpoint(config: ShardlogConfig) -> str:
    return config.endpoint_url or "AWS"


@functools.cache
def _operations() -> dict[str, str]:
    """Operation name -> the first of SERVICES that has it (botocore's models, no network)."""
    import botocore.session

    session = botocore.session.get_session()
    owners: dict[str, str] = {}
    for service in SERVICES:
        for operation in session.get_service_model(service).operation_names:
            owners.setdefault(operation, service)
    return owners


def _service_of(operation: str) -> str | None:
    return _operations().get(operation)
