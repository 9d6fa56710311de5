"""Which files maintenance's rewrite packs together (``shardlog.lake.rewrite``), and its
settings' limits: at and past each edge, the error naming the field."""

from __future__ import annotations

import io

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.manifest import DataFile

from shardlog import constants as C
from shardlog.lake.exceptions import LakeSchemaError
from shardlog.lake.files import data_file_key
from shardlog.lake.replace import file_range
from shardlog.lake.rewrite import MIB, RUN_PREFIX, Bin, RewriteSettings, _bins, _write_rows
from shardlog.spark.jobs import JobArgs

P0 = "shardId-000000000000"
TARGET = RewriteSettings(target_file_bytes=100, small_file_bytes=60)


def data_file(first: int, last: int, size: int) -> tuple[int, int, DataFile]:
    key = data_file_key("lake/db/t/", P0, "2026-11-26", first, last, "abcdef0123456789")
    return first, last, DataFile.from_args(file_path=f"s3://b/{key}", file_size_in_bytes=size)


def sizes(bins: list[Bin]) -> list[list[int]]:
    return [[f.file_size_in_bytes for f in b.files] for b in bins]


def test_consecutive_small_files_are_packed_in_order_up_to_the_target() -> None:
    group = [data_file(i * 10, i * 10 + 9, size) for i, size in enumerate([30, 30, 30, 50, 20])]
    assert sizes(_bins(P0, group, TARGET, None)) == [[30, 30, 30], [50, 20]]


def test_a_large_file_ends_a_run_and_a_bin_of_one_is_left_alone() -> None:
    group = [data_file(0, 9, 30), data_file(10, 19, 60), data_file(20, 29, 30)]
    assert _bins(P0, group, TARGET, None) == []  # 60 is not small (the threshold is 60)
    group = [data_file(0, 9, 30), data_file(10, 19, 59), data_file(20, 29, 30)]
    assert sizes(_bins(P0, group, TARGET, None)) == [[30, 59]]  # 30 more would pass 100


def test_a_dead_letter_tables_files_at_or_above_the_bound_are_left_alone() -> None:
    """Refusals of a batch whose typed commit is still to come: the backfill keeps them
    apart, so no new file may span the typed table's watermark."""
    group = [data_file(0, 9, 10), data_file(10, 19, 10), data_file(20, 29, 10)]
    assert sizes(_bins(P0, group, TARGET, 20)) == [[10, 10]]  # 20..29 is not below 20
    assert _bins(P0, group, TARGET, 10) == []


def test_overlapping_ranges_are_not_packed() -> None:
    group = [data_file(0, 9, 10), data_file(5, 19, 10), data_file(20, 29, 10)]
    assert _bins(P0, group, TARGET, None) == []


def test_a_rewritten_files_name_says_its_partition_and_range() -> None:
    key = data_file_key("lake/db/t/", P0, "2026-11-26", 0, 99, f"{RUN_PREFIX}0123456789abcdef")
    assert file_range(key) == (P0, 0, 99)


def test_the_settings_at_and_past_their_edges() -> None:
    top = C.MAX_LAKE_TARGET_FILE_MIB * MIB
    assert RewriteSettings() == RewriteSettings(256 * MIB, 192 * MIB)
    RewriteSettings(top, top)
    RewriteSettings(1, 1)
    with pytest.raises(ValueError, match=rf"target_file_bytes must be 1\.\.{top} .*not {top + 1}"):
        RewriteSettings(top + 1, 1)
    with pytest.raises(ValueError, match=r"target_file_bytes must be .*not 0"):
        RewriteSettings(0, 1)
    with pytest.raises(ValueError, match=r"small_file_bytes must be 1\.\.target_file_bytes"):
        RewriteSettings(100, 101)
    with pytest.raises(ValueError, match=r"small_file_bytes must be .*not 0"):
        RewriteSettings(100, 0)


BASE = ["--bucket", "b", "--partitions-table", "p", "--consumers-table", "c"]


def test_the_jobs_options_at_and_past_their_edges(capsys: pytest.CaptureFixture[str]) -> None:
    top = C.MAX_LAKE_TARGET_FILE_MIB
    args = JobArgs.parse([*BASE, "--target-file-mib", str(top), "--small-file-mib", str(top)])
    assert args.rewrite() == RewriteSettings(top * MIB, top * MIB)
    assert JobArgs.parse(BASE).rewrite() == RewriteSettings()
    assert JobArgs.parse(JobArgs.parse(BASE).to_argv()) == JobArgs.parse(BASE)
    for argv, says in (
        (["--target-file-mib", str(top + 1)], f"--target-file-mib: {top + 1} is above the maximum"),
        (["--target-file-mib", "0"], "--target-file-mib: 0 is below the minimum 1"),
        (["--small-file-mib", "0"], "--small-file-mib: 0 is below the minimum 1"),
        (["--small-file-mib", "257"], "--small-file-mib: 257 is above --target-file-mib 256"),
    ):
        with pytest.raises(SystemExit):
            JobArgs.parse([*BASE, *argv])
        assert says in capsys.readouterr().err


SCHEMA = pa.schema(
    [pa.field("partition_id", pa.string(), False), pa.field("seq", pa.int64(), False)]
)


def batch(partition: str, seqs: list[int]) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict(
        {"partition_id": [partition] * len(seqs), "seq": seqs}, schema=SCHEMA
    )


def test_a_new_file_holds_the_rows_in_seq_order_of_one_partition() -> None:
    sink = io.BytesIO()
    bin_ = Bin(P0, ())
    batches = [batch(P0, [0, 1, 2]), batch(P0, []), batch(P0, [5]), batch(P0, [9, 10])]
    assert _write_rows(sink, SCHEMA, bin_, iter(batches)) == (0, 10, 6)
    assert pq.read_table(io.BytesIO(sink.getvalue()))["seq"].to_pylist() == [0, 1, 2, 5, 9, 10]


@pytest.mark.parametrize(
    "batches",
    [
        [batch(P0, [0, 2, 1])],  # out of order in a file
        [batch(P0, [0, 1]), batch(P0, [1, 2])],  # a seq twice across files
        [batch(P0, [5]), batch(P0, [4])],  # files out of order
        [batch(P0, [0]), batch("shardId-000000000001", [1])],  # another partition's row
    ],
)
def test_rows_that_are_not_as_the_names_say_are_refused(batches: list[pa.RecordBatch]) -> None:
    with pytest.raises(LakeSchemaError, match="in seq order as their names say"):
        _write_rows(io.BytesIO(), SCHEMA, Bin(P0, ()), iter(batches))


def test_the_jobs_summary_gives_each_rewritten_days_files_before_and_after() -> None:
    from shardlog.lake.maintenance import MaintenanceReport
    from shardlog.lake.rewrite import DayRewrite
    from spark_jobs.maintain import _summary

    day = DayRewrite("2026-11-26", 48, 2, 48, 2, 96_000, 1_100_000, 1_050_000, 1, 7)
    report = MaintenanceReport(expired_snapshots=[1, 2], rewritten=[day])
    assert _summary(report) == {
        "expiredSnapshots": 2,
        "removedFiles": 0,
        "keptYoungFiles": 0,
        "rewrittenDays": [{"day": "2026-11-26", "filesBefore": 48, "filesAfter": 2}],
    }
    assert report.as_dict()["rewritten"][0]["files_after"] == 2  # the command's --json
