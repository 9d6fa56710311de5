"""Lake maintenance on the embedded AWS: old snapshots expire (never the current one, never
a row), files no snapshot references go once older than the grace period, young ones stay."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from shardlog.lake.catalog import open_table
from shardlog.lake.commit import LakeAppend, append, table_watermarks
from shardlog.lake.files import s3_uri, write_data_files
from shardlog.lake.maintenance import (
    MIN_ORPHAN_GRACE,
    MIN_SNAPSHOT_RETENTION,
    check_durations,
    maintain,
    referenced_files,
)
from shardlog.lake.settings import LakeSettings
from shardlog.segments import SegmentStore
from shardlog.spark.jobs import COMPACT, RUN_TIMEOUT_MINUTES, JobArgs
from tests.spark.helpers import data_objects, lake_rows, log_rows
from tests.support.aws import AwsEnv
from tests.support.cli import run_cli
from tests.support.factories import incoming_records, writer_for
from tests.support.lake import foreign_add_files

P0 = "shardId-000000000000"
DAY = timedelta(days=1)


def written(aws: AwsEnv, lake: LakeSettings, start: int, end: int) -> LakeAppend:
    segments = list(SegmentStore(aws.clients, aws.config.bucket).segments(P0, start, end))
    run_id = uuid.uuid4().hex[:16]
    files = write_data_files(aws.clients.s3, lake, segments, run_id)
    return LakeAppend({P0: (start, end)}, [s3_uri(lake.bucket, f.key) for f in files], run_id)


@pytest.fixture
def lake(aws: AwsEnv, clock: Any) -> LakeSettings:
    """Two appends (two snapshots) and the files of a run that crashed before its commit."""
    writer_for(aws, clock, segment_max_records=50).append(P0, incoming_records(100, start=0))
    settings = JobArgs.from_config(aws.config).lake()
    table = open_table(settings, create=True)
    append(table, written(aws, settings, 0, 50))
    written(aws, settings, 50, 100)  # crashed: never committed
    append(table, written(aws, settings, 50, 100))
    return settings


def keys(aws: AwsEnv, lake: LakeSettings) -> set[str]:
    pages = aws.clients.s3.get_paginator("list_objects_v2").paginate(
        Bucket=lake.bucket, Prefix=lake.key_prefix
    )
    return {o["Key"] for page in pages for o in page.get("Contents", [])}


def test_expire_and_remove_orphans_keep_every_row(aws: AwsEnv, lake: LakeSettings) -> None:
    table = open_table(lake)
    assert len(table.snapshots()) == 2 and len(data_objects(aws, lake)) == 3
    later = datetime.now(UTC) + timedelta(days=2)  # everything is older than the grace now
    report = maintain(aws.clients.s3, lake, table, later, snapshot_retention=timedelta(days=1))
    table = open_table(lake)
    (current,) = table.snapshots()
    assert report.expired_snapshots and current.snapshot_id not in report.expired_snapshots
    crashed = [k for k in report.removed_files if "/data/" in k]
    assert len(crashed) == 1 and len(data_objects(aws, lake)) == 2  # the crashed run's file
    referenced = referenced_files(table)
    assert all(f"s3://{lake.bucket}/{k}" in referenced for k in keys(aws, lake))
    assert lake_rows(lake) == log_rows(aws)  # no row lost
    assert table_watermarks(table) == {P0: 100}
    again = maintain(aws.clients.s3, lake, table, later)
    assert (again.expired_snapshots, again.removed_files) == ([], [])


def test_young_unreferenced_files_are_kept(aws: AwsEnv, lake: LakeSettings) -> None:
    """A compaction still running has written its files but not committed them yet."""
    before = keys(aws, lake)
    report = maintain(aws.clients.s3, lake, open_table(lake), datetime.now(UTC))
    assert report.removed_files == [] and report.expired_snapshots == []
    assert report.kept_young_files >= 1 and keys(aws, lake) == before


def test_durations_at_and_past_their_minimum() -> None:
    assert timedelta(minutes=RUN_TIMEOUT_MINUTES[COMPACT]) < MIN_ORPHAN_GRACE
    check_durations(MIN_SNAPSHOT_RETENTION, MIN_ORPHAN_GRACE)
    second = timedelta(seconds=1)
    with pytest.raises(ValueError, match="snapshot retention must be at least 1:00:00"):
        check_durations(MIN_SNAPSHOT_RETENTION - second, MIN_ORPHAN_GRACE)
    with pytest.raises(ValueError, match="orphan grace must be at least 3:00:00"):
        check_durations(MIN_SNAPSHOT_RETENTION, MIN_ORPHAN_GRACE - second)


def test_the_command_and_its_limits(aws: AwsEnv, lake: LakeSettings) -> None:
    ok = run_cli(
        aws, "lake", "maintain", "--orphan-grace-hours", "3", "--snapshot-retention-hours", "1"
    )
    assert ok.exit_code == 0, ok.output
    assert "expired 0 snapshot(s), removed 0 unreferenced file(s)" in ok.output
    for option, edge in (("--orphan-grace-hours", 3), ("--snapshot-retention-hours", 1)):
        refused = run_cli(aws, "lake", "maintain", option, str(edge - 1))
        assert refused.exit_code == 2 and option in refused.output
        assert f"x>={edge}" in refused.output


def test_the_scheduled_job_maintains_with_its_arguments(aws: AwsEnv, lake: LakeSettings) -> None:
    """spark_jobs/maintain.py, as the daily schedule starts it (its clock injected)."""
    from spark_jobs.maintain import run_maintenance

    argv = JobArgs.from_config(aws.config).to_argv()  # what the trigger passes
    args = JobArgs.parse([*argv, "--orphan-grace-hours", "30"])  # the last one counts
    assert (args.orphan_grace_hours, args.snapshot_retention_hours) == (30, 7 * 24)
    soon = datetime.now(UTC) + timedelta(hours=29)  # younger than the grace: nothing goes
    assert run_maintenance(args, soon).removed_files == []
    later = datetime.now(UTC) + timedelta(hours=31)
    report = run_maintenance(args, later)
    assert [k for k in report.removed_files if "/data/" in k]  # the crashed run's file
    assert report.expired_snapshots == []  # a week's retention: both snapshots stay
    assert lake_rows(lake) == log_rows(aws)


@pytest.mark.parametrize(
    ("option", "edge"), [("--orphan-grace-hours", 3), ("--snapshot-retention-hours", 1)]
)
def test_the_job_refuses_durations_past_their_minimum(
    aws: AwsEnv, option: str, edge: int, capsys: pytest.CaptureFixture[str]
) -> None:
    base = JobArgs.from_config(aws.config).to_argv()
    assert getattr(JobArgs.parse([*base, option, str(edge)]), option[2:].replace("-", "_")) == edge
    with pytest.raises(SystemExit):
        JobArgs.parse([*base, option, str(edge - 1)])
    assert f"{edge - 1} is below the minimum {edge}" in capsys.readouterr().err


def foreign_append(aws: AwsEnv, lake: LakeSettings) -> None:
    foreign_add_files(aws, lake, len(foreign_rows(lake)))


def test_expiry_keeps_the_snapshot_the_watermarks_are_read_from(
    aws: AwsEnv, lake: LakeSettings, clock: Any
) -> None:
    """Another engine's snapshot is current: compaction reads the watermarks from its
    parent. Expiring that parent (it is old, and not current) would leave no snapshot of
    the table carrying watermarks, and every later compaction would fail."""
    foreign_append(aws, lake)
    foreign_append(aws, lake)  # two: the snapshot between them must stay as well
    later = datetime.now(UTC) + timedelta(days=2)
    report = maintain(aws.clients.s3, lake, open_table(lake), later, snapshot_retention=DAY)
    table = open_table(lake)
    assert len(report.expired_snapshots) == 1  # the first append's snapshot only
    assert len(table.snapshots()) == 3  # the watermarks' snapshot and both foreign ones
    assert table_watermarks(table) == {P0: 100}
    writer_for(aws, clock, segment_max_records=50).append(P0, incoming_records(10, start=100))
    append(table, written(aws, lake, 100, 110))  # compaction goes on from there
    assert table_watermarks(open_table(lake)) == {P0: 110}


def test_a_tagged_snapshot_is_kept_and_the_rest_expire(aws: AwsEnv, lake: LakeSettings) -> None:
    """Another engine tagged an old snapshot: pyiceberg refuses to expire a tag's head, so
    expiry leaves it out instead of failing every run."""
    table = open_table(lake)
    first = min(table.snapshots(), key=lambda s: s.timestamp_ms)
    table.manage_snapshots().create_tag(first.snapshot_id, "audit").commit()
    foreign_append(aws, lake)
    later = datetime.now(UTC) + timedelta(days=2)
    report = maintain(aws.clients.s3, lake, open_table(lake), later, snapshot_retention=DAY)
    kept = {s.snapshot_id for s in open_table(lake).snapshots()}
    assert first.snapshot_id in kept and first.snapshot_id not in report.expired_snapshots
    assert lake_rows(lake) == sorted([*log_rows(aws), *foreign_rows(lake)])


def test_statistics_files_the_table_references_are_not_orphans(
    aws: AwsEnv, lake: LakeSettings
) -> None:
    """Another engine (Spark, Trino) wrote a statistics file and recorded it in the table's
    metadata: it is referenced, so orphan removal keeps it however old."""
    from pyiceberg.table.statistics import BlobMetadata, StatisticsFile

    table = open_table(lake)
    current = table.current_snapshot()
    assert current is not None
    key = f"{lake.key_prefix}metadata/{uuid.uuid4().hex}.stats"
    aws.clients.s3.put_object(Bucket=lake.bucket, Key=key, Body=b"PFA1 puffin")
    stats = StatisticsFile(
        snapshot_id=current.snapshot_id,
        statistics_path=s3_uri(lake.bucket, key),
        file_size_in_bytes=11,
        file_footer_size_in_bytes=4,
        blob_metadata=[
            BlobMetadata(
                type="apache-datasketches-theta-v1",
                snapshot_id=current.snapshot_id,
                sequence_number=current.sequence_number or 0,
                fields=[2],
            )
        ],
    )
    with table.update_statistics() as update:
        update.set_statistics(stats)
    later = datetime.now(UTC) + timedelta(days=2)
    report = maintain(aws.clients.s3, lake, open_table(lake), later)
    assert key not in report.removed_files and key in keys(aws, lake)
    assert [k for k in report.removed_files if "/data/" in k]  # the crashed run's file went


def foreign_rows(lake: LakeSettings) -> list[Any]:
    return [r for r in lake_rows(lake) if r[0] == "foreign"]
