"""One schema per setting (shardlog/settings.py): each range at and past its edges, and the
stack and the handlers accepting and refusing exactly the same values."""

from __future__ import annotations

from typing import Any

import pytest
from aws_cdk import App

from infra import constants as IC
from infra.settings import AnalyticsSettings, SettingsError, StackSettings
from shardlog import constants as C
from shardlog import settings as S
from shardlog.exceptions import ConfigurationError
from shardlog.function_settings import IngestSettings, ShardSyncSettings, SparkTriggerSettings

MIB = 1024 * 1024

# (type, lowest accepted, highest accepted): written out here, not read from the module, so
# a range that moves makes these fail.
INT_RANGES = [
    (S.LeaseDurationMs, 1_000, 3_600_000),
    (S.SegmentMaxRecords, 1, 100_000),
    (S.SegmentMaxBytes, 1024, 256 * MIB),
    (S.CompactionMaxRecords, 1_000, 1_000_000_000),
    (S.DedupeWindowS, 60, 86_400),
    (S.IngestBatchSize, 1, 10_000),
    (S.IngestBatchingWindowMs, 0, 300_000),
]
LENGTHS = [(S.BucketName, 3, 63), (S.TableName, 3, 255), (S.StreamName, 1, 128)]


@pytest.mark.parametrize(("setting", "low", "high"), INT_RANGES)
def test_integer_settings_at_and_past_each_edge(setting: Any, low: int, high: int) -> None:
    assert S.parse_setting(setting, low) == low
    assert S.parse_setting(setting, high) == high
    with pytest.raises(ValueError, match=f"greater than or equal to {low}"):
        S.parse_setting(setting, low - 1)
    with pytest.raises(ValueError, match=f"less than or equal to {high}"):
        S.parse_setting(setting, high + 1)


@pytest.mark.parametrize(("setting", "shortest", "longest"), LENGTHS)
def test_names_at_and_past_each_length(setting: Any, shortest: int, longest: int) -> None:
    assert S.parse_setting(setting, "a" * shortest) == "a" * shortest
    assert S.parse_setting(setting, "a" * longest) == "a" * longest
    for bad in ("a" * (shortest - 1), "a" * (longest + 1)):
        with pytest.raises(ValueError, match=r"at (least|most)"):
            S.parse_setting(setting, bad)


def test_text_from_the_command_line_or_the_environment_is_parsed() -> None:
    assert S.parse_setting(S.LeaseDurationMs, "60000") == 60_000
    with pytest.raises(ValueError, match="valid integer"):
        S.parse_setting(S.LeaseDurationMs, "soon")
    with pytest.raises(ValueError, match="pattern"):
        S.parse_setting(S.StreamName, "has space")


# --- the stack and the handlers agree ---------------------------------------------------------
INGEST_ENV = {
    C.ENV_BUCKET_NAME: "my-bucket",
    C.ENV_PARTITIONS_TABLE: "parts",
    C.ENV_CONSUMERS_TABLE: "cons",
}
TRIGGER_ENV = {
    C.ENV_EMR_APPLICATION_ID: "00abc",
    C.ENV_EMR_EXECUTION_ROLE_ARN: "arn:aws:iam::123456789012:role/spark",
    C.ENV_SPARK_JOBS_URI: "s3://artifacts/spark_jobs/",
    C.ENV_SPARK_DEPS_URI: "s3://artifacts/spark_deps/deps.tar.gz",
    **INGEST_ENV,
}
SYNC_ENV = {
    C.ENV_STREAM_NAME: "events",
    C.ENV_PARTITIONS_TABLE: "parts",
    C.ENV_CONSUMERS_TABLE: "cons",
}


def _stack(key: str, value: Any) -> None:
    context = {IC.CTX_ALARM_EMAIL: "ops@example.com", key: value}
    StackSettings.from_context(App(context=context).node)


def _analytics(key: str, value: Any) -> None:
    AnalyticsSettings.from_context(App(context={key: value}).node)


