"""The stack's settings, read once from CDK context and validated before anything is built.

Context comes from cdk.json, `-c key=value` on the command line (always strings) or the
App(context=...) of a test; every value is parsed here so a typo fails synth with a clear
message instead of deploying something unexpected.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from constructs import Node

from infra import constants as IC
from shardlog import constants as C

# The retention periods CloudWatch Logs accepts (PutRetentionPolicy).
LOG_RETENTION_DAYS: frozenset[int] = frozenset(
    {1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827}
) | {2192, 2557, 2922, 3288, 3653}


class SettingsError(ValueError):
    """A context value is missing its expected type or range."""


def _int(node: Node, key: str, default: int, minimum: int, maximum: int) -> int:
    raw: Any = node.try_get_context(key)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except (TypeError, ValueError) as exc:
        raise SettingsError(f"context {key}={raw!r} is not an integer") from exc
    if not minimum <= value <= maximum:
        raise SettingsError(f"context {key}={value} is outside [{minimum}, {maximum}]")
    return value


def _name(node: Node, key: str) -> str | None:
    raw: Any = node.try_get_context(key)
    return str(raw) if raw not in (None, "") else None


@dataclass(frozen=True)
class StackSettings:
    """Names default to None: CloudFormation then generates them, so stacks can coexist."""

    stream_name: str | None = None
    bucket_name: str | None = None
    partitions_table_name: str | None = None
    consumers_table_name: str | None = None
    shard_count: int = IC.DEFAULT_SHARD_COUNT
    retention_hours: int = IC.DEFAULT_RETENTION_HOURS
    shard_sync_rate_minutes: int = IC.DEFAULT_SHARD_SYNC_RATE_MINUTES
    lease_duration_ms: int = C.DEFAULT_LEASE_DURATION_MS
    segment_max_records: int = C.DEFAULT_SEGMENT_MAX_RECORDS
    segment_max_bytes: int = C.DEFAULT_SEGMENT_MAX_BYTES
    api_rate_limit: int = IC.DEFAULT_API_RATE_LIMIT
    api_burst_limit: int = IC.DEFAULT_API_BURST_LIMIT
    log_retention_days: int = IC.DEFAULT_LOG_RETENTION_DAYS
    iterator_age_alarm_minutes: int = IC.DEFAULT_ITERATOR_AGE_ALARM_MINUTES
    alarm_email: str | None = None

    @property
    def on_demand(self) -> bool:
        return self.shard_count == 0

    @classmethod
    def from_context(cls, node: Node) -> StackSettings:
        settings = cls(
            stream_name=_name(node, IC.CTX_STREAM_NAME),
            bucket_name=_name(node, IC.CTX_BUCKET_NAME),
            partitions_table_name=_name(node, IC.CTX_PARTITIONS_TABLE),
            consumers_table_name=_name(node, IC.CTX_CONSUMERS_TABLE),
            # 500 is the default per-stream shard quota; raise it here along with the quota.
            shard_count=_int(node, IC.CTX_SHARD_COUNT, IC.DEFAULT_SHARD_COUNT, 0, 500),
            # Kinesis accepts 24 hours to 365 days of retention.
            retention_hours=_int(
                node, IC.CTX_RETENTION_HOURS, IC.DEFAULT_RETENTION_HOURS, 24, 8760
            ),
            shard_sync_rate_minutes=_int(
                node, IC.CTX_SHARD_SYNC_RATE_MINUTES, IC.DEFAULT_SHARD_SYNC_RATE_MINUTES, 1, 1440
            ),
            lease_duration_ms=_int(
                node, IC.CTX_LEASE_DURATION_MS, C.DEFAULT_LEASE_DURATION_MS, 2_000, 3_600_000
            ),
            segment_max_records=_int(
                node, IC.CTX_SEGMENT_MAX_RECORDS, C.DEFAULT_SEGMENT_MAX_RECORDS, 1, 100_000
            ),
            segment_max_bytes=_int(
                node, IC.CTX_SEGMENT_MAX_BYTES, C.DEFAULT_SEGMENT_MAX_BYTES, 1024, 256 * C.MIB
            ),
            api_rate_limit=_int(node, IC.CTX_API_RATE_LIMIT, IC.DEFAULT_API_RATE_LIMIT, 1, 10_000),
            api_burst_limit=_int(
                node, IC.CTX_API_BURST_LIMIT, IC.DEFAULT_API_BURST_LIMIT, 1, 5_000
            ),
            log_retention_days=_int(
                node, IC.CTX_LOG_RETENTION_DAYS, IC.DEFAULT_LOG_RETENTION_DAYS, 1, 3653
            ),
            iterator_age_alarm_minutes=_int(
                node,
                IC.CTX_ITERATOR_AGE_ALARM_MINUTES,
                IC.DEFAULT_ITERATOR_AGE_ALARM_MINUTES,
                1,
                7 * 24 * 60,
            ),
            alarm_email=_name(node, IC.CTX_ALARM_EMAIL),
        )
        if settings.log_retention_days not in LOG_RETENTION_DAYS:
            raise SettingsError(
                f"context {IC.CTX_LOG_RETENTION_DAYS}={settings.log_retention_days} is not one of"
                f" CloudWatch Logs' retention periods {sorted(LOG_RETENTION_DAYS)}"
            )
        # See INGEST_TIMEOUT_S: a live invocation must never outlast the lease it renewed.
        if settings.lease_duration_ms < 2 * IC.INGEST_TIMEOUT_S * 1000:
            raise SettingsError(
                f"context {IC.CTX_LEASE_DURATION_MS}={settings.lease_duration_ms} must be at least"
                f" twice the ingest timeout ({IC.INGEST_TIMEOUT_S} s)"
            )
        return settings
