"""Right-sized files on the embedded AWS (``shardlog.lake.rewrite``): a day's small files
rewritten into fewer, in one snapshot, every row once and the watermarks unchanged, when a
compaction's append or another rewrite races it and when its commit's answer is lost."""

from __future__ import annotations

import io
import json
from collections import Counter
from datetime import UTC, datetime
from typing import Any

import pyarrow.parquet as pq
import pytest

import shardlog.lake.commit as lake_commit
import shardlog.lake.rewrite as rewrite_module
from shardlog.lake.catalog import open_table
from shardlog.lake.commit import RUN_PROPERTY, WATERMARKS_PROPERTY, LakeAppend, append
from shardlog.lake.commit import table_watermarks as marks_of
from shardlog.lake.exceptions import LakeCommitUnknownError
from shardlog.lake.files import s3_uri
from shardlog.lake.replace import file_range
from shardlog.lake.rewrite import RUN_PREFIX, RewriteSettings, rewrite_table
from shardlog.lake.settings import LakeSettings
from tests.spark.helpers import batch_of, lake_rows, log_rows, unique_lake
from tests.support.aws import AwsEnv
from tests.support.cli import run_cli
from tests.support.factories import BASE_ARRIVAL_MS, incoming_records, writer_for
from tests.support.faults import LostAnswer
from tests.support.lake import foreign_add_files

P0, P1 = "shardId-000000000000", "shardId-000000000001"
DAY_MS = 86_400_000
DAY = datetime.fromtimestamp(BASE_ARRIVAL_MS / 1000, UTC).date().isoformat()
NEXT_DAY = datetime.fromtimestamp((BASE_ARRIVAL_MS + DAY_MS) / 1000, UTC).date().isoformat()
EVERYTHING = RewriteSettings(target_file_bytes=2**20, small_file_bytes=2**20)  # all small


@pytest.fixture
def lake(aws: AwsEnv, clock: Any) -> LakeSettings:
    """Six small files on DAY (P0: four runs of 30 records, P1: two of 20), one on NEXT_DAY."""
    writer = writer_for(aws, clock, segment_max_records=10)
    writer.append(P0, incoming_records(150, start=0))
    writer.append(P1, incoming_records(40, start=1000, keys=("q0", "q1")))
    writer.append(P1, incoming_records(10, start=2000, arrival_ms=BASE_ARRIVAL_MS + DAY_MS))
    settings = unique_lake(aws)
    table = open_table(settings, create=True)
    for ranges in (
        {P0: (0, 30), P1: (0, 20)},
        {P0: (30, 60), P1: (20, 40)},
        {P0: (60, 90)},
        {P0: (90, 120), P1: (40, 50)},
    ):
        append(table, batch_of(aws, settings, ranges))
    return settings


def day_files(lake: LakeSettings, day: str) -> list[str]:
    files = [t.file.file_path for t in open_table(lake).scan().plan_files()]
    return sorted(f for f in files if f"/arrival_day={day}/" in f)


def assert_every_row_once(aws: AwsEnv, lake: LakeSettings, marks: dict[str, int]) -> None:
    """The table holds exactly the log below its watermarks, each record once."""
    table = open_table(lake)
    assert marks_of(table) == marks
    rows = lake_rows(lake)
    assert [k for k, n in Counter((r[0], r[1]) for r in rows).items() if n > 1] == []
    assert rows == [r for r in log_rows(aws) if r[1] < marks.get(r[0], 0)]


def test_a_days_small_files_become_one_per_partition_every_row_once(
    aws: AwsEnv, lake: LakeSettings
) -> None:
    table = open_table(lake)
    before, marks = lake_rows(lake), marks_of(table)
    assert len(day_files(lake, DAY)) == 6 and len(day_files(lake, NEXT_DAY)) == 1
    (day,) = rewrite_table(aws.clients.s3, lake, table, EVERYTHING)
    assert (day.day, day.files_before, day.files_after) == (DAY, 6, 2)
    assert (day.replaced, day.written, day.records, day.attempts) == (6, 2, 160, 1)
    assert lake_rows(lake) == before and marks == {P0: 120, P1: 50}
    assert_every_row_once(aws, lake, marks)
    files = day_files(lake, DAY)
    assert [file_range(f) for f in files] == [(P0, 0, 119), (P1, 0, 39)]  # named as before
    assert all(f.rsplit("-", 1)[1].startswith(RUN_PREFIX) for f in files)
    for path in files:  # sorted by seq, as the table's sort order says
        key = path.removeprefix(f"s3://{lake.bucket}/")
        body = aws.clients.s3.get_object(Bucket=lake.bucket, Key=key)["Body"].read()
        seqs = pq.read_table(io.BytesIO(body)).column("seq").to_pylist()
        assert seqs == sorted(seqs) and len(seqs) in (120, 40)
    current = open_table(lake).current_snapshot()
    assert current is not None and current.summary is not None
    assert current.summary.operation.value == "overwrite"
    assert json.loads(current.summary.additional_properties[WATERMARKS_PROPERTY]) == marks
    assert len(day_files(lake, NEXT_DAY)) == 1  # one file: nothing to gain
    assert rewrite_table(aws.clients.s3, lake, open_table(lake), EVERYTHING) == []


