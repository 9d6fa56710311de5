"""One settings model per deployed function, declared once, for the CDK app and the handler.

Each model names the environment variable of each field (``VARIABLES``, a dotted path for a
field of an embedded value: ``tables.partitions``). The CDK app builds the function's model
and writes its environment from it (``environment``); the handler reads the same model back
at cold start (``from_env``), so both sides agree on every name, type and range by
construction. A missing or bad variable is one ConfigurationError naming the variable and
the rule it broke, before the first event.

Deployment coordinates are embedded whole: ``tables`` is the ``TableNames`` the code uses,
never two names copied field by field into one. The Lambda consumer runner's model, which
is one JSON document in one variable, is ``shardlog.lambda_consumer.settings.RunnerSettings``.

At synth the names are CloudFormation tokens, which only a deployment resolves: the stack
builds its models with ``for_stack`` (its literal values are validated from CDK context by
the same types, infra/settings.py), and the handler validates everything at cold start.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any, ClassVar, Self

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from shardlog import constants as C
from shardlog.consumer.settings import validate_group
from shardlog.exceptions import ConfigurationError
from shardlog.exceptions import ValidationError as ShardlogValidationError
from shardlog.settings import (
    BucketName,
    CompactAfterBytes,
    CompactAfterRecords,
    CompactionMaxRecords,
    DedupeWindowS,
    LeaseDurationMs,
    NameInValueError,
    SegmentCompression,
    SegmentMaxBytes,
    SegmentMaxRecords,
    StreamName,
    Tables,
)
from shardlog.spark.jobs import JobArgs
from shardlog.spark.trigger import SparkTarget
from shardlog.spark.volume import VolumeThreshold
from shardlog.writer import WriterSettings

TABLE_VARIABLES = {
    "tables.partitions": C.ENV_PARTITIONS_TABLE,
    "tables.consumers": C.ENV_CONSUMERS_TABLE,
}


class FunctionSettings(BaseModel):
    """A function's settings and the environment variable of each field."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    # What the function is, for errors ("invalid ingest settings: ...").
    WHAT: ClassVar[str]
    # Field (dotted path) -> environment variable.
    VARIABLES: ClassVar[dict[str, str]]

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Self:
        """The settings in ``environ`` (default: the process's). An unset or empty variable
        leaves its field's default."""
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for path, variable in cls.VARIABLES.items():
            if env.get(variable):
                _put(values, path, env[variable])
        try:
            return cls.model_validate(values)
        except ValidationError as exc:
            problems = "; ".join(cls._problem(error) for error in exc.errors())
            raise ConfigurationError(f"invalid {cls.WHAT} settings: {problems}") from exc

    @classmethod
    def for_stack(cls, **values: Any) -> Self:
        """The model the stack deploys: ``values`` may hold CloudFormation tokens, so they are
        not validated here (the handler validates them at cold start)."""
        return cls.model_construct(**values)

    def environment(self) -> dict[str, str]:
        """The function's environment: the variable of each field given (a default stays
        unset, so the handler applies it)."""
        # Deploy-time tokens are strings where the model expects other types: no warnings.
        dumped = self.model_dump(mode="json", exclude_unset=True, warnings=False)
        flat = _flatten(dumped, self.VARIABLES)
        return {self.VARIABLES[path]: _text(value) for path, value in flat.items()}

    @classmethod
    def _problem(cls, error: Any) -> str:
        path = ".".join(str(part) for part in error["loc"])
        inner = error.get("ctx", {}).get("error")
        if isinstance(inner, NameInValueError):
            path, message = f"{path}.{inner.field}", inner.reason
        else:
            message = error["msg"]
        variables = [v for p, v in cls.VARIABLES.items() if p == path or p.startswith(f"{path}.")]
        return f"{' and '.join(variables) or path}: {message}"


def _put(values: dict[str, Any], path: str, value: str) -> None:
    *parents, leaf = path.split(".")
    for parent in parents:
        values = values.setdefault(parent, {})
    values[leaf] = value


