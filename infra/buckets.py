"""The stack's S3 buckets, hardened in one place: public access blocked, objects owned by the
bucket owner (no ACLs), TLS only, versioned, retained when the stack goes, and encrypted
with a customer-managed key (and a bucket key: one data key per bucket instead of one KMS
call per request) or, where S3 requires it, with S3-managed keys.
"""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import RemovalPolicy
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from constructs import Construct

from infra import constants as IC


def hardened_bucket(
    scope: Construct,
    construct_id: str,
    *,
    lifecycle_rules: Sequence[s3.LifecycleRule],
    key: kms.IKey | None = None,
    access_logs: s3.IBucket | None = None,
    access_logs_name: str | None = None,
    bucket_name: str | None = None,
    minimum_tls_version: float | None = 1.2,
) -> s3.Bucket:
    """A bucket with every hardening above; ``key`` None: SSE-S3 (S3 server access logging
    delivers only there). With ``access_logs``, its access logs go there under
    ``s3-access/<access_logs_name>/``."""
    return s3.Bucket(
        scope,
        construct_id,
        bucket_name=bucket_name,
        encryption=s3.BucketEncryption.KMS if key else s3.BucketEncryption.S3_MANAGED,
        encryption_key=key,
        bucket_key_enabled=True if key else None,
        block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
        enforce_ssl=True,
        minimum_tls_version=minimum_tls_version,
        object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
        versioned=True,
        server_access_logs_bucket=access_logs,
        server_access_logs_prefix=(
            f"{IC.ACCESS_LOGS_PREFIX}{access_logs_name}/" if access_logs else None
        ),
        lifecycle_rules=list(lifecycle_rules),
        removal_policy=RemovalPolicy.RETAIN,
    )