def test_files_are_packed_near_the_target(aws: AwsEnv, lake: LakeSettings) -> None:
    """A target that two of P0's files fit in, three do not: four files become two."""
    table = open_table(lake)
    tasks = table.scan().plan_files()
    sizes = [t.file.file_size_in_bytes for t in tasks if file_range(t.file.file_path)[0] == P0]
    target = 2 * max(sizes)
    assert 3 * min(sizes) > target  # P0's files are alike; P1's two are smaller
    (day,) = rewrite_table(aws.clients.s3, lake, table, RewriteSettings(target, target))
    assert [file_range(f) for f in day_files(lake, DAY)] == [
        (P0, 0, 59),
        (P0, 60, 119),
        (P1, 0, 39),
    ]
    assert (day.files_before, day.files_after) == (6, 3)
    assert_every_row_once(aws, lake, {P0: 120, P1: 50})


def test_a_compaction_appending_between_the_read_and_the_commit(
    aws: AwsEnv, lake: LakeSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A compaction commits after the rewrite read the table: Glue refuses the rewrite's
    commit (the table moved), the rewrite re-reads, re-plans with the new file in, and
    carries the new watermarks: every row once, compaction's progress kept."""
    compaction = open_table(lake)  # another driver, its own Table
    real_write, raced = rewrite_module.write_bin, list[Any]()

    def race_then_write(*args: Any) -> Any:
        if not raced:
            raced.append(append(compaction, batch_of(aws, lake, {P0: (120, 150)})))
        return real_write(*args)

    monkeypatch.setattr(rewrite_module, "write_bin", race_then_write)
    (day,) = rewrite_table(aws.clients.s3, lake, open_table(lake), EVERYTHING)
    assert raced and day.attempts == 2
    assert (day.files_before, day.files_after, day.records) == (7, 2, 190)
    assert_every_row_once(aws, lake, {P0: 150, P1: 50})
    assert [file_range(f) for f in day_files(lake, DAY)] == [(P0, 0, 149), (P1, 0, 39)]


def test_a_compaction_in_flight_while_the_rewrite_lands(
    aws: AwsEnv, lake: LakeSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rewrite lands between a compaction's read and its commit: the append is refused,
    re-reads the table, finds the watermarks it started from (the rewrite carries them)
    and lands its rows above them."""
    real_stale, rewrites = lake_commit.stale_partitions, list[Any]()

    def rewrite_then_check(marks: Any, batch: LakeAppend) -> list[str]:
        if not rewrites:
            rewrites.append(rewrite_table(aws.clients.s3, lake, open_table(lake), EVERYTHING))
        return real_stale(marks, batch)

    monkeypatch.setattr(lake_commit, "stale_partitions", rewrite_then_check)
    result = append(open_table(lake), batch_of(aws, lake, {P0: (120, 150)}))
    assert [(d.files_before, d.files_after) for d in rewrites[0]] == [(6, 2)]
    assert result.attempts == 2 and result.watermarks == {P0: 150, P1: 50}
    assert_every_row_once(aws, lake, {P0: 150, P1: 50})


def test_two_racing_rewrites_land_once(
    aws: AwsEnv, lake: LakeSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two maintenance runs rewrite the same day: the second lands first, the first's commit
    is refused; it re-reads, finds the files it planned gone, and plans nothing more."""
    real_write, other = rewrite_module.write_bin, list[Any]()

    def race_then_write(*args: Any) -> Any:
        if not other:  # the other run's own writes go straight through
            other.append([])
            other[0] = rewrite_table(aws.clients.s3, lake, open_table(lake), EVERYTHING)
        return real_write(*args)

    monkeypatch.setattr(rewrite_module, "write_bin", race_then_write)
    first = rewrite_table(aws.clients.s3, lake, open_table(lake), EVERYTHING)
    assert first == [] and [(d.files_before, d.files_after) for d in other[0]] == [(6, 2)]
    assert_every_row_once(aws, lake, {P0: 120, P1: 50})
    assert len(day_files(lake, DAY)) == 2


def test_a_rewrite_out_of_attempts_gives_up_deleting_nothing(
    aws: AwsEnv, lake: LakeSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A compaction lands before each of the rewrite's commits: after its last attempt the
    rewrite stops with an unknown outcome (it cannot prove its last commit will not land
    yet); every row once, every file it wrote still in S3."""
    compaction, real_write = open_table(lake), rewrite_module.write_bin
    ranges = iter([(120, 150), (150, 160)])

    def race_then_write(*args: Any) -> Any:
        if args[4].partition_id == P0:  # once per attempt
            append(compaction, batch_of(aws, lake, {P0: next(ranges)}))
        return real_write(*args)

    writer_for(aws, None, segment_max_records=10).append(P0, incoming_records(10, start=150))
    monkeypatch.setattr(rewrite_module, "write_bin", race_then_write)
    with pytest.raises(LakeCommitUnknownError, match="not confirmed after 2 commits"):
        rewrite_table(aws.clients.s3, lake, open_table(lake), EVERYTHING, max_attempts=2)
    assert_every_row_once(aws, lake, {P0: 160, P1: 50})
    assert len(day_files(lake, DAY)) == 8  # nothing rewritten


def test_a_lost_commit_answer_is_recognised(aws: AwsEnv, lake: LakeSettings) -> None:
    """Glue applies the rewrite's UpdateTable, the answer is lost, the resend refused: the
    rewrite finds its own snapshot by its run id, and commits nothing more."""
    table = open_table(lake)
    lost = LostAnswer(table.catalog.glue, "UpdateTable")  # type: ignore[attr-defined]
    lost.arm(1)
    (day,) = rewrite_table(aws.clients.s3, lake, table, EVERYTHING)
    assert (lost.lost, lost.resent) == (1, 1)
    assert (day.attempts, day.files_after) == (1, 2)
    snapshots = open_table(lake).snapshots()
    runs = [s.summary.get(RUN_PROPERTY, "") for s in snapshots]  # type: ignore[union-attr]
    assert [r for r in runs if r.startswith(RUN_PREFIX)] != [] and len(snapshots) == 5
    assert_every_row_once(aws, lake, {P0: 120, P1: 50})


def test_another_engines_file_is_left_alone(aws: AwsEnv, lake: LakeSettings) -> None:
    """A file not named as shardlog names them (its seqs unknown) stays as it is; the
    watermarks, read through the other engine's snapshot, are carried."""
    key = foreign_add_files(aws, lake, 0)
    rewrite_table(aws.clients.s3, lake, open_table(lake), EVERYTHING)
    table = open_table(lake)
    assert s3_uri(lake.bucket, key) in {t.file.file_path for t in table.scan().plan_files()}
    assert marks_of(table) == {P0: 120, P1: 50}
    summary = table.current_snapshot().summary  # type: ignore[union-attr]
    assert WATERMARKS_PROPERTY in summary.additional_properties  # type: ignore[union-attr]
    assert len(day_files(lake, DAY)) == 2


def test_the_command_rewrites_and_refuses_sizes_past_their_limits(aws: AwsEnv, clock: Any) -> None:
    from shardlog import constants as C

    writer_for(aws, clock, segment_max_records=10).append(P0, incoming_records(40, start=0))
    # The command's table: the deployment's (this test's own: tests/spark/conftest.py).
    lake = LakeSettings.for_deployment(
        aws.config.bucket, aws.config.region, aws.config.endpoint_url
    )
    table = open_table(lake, create=True)
    append(table, batch_of(aws, lake, {P0: (0, 20)}))
    append(table, batch_of(aws, lake, {P0: (20, 40)}))
    done = run_cli(aws, "lake", "maintain", "--target-file-mib", "1", "--small-file-mib", "1")
    assert done.exit_code == 0, done.output
    assert f"  {DAY}: 2 file(s) -> 1 (2 small file(s) of 40 records rewritten into 1" in done.output
    top = str(C.MAX_LAKE_TARGET_FILE_MIB)
    for argv, says in (
        (["--target-file-mib", str(C.MAX_LAKE_TARGET_FILE_MIB + 1)], "--target-file-mib"),
        (["--target-file-mib", "0"], "--target-file-mib"),
        (["--small-file-mib", "0"], "--small-file-mib"),
        (["--target-file-mib", top, "--small-file-mib", str(int(top) + 1)], "--small-file-mib"),
        (["--target-file-mib", "8", "--small-file-mib", "9"], "above --target-file-mib 8"),
    ):
        refused = run_cli(aws, "lake", "maintain", *argv)
        assert refused.exit_code == 2 and says in refused.output, refused.output
    at_edge = run_cli(aws, "lake", "maintain", "--target-file-mib", top, "--small-file-mib", top)
    assert at_edge.exit_code == 0, at_edge.output
    assert_every_row_once(aws, lake, {P0: 40})


def test_what_other_writers_keep_beside_the_watermarks_is_carried(
    aws: AwsEnv, lake: LakeSettings
) -> None:
    """An upsert table keeps its clocks beside the watermarks (``shardlog.lake.upsert``):
    the rewrite's snapshot carries them too, so they are still read where the watermarks
    are."""
    from shardlog.lake.replace import overwrite_files

    table = open_table(lake)
    clocks = {"shardlog.clocks": json.dumps({P0: 7, P1: 9})}
    overwrite_files(table, lambda _: [], [], marks_of(table), "clocked", clocks)
    rewrite_table(aws.clients.s3, lake, open_table(lake), EVERYTHING)
    current = open_table(lake).current_snapshot()
    assert current is not None and current.summary is not None
    assert current.summary.additional_properties.get(RUN_PROPERTY, "").startswith(RUN_PREFIX)
    assert current.summary.additional_properties["shardlog.clocks"] == clocks["shardlog.clocks"]
    assert_every_row_once(aws, lake, {P0: 120, P1: 50})