def _flatten(
    values: Mapping[str, Any], leaves: Mapping[str, str], prefix: str = ""
) -> dict[str, Any]:
    """``values`` by dotted path, down to the paths in ``leaves`` (a leaf may be a mapping)."""
    flat: dict[str, Any] = {}
    for key, value in values.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping) and path not in leaves:
            flat.update(_flatten(value, leaves, f"{path}."))
        else:
            flat[path] = value
    return flat


def _text(value: Any) -> str:
    """An environment variable's text: None is unset (empty), JSON for anything structured."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, list | dict):
        return json.dumps(value)
    return str(value)


class IngestSettings(FunctionSettings):
    """The ingest handler: where it writes the log, and the writer's limits."""

    WHAT = "ingest"
    VARIABLES = {
        "bucket": C.ENV_BUCKET_NAME,
        **TABLE_VARIABLES,
        "lease_duration_ms": C.ENV_LEASE_DURATION_MS,
        "segment_max_records": C.ENV_SEGMENT_MAX_RECORDS,
        "segment_max_bytes": C.ENV_SEGMENT_MAX_BYTES,
        "dedupe_window_s": C.ENV_DEDUPE_WINDOW_S,
        "segment_compression": C.ENV_SEGMENT_COMPRESSION,
    }

    bucket: BucketName
    tables: Tables
    lease_duration_ms: LeaseDurationMs = C.DEFAULT_LEASE_DURATION_MS
    segment_max_records: SegmentMaxRecords = C.DEFAULT_SEGMENT_MAX_RECORDS
    segment_max_bytes: SegmentMaxBytes = C.DEFAULT_SEGMENT_MAX_BYTES
    dedupe_window_s: DedupeWindowS = C.DEFAULT_DEDUPE_WINDOW_S
    segment_compression: SegmentCompression = C.DEFAULT_SEGMENT_COMPRESSION

    def writer_settings(self) -> WriterSettings:
        return WriterSettings(
            bucket=self.bucket,
            tables=self.tables,
            lease_duration_ms=self.lease_duration_ms,
            segment_max_records=self.segment_max_records,
            segment_max_bytes=self.segment_max_bytes,
            dedupe_window_ms=self.dedupe_window_s * 1000,
            segment_compression=self.segment_compression,
        )


class ShardSyncSettings(FunctionSettings):
    WHAT = "shard sync"
    VARIABLES = {"stream_name": C.ENV_STREAM_NAME, **TABLE_VARIABLES}

    stream_name: StreamName
    tables: Tables


class RegistrationSettings(FunctionSettings):
    """The group registration: where the log and the tables are. The group to register
    comes in the custom resource's properties (shardlog/lambda_consumer/settings.py)."""

    WHAT = "group registration"
    VARIABLES = {"bucket": C.ENV_BUCKET_NAME, **TABLE_VARIABLES}

    bucket: BucketName
    tables: Tables


class WakerSettings(FunctionSettings):
    """The consumer waker: each Lambda consumer group's wake queue, and the tables."""

    WHAT = "consumer waker"
    VARIABLES = {"queues": C.ENV_LAMBDA_CONSUMERS, **TABLE_VARIABLES}

    # group -> wake queue URL (a JSON object in SHARDLOG_LAMBDA_CONSUMERS)
    queues: dict[str, str]
    tables: Tables

    @field_validator("queues", mode="before")
    @classmethod
    def _queues(cls, value: object) -> object:
        if isinstance(value, str):
            value = json.loads(value)
        if not isinstance(value, dict) or not value:
            raise ValueError("must be a non-empty JSON object {group: wake queue URL}")
        for group in value:
            try:
                validate_group(group)
            except ShardlogValidationError as exc:
                raise ValueError(f"group {group!r}: {exc.reason}") from None
        return value


class ProducerApiSettings(FunctionSettings):
    WHAT = "producer API"
    VARIABLES = {"stream_name": C.ENV_STREAM_NAME}

    stream_name: StreamName
    # Retries of entries Kinesis failed, inside one request (API Gateway waits at most 29 s).
    max_attempts: int = Field(default=5, ge=1, le=20)
    base_backoff_ms: int = Field(default=50, ge=0, le=10_000)
    max_backoff_ms: int = Field(default=1_000, ge=0, le=10_000)
    # What a throttled caller is told to wait (the Retry-After header of 429 and 503).
    retry_after_s: int = Field(default=1, ge=0, le=3_600)