# (context key, how the stack reads it, handler settings, their environment, the variable)
SHARED = [
    (IC.CTX_LEASE_DURATION_MS, _stack, IngestSettings, INGEST_ENV, C.ENV_LEASE_DURATION_MS),
    (IC.CTX_SEGMENT_MAX_RECORDS, _stack, IngestSettings, INGEST_ENV, C.ENV_SEGMENT_MAX_RECORDS),
    (IC.CTX_SEGMENT_MAX_BYTES, _stack, IngestSettings, INGEST_ENV, C.ENV_SEGMENT_MAX_BYTES),
    (IC.CTX_BUCKET_NAME, _stack, IngestSettings, INGEST_ENV, C.ENV_BUCKET_NAME),
    (IC.CTX_PARTITIONS_TABLE, _stack, ShardSyncSettings, SYNC_ENV, C.ENV_PARTITIONS_TABLE),
    (IC.CTX_CONSUMERS_TABLE, _stack, IngestSettings, INGEST_ENV, C.ENV_CONSUMERS_TABLE),
    (IC.CTX_STREAM_NAME, _stack, ShardSyncSettings, SYNC_ENV, C.ENV_STREAM_NAME),
    (
        IC.CTX_COMPACTION_MAX_RECORDS,
        _analytics,
        SparkTriggerSettings,
        TRIGGER_ENV,
        C.ENV_COMPACTION_MAX_RECORDS,
    ),
    (IC.CTX_SEGMENT_COMPRESSION, _stack, IngestSettings, INGEST_ENV, C.ENV_SEGMENT_COMPRESSION),
    (
        IC.CTX_COMPACT_AFTER_RECORDS,
        _analytics,
        SparkTriggerSettings,
        TRIGGER_ENV,
        C.ENV_COMPACT_AFTER_RECORDS,
    ),
    (
        IC.CTX_COMPACT_AFTER_BYTES,
        _analytics,
        SparkTriggerSettings,
        TRIGGER_ENV,
        C.ENV_COMPACT_AFTER_BYTES,
    ),
]
BAD_VALUES = {
    IC.CTX_LEASE_DURATION_MS: ["999", "3600001"],
    IC.CTX_SEGMENT_MAX_RECORDS: ["0", "100001"],
    IC.CTX_SEGMENT_MAX_BYTES: ["1023", str(256 * MIB + 1)],
    IC.CTX_BUCKET_NAME: ["ab", "b" * 64],
    IC.CTX_PARTITIONS_TABLE: ["ab", "t" * 256],
    IC.CTX_CONSUMERS_TABLE: ["ab"],
    IC.CTX_STREAM_NAME: ["a b", "s" * 129],
    IC.CTX_COMPACTION_MAX_RECORDS: ["999", "1000000001"],
    IC.CTX_SEGMENT_COMPRESSION: ["zstd", "ZLIB", "gzip"],
    IC.CTX_COMPACT_AFTER_RECORDS: ["999", "1000000001", "0"],
    IC.CTX_COMPACT_AFTER_BYTES: [str((1 << 20) - 1), str((1 << 40) + 1)],
}


@pytest.mark.parametrize(
    ("key", "stack", "model", "environ", "variable", "value"),
    [(*shared, value) for shared in SHARED for value in BAD_VALUES[shared[0]]],
    ids=lambda v: v if isinstance(v, str) and len(v) < 30 else None,
)
def test_stack_and_handler_refuse_the_same_value(
    key: str, stack: Any, model: Any, environ: dict[str, str], variable: str, value: str
) -> None:
    with pytest.raises(SettingsError, match=key):
        stack(key, value)
    with pytest.raises(ConfigurationError, match=variable):
        model.from_env({**environ, variable: value})


@pytest.mark.parametrize(
    ("key", "stack", "model", "environ", "variable", "value"),
    [
        (*SHARED[0], "3600000"),  # the lease's upper edge (its floor is infra's 2x timeout)
        (*SHARED[1], "100000"),
        (*SHARED[2], "1024"),
        (*SHARED[4], "abc"),
        (*SHARED[6], "s" * 128),
        (*SHARED[7], "1000"),
        (*SHARED[8], "none"),
        (*SHARED[8], "zlib"),
        (*SHARED[9], "1000"),
        (*SHARED[9], "1000000000"),
        (*SHARED[10], str(1 << 20)),
        (*SHARED[10], str(1 << 40)),
    ],
)
def test_stack_and_handler_accept_the_same_edge(
    key: str, stack: Any, model: Any, environ: dict[str, str], variable: str, value: str
) -> None:
    stack(key, value)
    model.from_env({**environ, variable: value})


def test_the_cross_setting_rule_stays_in_infra() -> None:
    """A lease the handler accepts may still be too short for the deployed timeout."""
    short = str(2 * IC.INGEST_TIMEOUT_S * 1000 - 1)
    IngestSettings.from_env({**INGEST_ENV, C.ENV_LEASE_DURATION_MS: short})
    with pytest.raises(SettingsError, match="twice the ingest timeout"):
        _stack(IC.CTX_LEASE_DURATION_MS, short)


