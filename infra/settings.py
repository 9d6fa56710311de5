"""The stack's settings, read once from CDK context and validated before anything is built.

Context comes from cdk.json, `-c key=value` on the command line (always strings) or the
App(context=...) of a test; every value is parsed here so a typo fails synth with a clear
message instead of deploying something unexpected. Settings a handler also reads are
validated with the handler's own schema (shardlog/settings.py), so the stack never deploys
a value the handler would refuse at cold start.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from constructs import Node
from pydantic import Field

from infra import constants as IC
from infra.assets import REPO_ROOT
from shardlog import constants as C
from shardlog import settings as S
from shardlog.consumer.settings import validate_group
from shardlog.exceptions import ConfigurationError, ValidationError
from shardlog.lambda_consumer.settings import LambdaConsumerSettings

# The retention periods CloudWatch Logs accepts (PutRetentionPolicy).
LOG_RETENTION_DAYS: frozenset[int] = frozenset(
    {1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827}
) | {2192, 2557, 2922, 3288, 3653}

# --- settings only the stack reads (the handlers' are in shardlog/settings.py) ----------------
# 500 is the default per-stream shard quota; raise it here along with the quota. 0: on-demand.
ShardCount = Annotated[int, Field(ge=0, le=500)]
# Kinesis accepts 24 hours to 365 days of retention.
RetentionHours = Annotated[int, Field(ge=24, le=8760)]
ShardSyncRateMinutes = Annotated[int, Field(ge=1, le=1440)]
ApiRateLimit = Annotated[int, Field(ge=1, le=10_000)]
ApiBurstLimit = Annotated[int, Field(ge=1, le=5_000)]
LogRetentionDays = Annotated[int, Field(ge=1, le=3653)]
RecordRetentionDays = Annotated[
    int, Field(ge=C.MIN_RECORD_RETENTION_DAYS, le=C.MAX_RECORD_RETENTION_DAYS)
]
IteratorAgeAlarmMinutes = Annotated[int, Field(ge=1, le=7 * 24 * 60)]
# Lambda's own cap on a function's reserved concurrency is the account's limit; 1000 is the
# default account limit.
ReservedConcurrency = Annotated[int, Field(ge=1, le=1000)]
CompactionRateMinutes = Annotated[int, Field(ge=5, le=1440)]
AnalyticsRateMinutes = Annotated[int, Field(ge=5, le=10080)]
# Maintenance removes files older than a grace of hours: more often than hourly buys nothing.
MaintenanceRateMinutes = Annotated[int, Field(ge=60, le=10080)]
AlarmEmail = Annotated[str, Field(pattern=r"^[^@\s]+@[^@\s]+\.[^@\s]+$", max_length=254)]
IAM_ARN = r"^arn:aws[a-z-]*:iam::[0-9]{12}:"
IAM_PATH_AND_NAME = r"/[A-Za-z0-9+=,.@_/-]+$"
RoleArn = Annotated[str, Field(pattern=IAM_ARN + "role" + IAM_PATH_AND_NAME, max_length=2048)]
PrincipalArn = Annotated[
    str, Field(pattern=IAM_ARN + "(role|user)" + IAM_PATH_AND_NAME, max_length=2048)
]


class SettingsError(ValueError):
    """A context value is missing its expected type or range."""


def parse_context(key: str, setting: Any, raw: Any) -> Any:
    """``raw`` (from context ``key``) validated as ``setting``, or a SettingsError naming key."""
    try:
        return S.parse_setting(setting, raw)
    except ValueError as exc:
        raise SettingsError(f"context {key}={raw!r}: {exc}") from None


def context_setting(node: Node, key: str, setting: Any, default: Any) -> Any:
    """The context value at ``key`` validated as ``setting``; ``default`` when unset."""
    raw: Any = node.try_get_context(key)
    if raw is None or raw == "":
        return default
    return parse_context(key, setting, raw)


def context_list(node: Node, key: str) -> tuple[str, ...]:
    """A list from cdk.json, or from `-c key=a,b` / `-c 'key=["a","b"]'` on the command line."""
    raw: Any = node.try_get_context(key)
    if raw is None or raw == "" or raw == []:
        return ()
    if isinstance(raw, str):
        text = raw.strip()
        raw = json.loads(text) if text.startswith("[") else text.split(",")
    if not isinstance(raw, list) or not all(isinstance(item, str) for item in raw):
        raise SettingsError(f"context {key}={raw!r} is not a list of strings")
    return tuple(item.strip() for item in raw if item.strip())


def _name(node: Node, key: str, setting: Any) -> str | None:
    value: str | None = context_setting(node, key, setting, None)
    return value


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
    segment_compression: S.SegmentCompression = C.DEFAULT_SEGMENT_COMPRESSION
    dedupe_window_s: int = C.DEFAULT_DEDUPE_WINDOW_S
    api_rate_limit: int = IC.DEFAULT_API_RATE_LIMIT
    api_burst_limit: int = IC.DEFAULT_API_BURST_LIMIT
    log_retention_days: int = IC.DEFAULT_LOG_RETENTION_DAYS
    record_retention_days: int | None = None  # None: keep the log forever
    iterator_age_alarm_minutes: int = IC.DEFAULT_ITERATOR_AGE_ALARM_MINUTES
    alarm_email: str | None = None
    # True only when asked for explicitly: alarms then reach a topic with no subscriber.
    no_alarm_subscriber: bool = False
    # None: 2 x the provisioned shards, or IC.DEFAULT_ON_DEMAND_RESERVED_CONCURRENCY.
    ingest_reserved_concurrency: int | None = None
    break_glass_role_arn: str | None = None
    producer_principal_arns: tuple[str, ...] = ()
    consumer_groups: tuple[str, ...] = ()
    lambda_consumers: tuple[LambdaConsumerSettings, ...] = ()
    # The ingest event source: the latency/cost dial (docs/SCALE.md).
    ingest_batch_size: int = C.INGEST_BATCH_SIZE
    ingest_batching_window_ms: int = C.DEFAULT_INGEST_BATCHING_WINDOW_MS
    ingest_fan_out: bool = False

    @property
    def on_demand(self) -> bool:
        return self.shard_count == 0

    @property
    def ingest_concurrency(self) -> int:
        """The ingest function's reserved concurrency: one invocation per open shard at most
        (parallelization factor 1), with room for the children of a split."""
        if self.ingest_reserved_concurrency is not None:
            return self.ingest_reserved_concurrency
        if self.on_demand:
            return IC.DEFAULT_ON_DEMAND_RESERVED_CONCURRENCY
        return 2 * self.shard_count

    @property
    def max_record_age_s(self) -> int:
        """How old a record may get before the event source mapping gives up on it.

        Below the stream's retention, so a record is never trimmed from the stream while
        ingest still retries it (the failure queue gets the records Lambda discards, not
        those the stream trims).
        Given up instead, its shard and sequence range land in the failure queue (alarmed),
        with the rest of the retention left to replay it from the stream.
        """
        retention_s = self.retention_hours * 3600
        age_s = retention_s * IC.RECORD_AGE_PERCENT_OF_RETENTION // 100
        return min(age_s, IC.ESM_MAX_RECORD_AGE_S)

    @classmethod
    def from_context(cls, node: Node) -> StackSettings:
        settings = cls(
            stream_name=_name(node, IC.CTX_STREAM_NAME, S.StreamName),
            bucket_name=_name(node, IC.CTX_BUCKET_NAME, S.BucketName),
            partitions_table_name=_name(node, IC.CTX_PARTITIONS_TABLE, S.TableName),
            consumers_table_name=_name(node, IC.CTX_CONSUMERS_TABLE, S.TableName),
            shard_count=context_setting(
                node, IC.CTX_SHARD_COUNT, ShardCount, IC.DEFAULT_SHARD_COUNT
            ),
            retention_hours=context_setting(
                node, IC.CTX_RETENTION_HOURS, RetentionHours, IC.DEFAULT_RETENTION_HOURS
            ),
            shard_sync_rate_minutes=context_setting(
                node,
                IC.CTX_SHARD_SYNC_RATE_MINUTES,
                ShardSyncRateMinutes,
                IC.DEFAULT_SHARD_SYNC_RATE_MINUTES,
            ),
            lease_duration_ms=context_setting(
                node, IC.CTX_LEASE_DURATION_MS, S.LeaseDurationMs, C.DEFAULT_LEASE_DURATION_MS
            ),
            segment_max_records=context_setting(
                node,
                IC.CTX_SEGMENT_MAX_RECORDS,
                S.SegmentMaxRecords,
                C.DEFAULT_SEGMENT_MAX_RECORDS,
            ),
            segment_max_bytes=context_setting(
                node, IC.CTX_SEGMENT_MAX_BYTES, S.SegmentMaxBytes, C.DEFAULT_SEGMENT_MAX_BYTES
            ),
            segment_compression=context_setting(
                node,
                IC.CTX_SEGMENT_COMPRESSION,
                S.SegmentCompression,
                C.DEFAULT_SEGMENT_COMPRESSION,
            ),
            dedupe_window_s=context_setting(
                node, IC.CTX_DEDUPE_WINDOW_S, S.DedupeWindowS, C.DEFAULT_DEDUPE_WINDOW_S
            ),
            api_rate_limit=context_setting(
                node, IC.CTX_API_RATE_LIMIT, ApiRateLimit, IC.DEFAULT_API_RATE_LIMIT
            ),
            api_burst_limit=context_setting(
                node, IC.CTX_API_BURST_LIMIT, ApiBurstLimit, IC.DEFAULT_API_BURST_LIMIT
            ),
            log_retention_days=context_setting(
                node, IC.CTX_LOG_RETENTION_DAYS, LogRetentionDays, IC.DEFAULT_LOG_RETENTION_DAYS
            ),
            record_retention_days=context_setting(
                node, IC.CTX_RECORD_RETENTION_DAYS, RecordRetentionDays, None
            ),
            iterator_age_alarm_minutes=context_setting(
                node,
                IC.CTX_ITERATOR_AGE_ALARM_MINUTES,
                IteratorAgeAlarmMinutes,
                IC.DEFAULT_ITERATOR_AGE_ALARM_MINUTES,
            ),
            alarm_email=_name(node, IC.CTX_ALARM_EMAIL, AlarmEmail),
            no_alarm_subscriber=context_setting(node, IC.CTX_NO_ALARM_SUBSCRIBER, bool, False),
            ingest_reserved_concurrency=context_setting(
                node, IC.CTX_INGEST_RESERVED_CONCURRENCY, ReservedConcurrency, None
            ),
            break_glass_role_arn=_name(node, IC.CTX_BREAK_GLASS_ROLE_ARN, RoleArn),
            producer_principal_arns=tuple(
                parse_context(IC.CTX_PRODUCER_PRINCIPAL_ARNS, PrincipalArn, arn)
                for arn in context_list(node, IC.CTX_PRODUCER_PRINCIPAL_ARNS)
            ),
            consumer_groups=_consumer_groups(node),
            lambda_consumers=_lambda_consumers(node),
            ingest_batch_size=context_setting(
                node, IC.CTX_INGEST_BATCH_SIZE, S.IngestBatchSize, C.INGEST_BATCH_SIZE
            ),
            ingest_batching_window_ms=context_setting(
                node,
                IC.CTX_INGEST_BATCHING_WINDOW_MS,
                S.IngestBatchingWindowMs,
                C.DEFAULT_INGEST_BATCHING_WINDOW_MS,
            ),
            ingest_fan_out=context_setting(node, IC.CTX_INGEST_FAN_OUT, bool, False),
        )
        settings.check()
        return settings

    def check(self) -> None:
        """The rules that tie settings together."""
        if self.log_retention_days not in LOG_RETENTION_DAYS:
            raise SettingsError(
                f"context {IC.CTX_LOG_RETENTION_DAYS}={self.log_retention_days} is not one of"
                f" CloudWatch Logs' retention periods {sorted(LOG_RETENTION_DAYS)}"
            )
        # See INGEST_TIMEOUT_S: a live invocation must never outlast the lease it renewed.
        if self.lease_duration_ms < 2 * IC.INGEST_TIMEOUT_S * 1000:
            raise SettingsError(
                f"context {IC.CTX_LEASE_DURATION_MS}={self.lease_duration_ms} must be at least"
                f" twice the ingest timeout ({IC.INGEST_TIMEOUT_S} s)"
            )
        if self.alarm_email is None and not self.no_alarm_subscriber:
            raise SettingsError(
                "no one would hear the alarms: give an address with "
                f"-c {IC.CTX_ALARM_EMAIL}=ops@example.com, or deploy without a subscriber on "
                f"purpose with -c {IC.CTX_NO_ALARM_SUBSCRIBER}=true (then subscribe to the "
                f"{IC.OUTPUT_ALARM_TOPIC_ARN} output yourself)"
            )
        if self.alarm_email is not None and self.no_alarm_subscriber:
            raise SettingsError(
                f"context {IC.CTX_ALARM_EMAIL} and {IC.CTX_NO_ALARM_SUBSCRIBER}=true contradict "
                "each other: keep one"
            )
        if not self.on_demand and self.ingest_concurrency < self.shard_count:
            raise SettingsError(
                f"context {IC.CTX_INGEST_RESERVED_CONCURRENCY}={self.ingest_concurrency} is "
                f"below {IC.CTX_SHARD_COUNT}={self.shard_count}: some shards would never be "
                "ingested (one invocation per shard at a time)"
            )
        both = set(self.consumer_groups) & {g.group for g in self.lambda_consumers}
        if both:
            raise SettingsError(
                f"groups {sorted(both)} are in both {IC.CTX_CONSUMER_GROUPS} and "
                f"{IC.CTX_LAMBDA_CONSUMERS}: a group is workers or a Lambda function, not both"
            )
        segments = math.ceil(self.ingest_batch_size / self.segment_max_records)
        if segments > IC.INGEST_MAX_SEGMENTS_PER_BATCH:
            raise SettingsError(
                f"context {IC.CTX_INGEST_BATCH_SIZE}={self.ingest_batch_size} with "
                f"{IC.CTX_SEGMENT_MAX_RECORDS}={self.segment_max_records} cuts a batch into "
                f"{segments} segments, more than the {IC.INGEST_MAX_SEGMENTS_PER_BATCH} the "
                f"writer creates within the ingest timeout ({IC.INGEST_TIMEOUT_S} s): raise "
                f"{IC.CTX_SEGMENT_MAX_RECORDS} or lower {IC.CTX_INGEST_BATCH_SIZE}"
            )
        if self.iterator_age_alarm_minutes * 60 >= self.max_record_age_s:
            raise SettingsError(
                f"context {IC.CTX_ITERATOR_AGE_ALARM_MINUTES}={self.iterator_age_alarm_minutes}"
                f" would alarm only after records are given up ({self.max_record_age_s} s, "
                f"from {IC.CTX_RETENTION_HOURS})"
            )


def lambda_consumer_from_context(raw: Any) -> LambdaConsumerSettings:
    """One group of ``shardlog:lambdaConsumers``: its settings with camelCase names
    (``functionArn`` or ``functionName``, ``batchSize``, ``filterCriteria``, ...), checked
    by the group's own schema (the runner's and `shardlog local up`'s)."""
    if not isinstance(raw, dict):
        raise SettingsError(f"context {IC.CTX_LAMBDA_CONSUMERS}: {raw!r} is not an object")
    try:
        return LambdaConsumerSettings.from_camel(raw)
    except ConfigurationError as exc:
        raise SettingsError(f"context {IC.CTX_LAMBDA_CONSUMERS}, {exc}") from None