class SparkTriggerSettings(FunctionSettings):
    WHAT = "Spark trigger"
    VARIABLES = {
        "application_id": C.ENV_EMR_APPLICATION_ID,
        "execution_role_arn": C.ENV_EMR_EXECUTION_ROLE_ARN,
        "spark_jobs_uri": C.ENV_SPARK_JOBS_URI,
        "spark_deps_uri": C.ENV_SPARK_DEPS_URI,
        "bucket": C.ENV_BUCKET_NAME,
        **TABLE_VARIABLES,
        "region": C.ENV_REGION,
        "compaction_max_records": C.ENV_COMPACTION_MAX_RECORDS,
        "lake_tables": C.ENV_LAKE_TABLES,
        "lake_table": C.ENV_LAKE_TABLE,
        "compact_after_records": C.ENV_COMPACT_AFTER_RECORDS,
        "compact_after_bytes": C.ENV_COMPACT_AFTER_BYTES,
    }

    application_id: str = Field(min_length=1, max_length=64)
    execution_role_arn: str = Field(pattern=r"^arn:aws[a-z-]*:iam::\d{12}:role/.+")
    spark_jobs_uri: str = Field(pattern=r"^s3://.+/$")
    # Built by `make spark-archive` and deployed with the stack; without it the jobs would
    # fail on EMR importing shardlog, so a deployment without it fails here, loudly.
    spark_deps_uri: str = Field(pattern=r"^s3://.+\.(tar\.gz|tgz|zip)$")
    bucket: BucketName
    tables: Tables
    # Lambda sets AWS_REGION itself: the stack never writes it.
    region: str = Field(default=C.DEFAULT_REGION, min_length=1)
    compaction_max_records: CompactionMaxRecords = C.DEFAULT_COMPACTION_MAX_RECORDS
    # The declared typed lake tables, JSON (checked at synth; the job checks them again).
    lake_tables: str = ""
    # The raw table the jobs write, <database>.<table> (the stack's default unless set).
    lake_table: str = Field(default=C.DEFAULT_LAKE_TABLE, pattern=r"^[^.]+\.[^.]+$")
    # Compaction by volume (the partitions table's stream): off unless one is set.
    compact_after_records: CompactAfterRecords | None = None
    compact_after_bytes: CompactAfterBytes | None = None

    def volume_threshold(self) -> VolumeThreshold:
        return VolumeThreshold(self.compact_after_records, self.compact_after_bytes)

    def target(self) -> SparkTarget:
        return SparkTarget(
            application_id=self.application_id,
            execution_role_arn=self.execution_role_arn,
            scripts_uri=self.spark_jobs_uri,
            deps_uri=self.spark_deps_uri,
        )

    def job_args(self, endpoint_url: str | None = None) -> JobArgs:
        return JobArgs(
            bucket=self.bucket,
            partitions_table=self.tables.partitions,
            consumers_table=self.tables.consumers,
            region=self.region,
            endpoint_url=endpoint_url,
            max_records=self.compaction_max_records,
            lake_table=self.lake_table,
            lake_tables=self.lake_tables,
        )


class TrimmerSettings(FunctionSettings):
    """The scheduled record retention trim (shardlog/retention.py): where the log and the
    tables are, how many days records are kept, and whether groups hold segments."""

    WHAT = "retention trim"
    VARIABLES = {
        "bucket": C.ENV_BUCKET_NAME,
        **TABLE_VARIABLES,
        "days": C.ENV_RECORD_RETENTION_DAYS,
        "hold_for_groups": C.ENV_RETENTION_HOLD_FOR_GROUPS,
    }

    bucket: BucketName
    tables: Tables
    days: int = Field(ge=C.MIN_RECORD_RETENTION_DAYS, le=C.MAX_RECORD_RETENTION_DAYS)
    hold_for_groups: bool = True
