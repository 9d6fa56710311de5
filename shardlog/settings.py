"""One schema per setting: the range of every deployment setting, written once.

The handlers' settings models (lambdas/*/settings.py) type their fields with these, and the
CDK app validates its context with the same types (infra/settings.py, ``parse_setting``), so
a value one side accepts the other accepts too. Rules that tie two settings together (the
ingest lease at least twice the ingest timeout) belong to whoever knows both, not here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Final

from pydantic import AfterValidator, BeforeValidator, Field, TypeAdapter
from pydantic import ValidationError as PydanticValidationError

from shardlog import constants as C
from shardlog.format import Compression
from shardlog.tables import TableNames

# --- ingest -----------------------------------------------------------------------------
# The ingest lease: long enough to write a segment, short enough that a crashed writer's
# shard waits at most an hour.
LEASE_DURATION_MS_MIN: Final = 1_000
LEASE_DURATION_MS_MAX: Final = 3_600_000
LeaseDurationMs = Annotated[int, Field(ge=LEASE_DURATION_MS_MIN, le=LEASE_DURATION_MS_MAX)]

SEGMENT_MAX_RECORDS_MIN: Final = 1
SEGMENT_MAX_RECORDS_MAX: Final = 100_000
SegmentMaxRecords = Annotated[int, Field(ge=SEGMENT_MAX_RECORDS_MIN, le=SEGMENT_MAX_RECORDS_MAX)]

# At least one Kinesis record's worth of headroom is not required: a larger record gets a
# segment of its own. The upper bound keeps a buffered segment well inside Lambda's memory.
SEGMENT_MAX_BYTES_MIN: Final = 1024
SEGMENT_MAX_BYTES_MAX: Final = 256 * C.MIB
SegmentMaxBytes = Annotated[int, Field(ge=SEGMENT_MAX_BYTES_MIN, le=SEGMENT_MAX_BYTES_MAX)]

# How the writer stores segments (docs/FORMAT.md, section 10): "zlib" compresses each one
# when that saves a tenth of it, "none" writes versions 1 and 2 only.
SegmentCompression = Compression

# Idempotent produce: how far back (by arrival) a resent record's id is looked up. At least
# a minute (a client's retry of an unknown outcome), at most a day (the look-up reads the
# log's tail that far back).
DEDUPE_WINDOW_S_MIN: Final = 60
DEDUPE_WINDOW_S_MAX: Final = 86_400
DedupeWindowS = Annotated[int, Field(ge=DEDUPE_WINDOW_S_MIN, le=DEDUPE_WINDOW_S_MAX)]

# --- the ingest event source (Lambda's Kinesis event source mapping) --------------------------
# Records per invocation: Lambda's Kinesis limits. Lambda also caps a batch at its 6 MB
# invocation payload, so a larger batch never makes a segment past Lambda's memory.
INGEST_BATCH_SIZE_MIN: Final = 1
INGEST_BATCH_SIZE_MAX: Final = 10_000
IngestBatchSize = Annotated[int, Field(ge=INGEST_BATCH_SIZE_MIN, le=INGEST_BATCH_SIZE_MAX)]

# How long Lambda gathers records before it invokes: 0 to 5 minutes. The mapping takes whole
# seconds (MaximumBatchingWindowInSeconds), so a window that is not one is refused rather
# than rounded: the stack would deploy a latency (or a cost) nobody asked for.
INGEST_BATCHING_WINDOW_MS_MIN: Final = 0
INGEST_BATCHING_WINDOW_MS_MAX: Final = 300_000


def _whole_seconds(window_ms: int) -> int:
    if window_ms % 1000:
        below, above = window_ms // 1000 * 1000, (window_ms // 1000 + 1) * 1000
        raise ValueError(
            f"{window_ms} ms is not a whole number of seconds, which Lambda's Kinesis event "
            f"source takes (MaximumBatchingWindowInSeconds): use {below} or {above}"
        )
    return window_ms


IngestBatchingWindowMs = Annotated[
    int,
    Field(ge=INGEST_BATCHING_WINDOW_MS_MIN, le=INGEST_BATCHING_WINDOW_MS_MAX),
    AfterValidator(_whole_seconds),
]

# --- Spark -----------------------------------------------------------------------------------
# Records per partition per compaction run: fewer than a thousand makes Parquet files too
# small to be worth a Spark run.
COMPACTION_MAX_RECORDS_MIN: Final = 1_000
COMPACTION_MAX_RECORDS_MAX: Final = 1_000_000_000
CompactionMaxRecords = Annotated[
    int, Field(ge=COMPACTION_MAX_RECORDS_MIN, le=COMPACTION_MAX_RECORDS_MAX)
]
# The backlog that starts a compaction run (shardlog/spark/volume.py). A run costs EMR's
# one-minute minimum and a Spark start whatever it compacts: below a thousand records or a
# MiB a run per crossing would cost more than the freshness it buys. Up to the largest
# compaction batch (records) and a TiB (bytes).
COMPACT_AFTER_RECORDS_MIN: Final = 1_000
COMPACT_AFTER_RECORDS_MAX: Final = COMPACTION_MAX_RECORDS_MAX
CompactAfterRecords = Annotated[
    int, Field(ge=COMPACT_AFTER_RECORDS_MIN, le=COMPACT_AFTER_RECORDS_MAX)
]
COMPACT_AFTER_BYTES_MIN: Final = 1 << 20
COMPACT_AFTER_BYTES_MAX: Final = 1 << 40
CompactAfterBytes = Annotated[int, Field(ge=COMPACT_AFTER_BYTES_MIN, le=COMPACT_AFTER_BYTES_MAX)]

# --- resource names (the services' own limits) -----------------------------------------------
StreamName = Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[a-zA-Z0-9_.-]+$")]
BucketName = Annotated[str, Field(min_length=3, max_length=63)]
TableName = Annotated[str, Field(min_length=3, max_length=255)]


def parse_setting(setting: Any, value: Any) -> Any:
    """``value`` validated (and coerced: ``"4"`` is 4) against one of the types above.

    Raises ValueError with pydantic's reason ("Input should be greater than or equal to
    1000"), for a caller to prefix with the name the user knows (a context key, a variable).
    """
    try:
        return TypeAdapter(setting).validate_python(value)
    except PydanticValidationError as exc:
        raise ValueError("; ".join(error["msg"] for error in exc.errors())) from None


class NameInValueError(ValueError):
    """A bad name inside an embedded value: ``field`` says which one."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


def _valid_tables(tables: TableNames) -> TableNames:
    for field in ("partitions", "consumers"):
        try:
            parse_setting(TableName, getattr(tables, field))
        except ValueError as exc:
            raise NameInValueError(field, str(exc)) from None
    return tables


def _both_tables(value: Any) -> Any:
    """Both names given: TableNames' defaults are for local use, never a deployment's."""
    if isinstance(value, Mapping):
        for field in ("partitions", "consumers"):
            if not value.get(field):
                raise NameInValueError(field, "Field required")
    return value


# The log's two tables (TableNames, embedded whole), each name given and within DynamoDB's
# limits.
Tables = Annotated[TableNames, BeforeValidator(_both_tables), AfterValidator(_valid_tables)]
