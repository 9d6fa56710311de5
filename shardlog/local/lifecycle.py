"""S3 lifecycle expiration, which the embedded AWS stores but never runs.

moto keeps a bucket's lifecycle configuration (Put/GetBucketLifecycleConfiguration) and
applies none of it. ``expire_now`` does what S3's lifecycle would have done by ``now_ms``
(an injected clock) for the one action shardlog's retention relies on: an enabled rule's
``Expiration.Days`` over the current objects its filter selects (a prefix and/or tags, alone
or under ``And``). As S3 does, an object expires at the first midnight UTC at least
``Days`` after its creation (LastModified), never earlier; in a versioned bucket the
expiry is a delete marker, the data stays a noncurrent version (as on S3). The other
actions (noncurrent versions, multipart uploads, transitions) are left alone.

It deletes as S3 itself would: no principal of the system makes these calls on AWS.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from botocore.exceptions import ClientError

from shardlog.aws import Clients
from shardlog.exceptions import aws_error_code

DAY_MS = 24 * 3600 * 1000
_NO_CONFIGURATION = "NoSuchLifecycleConfiguration"


def rules(clients: Clients, bucket: str) -> list[dict[str, Any]]:
    """The bucket's lifecycle rules ([] when it has none)."""
    try:
        response = clients.s3.get_bucket_lifecycle_configuration(Bucket=bucket)
    except ClientError as exc:
        if aws_error_code(exc) == _NO_CONFIGURATION:
            return []
        raise
    return list(response.get("Rules", []))


def put_rule(clients: Clients, bucket: str, rule: Mapping[str, Any]) -> None:
    """Add ``rule`` to the bucket's lifecycle configuration (replacing one of the same ID),
    as the stack declares it on AWS."""
    kept = [r for r in rules(clients, bucket) if r.get("ID") != rule["ID"]]
    clients.s3.put_bucket_lifecycle_configuration(
        Bucket=bucket, LifecycleConfiguration={"Rules": [*kept, dict(rule)]}
    )


def expires_at_ms(created_ms: int, days: int) -> int:
    """When S3 expires an object created at ``created_ms`` under ``Days = days``: the first
    midnight UTC at or after creation + days."""
    due = created_ms + days * DAY_MS
    return -(-due // DAY_MS) * DAY_MS


def selection(rule: Mapping[str, Any]) -> tuple[str, dict[str, str]]:
    """The prefix and the tags (all must match) a rule's filter selects objects by."""
    filt = rule.get("Filter", {})
    if "And" in filt:
        filt = filt["And"]
        tags = {t["Key"]: t["Value"] for t in filt.get("Tags", [])}
    else:
        tag = filt.get("Tag")
        tags = {tag["Key"]: tag["Value"]} if tag else {}
    return str(filt.get("Prefix", rule.get("Prefix", ""))), tags


def expire_now(clients: Clients, bucket: str, now_ms: int) -> list[str]:
    """Apply the bucket's enabled ``Expiration.Days`` rules as of ``now_ms``; the keys
    expired."""
    expired: list[str] = []
    for rule in rules(clients, bucket):
        days = rule.get("Expiration", {}).get("Days")
        if rule.get("Status") != "Enabled" or days is None:
            continue
        prefix, tags = selection(rule)
        expired.extend(_expire(clients, bucket, prefix, tags, int(days), now_ms))
    return expired


def _expire(
    clients: Clients, bucket: str, prefix: str, tags: Mapping[str, str], days: int, now_ms: int
) -> list[str]:
    expired = []
    for page in clients.s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for obj in page.get("Contents", []):
            created_ms = int(obj["LastModified"].timestamp() * 1000)
            if now_ms < expires_at_ms(created_ms, days):
                continue
            if tags and not _has_tags(clients, bucket, obj["Key"], tags):
                continue
            clients.s3.delete_object(Bucket=bucket, Key=obj["Key"])
            expired.append(obj["Key"])
    return expired


def _has_tags(clients: Clients, bucket: str, key: str, wanted: Mapping[str, str]) -> bool:
    tag_set = clients.s3.get_object_tagging(Bucket=bucket, Key=key).get("TagSet", [])
    have = {t["Key"]: t["Value"] for t in tag_set}
    return all(have.get(k) == v for k, v in wanted.items())