def _lambda_consumers(node: Node) -> tuple[LambdaConsumerSettings, ...]:
    raw: Any = node.try_get_context(IC.CTX_LAMBDA_CONSUMERS)
    if raw in (None, "", []):
        return ()
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError as exc:
            raise SettingsError(f"context {IC.CTX_LAMBDA_CONSUMERS} is not JSON: {exc}") from None
    if not isinstance(raw, list):
        raise SettingsError(f"context {IC.CTX_LAMBDA_CONSUMERS} must be a list of groups")
    groups = tuple(lambda_consumer_from_context(item) for item in raw)
    names = [g.group for g in groups]
    if len(set(names)) != len(names):
        raise SettingsError(f"context {IC.CTX_LAMBDA_CONSUMERS} names a group twice: {names}")
    return groups


def _consumer_groups(node: Node) -> tuple[str, ...]:
    groups = context_list(node, IC.CTX_CONSUMER_GROUPS)
    for group in groups:
        try:
            validate_group(group)
        except ValidationError as exc:
            raise SettingsError(f"context {IC.CTX_CONSUMER_GROUPS}: {exc}") from None
    if len(set(groups)) != len(groups):
        raise SettingsError(f"context {IC.CTX_CONSUMER_GROUPS} names a group twice: {groups}")
    return groups