def test_segment_compression_is_zlib_or_none() -> None:
    """The one list of codecs a writer may be given: each value named in the refusal."""
    assert S.parse_setting(S.SegmentCompression, "zlib") == "zlib"
    assert S.parse_setting(S.SegmentCompression, "none") == "none"
    for bad in ("zstd", "", "Zlib", 1):
        with pytest.raises(ValueError, match="Input should be 'zlib' or 'none'"):
            S.parse_setting(S.SegmentCompression, bad)
    assert IngestSettings.from_env(INGEST_ENV).writer_settings().segment_compression == "zlib"
    assert StackSettings().segment_compression == "zlib"


# --- the ingest dial: batch size, batching window, fan-out ---------------------------------------
def test_the_batching_window_is_whole_seconds_as_the_mapping_takes_it() -> None:
    assert S.parse_setting(S.IngestBatchingWindowMs, "60000") == 60_000
    with pytest.raises(ValueError, match=r"1500 ms is not a whole number of seconds.*1000 or 2000"):
        S.parse_setting(S.IngestBatchingWindowMs, 1500)
    with pytest.raises(ValueError, match="not a whole number"):
        S.parse_setting(S.IngestBatchingWindowMs, 299_999)


def _dial(**context: Any) -> StackSettings:
    return StackSettings.from_context(
        App(context={IC.CTX_ALARM_EMAIL: "ops@example.com", **context}).node
    )


def test_the_dial_defaults_to_the_batch_and_window_of_before() -> None:
    settings = _dial()
    assert settings.ingest_batch_size == C.INGEST_BATCH_SIZE == 1000
    assert settings.ingest_batching_window_ms == 1000
    assert settings.ingest_fan_out is False


def test_the_dial_is_read_from_command_line_strings() -> None:
    settings = _dial(
        **{
            IC.CTX_INGEST_BATCH_SIZE: "10000",
            IC.CTX_INGEST_BATCHING_WINDOW_MS: "300000",
            IC.CTX_INGEST_FAN_OUT: "true",
        }
    )
    assert settings.ingest_batch_size == 10_000
    assert settings.ingest_batching_window_ms == 300_000
    assert settings.ingest_fan_out is True


@pytest.mark.parametrize(
    ("key", "value", "reason"),
    [
        (IC.CTX_INGEST_BATCH_SIZE, "0", "greater than or equal to 1"),
        (IC.CTX_INGEST_BATCH_SIZE, "10001", "less than or equal to 10000"),
        (IC.CTX_INGEST_BATCHING_WINDOW_MS, "-1", "greater than or equal to 0"),
        (IC.CTX_INGEST_BATCHING_WINDOW_MS, "300001", "less than or equal to 300000"),
        (IC.CTX_INGEST_BATCHING_WINDOW_MS, "2500", "whole number of seconds"),
        (IC.CTX_INGEST_FAN_OUT, "perhaps", "valid boolean"),
    ],
)
def test_the_dial_refuses_what_cannot_be_deployed(key: str, value: str, reason: str) -> None:
    with pytest.raises(SettingsError, match=f"{key}={value!r}.*{reason}"):
        _dial(**{key: value})


def test_a_larger_batch_stays_within_the_segments_the_writer_creates_in_time() -> None:
    """ingestBatchSize / segmentMaxRecords segments per batch, at most 1,000: the most the
    fixed batch of 1,000 could make (one object per record), so no valid setting breaks."""
    edge = {IC.CTX_INGEST_BATCH_SIZE: "1000", IC.CTX_SEGMENT_MAX_RECORDS: "1"}
    assert _dial(**edge).segment_max_records == 1
    assert _dial(**{IC.CTX_INGEST_BATCH_SIZE: "10000", IC.CTX_SEGMENT_MAX_RECORDS: "10"})
    with pytest.raises(SettingsError, match="cuts a batch into 1001 segments"):
        _dial(**{**edge, IC.CTX_INGEST_BATCH_SIZE: "1001"})
    with pytest.raises(SettingsError, match=r"1112 segments.*raise shardlog:segmentMaxRecords"):
        _dial(**{IC.CTX_INGEST_BATCH_SIZE: "10000", IC.CTX_SEGMENT_MAX_RECORDS: "9"})