@dataclass(frozen=True)
class AnalyticsSettings:
    """The schedule of the Spark runs and the archive to ship, from CDK context."""

    compaction_rate_minutes: int = IC.DEFAULT_COMPACTION_RATE_MINUTES
    analytics_rate_minutes: int = IC.DEFAULT_ANALYTICS_RATE_MINUTES
    maintenance_rate_minutes: int = IC.DEFAULT_MAINTENANCE_RATE_MINUTES
    compaction_max_records: int = C.DEFAULT_COMPACTION_MAX_RECORDS
    spark_archive: Path = REPO_ROOT / IC.DEFAULT_SPARK_ARCHIVE
    # Compaction by volume: off (None) unless set; the trigger checks them again.
    compact_after_records: int | None = None
    compact_after_bytes: int | None = None

    @property
    def compaction_by_volume(self) -> bool:
        return self.compact_after_records is not None or self.compact_after_bytes is not None

    @classmethod
    def from_context(cls, node: Node) -> AnalyticsSettings:
        archive = node.try_get_context(IC.CTX_SPARK_ARCHIVE) or IC.DEFAULT_SPARK_ARCHIVE
        if not str(archive).endswith((".tar.gz", ".tgz", ".zip")):
            raise SettingsError(f"context {IC.CTX_SPARK_ARCHIVE}={archive!r} is not an archive")
        return cls(
            compaction_rate_minutes=context_setting(
                node,
                IC.CTX_COMPACTION_RATE_MINUTES,
                CompactionRateMinutes,
                IC.DEFAULT_COMPACTION_RATE_MINUTES,
            ),
            analytics_rate_minutes=context_setting(
                node,
                IC.CTX_ANALYTICS_RATE_MINUTES,
                AnalyticsRateMinutes,
                IC.DEFAULT_ANALYTICS_RATE_MINUTES,
            ),
            maintenance_rate_minutes=context_setting(
                node,
                IC.CTX_MAINTENANCE_RATE_MINUTES,
                MaintenanceRateMinutes,
                IC.DEFAULT_MAINTENANCE_RATE_MINUTES,
            ),
            # The trigger validates it with the same schema at cold start.
            compaction_max_records=context_setting(
                node,
                IC.CTX_COMPACTION_MAX_RECORDS,
                S.CompactionMaxRecords,
                C.DEFAULT_COMPACTION_MAX_RECORDS,
            ),
            spark_archive=REPO_ROOT / str(archive),  # an absolute path stays itself
            compact_after_records=context_setting(
                node, IC.CTX_COMPACT_AFTER_RECORDS, S.CompactAfterRecords, None
            ),
            compact_after_bytes=context_setting(
                node, IC.CTX_COMPACT_AFTER_BYTES, S.CompactAfterBytes, None
            ),
        )
