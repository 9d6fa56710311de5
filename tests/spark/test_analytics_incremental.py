"""Analytics reads only what the lake table appended since its previous run, and its totals
equal a full rescan's; whenever the previous totals cannot be trusted it rescans."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pyarrow.parquet as pq
import pytest

from shardlog import constants as C
from shardlog.lake.catalog import open_table
from shardlog.lake.maintenance import expire_snapshots
from shardlog.spark.jobs import SUMMARY_KEY, JobArgs
from spark_jobs.analytics import run_analytics
from spark_jobs.compact import compact
from tests.support.aws import AwsEnv
from tests.support.factories import incoming_records, writer_for

P0, P1 = "shardId-000000000000", "shardId-000000000001"
# What a rescan and an increment must agree on (the increment block differs by design).
TOTALS = (
    "records",
    "bytes",
    "keys",
    "duplicateRows",
    "partitions",
    "hourly",
    "topKeys",
    "ingestDelayMs",
    "delayHistogram",
    "snapshotId",
    "watermarks",
)


def totals(summary: dict[str, Any]) -> dict[str, Any]:
    return {k: summary[k] for k in TOTALS}


def rescan(spark: Any, aws: AwsEnv, args: JobArgs) -> dict[str, Any]:
    """What a first run would say of the same table (the previous summary removed)."""
    aws.clients.s3.delete_object(Bucket=aws.config.bucket, Key=SUMMARY_KEY)
    summary = run_analytics(spark, args)
    assert summary["increment"]["fromSnapshotId"] is None
    return summary


@pytest.fixture
def grown(spark: Any, aws: AwsEnv, clock: Any) -> tuple[JobArgs, dict[str, Any], Any]:
    """A first compaction and analytics run, then more log compacted in a second snapshot."""
    writer = writer_for(aws, clock, segment_max_records=40)
    writer.append(P0, incoming_records(150, start=0))
    args = JobArgs.from_config(aws.config)
    compact(spark, args)
    first = run_analytics(spark, args)
    writer.append(P0, incoming_records(60, start=150))
    writer.append(P1, incoming_records(40, start=900, keys=("q0", "q1")))
    compact(spark, args)
    return args, first, writer


def test_a_run_reads_only_the_new_snapshots_and_equals_a_rescan(
    spark: Any, aws: AwsEnv, grown: tuple[JobArgs, dict[str, Any], Any]
) -> None:
    args, first, _ = grown
    assert (first["records"], first["increment"]["fromSnapshotId"]) == (150, None)
    table = open_table(args.lake())
    second = run_analytics(spark, args)
    added = table.scan().plan_files()
    new_files = [
        t for t in added if "-00000000000000000150-" in t.file.file_path or P1 in t.file.file_path
    ]
    assert second["increment"] == {
        "fromSnapshotId": first["snapshotId"],
        "files": len(new_files),  # the second snapshot's files only
        "records": 100,
    }
    assert second["snapshotId"] == table.current_snapshot().snapshot_id  # type: ignore[union-attr]
    assert (second["records"], second["duplicateRows"]) == (250, 0)
    assert totals(second) == totals(rescan(spark, aws, args))


def test_nothing_new_changes_nothing(
    spark: Any, aws: AwsEnv, grown: tuple[JobArgs, dict[str, Any], Any]
) -> None:
    args, _, _ = grown
    second = run_analytics(spark, args)
    third = run_analytics(spark, args)
    assert third["increment"] == {"fromSnapshotId": second["snapshotId"], "files": 0, "records": 0}
    assert totals(third) == totals(second)


def test_a_crash_between_the_writes_makes_the_next_run_rescan(
    spark: Any, aws: AwsEnv, grown: tuple[JobArgs, dict[str, Any], Any]
) -> None:
    """The run wrote some outputs for the new snapshot, then died before its summary: the
    files and the summary disagree, so the totals are not merged onto (no double count)."""
    args, first, _ = grown
    bucket = aws.config.bucket
    before = aws.clients.s3.get_object(Bucket=bucket, Key=SUMMARY_KEY)["Body"].read()
    run_analytics(spark, args)  # writes every file for the second snapshot ...
    aws.clients.s3.put_object(Bucket=bucket, Key=SUMMARY_KEY, Body=before)  # ... summary lost
    key = f"{C.ANALYTICS_PREFIX}keys.parquet"
    tag = pq.read_table(
        io.BytesIO(aws.clients.s3.get_object(Bucket=bucket, Key=key)["Body"].read())
    ).schema.metadata
    assert tag[b"shardlog.snapshot-id"] != str(first["snapshotId"]).encode()
    again = run_analytics(spark, args)
    assert again["increment"]["fromSnapshotId"] is None  # rescanned
    assert (again["records"], again["duplicateRows"]) == (250, 0)


def test_an_expired_previous_snapshot_makes_the_next_run_rescan(
    spark: Any, aws: AwsEnv, grown: tuple[JobArgs, dict[str, Any], Any]
) -> None:
    """Maintenance expired the snapshot the previous run read (pyiceberg then no longer
    links the next snapshot to it): the run cannot bound the increment, so it rescans."""
    args, first, _ = grown
    table = open_table(args.lake())
    assert first["snapshotId"] in expire_snapshots(table, datetime.now(UTC) + timedelta(days=1))
    again = run_analytics(spark, args)
    assert again["increment"]["fromSnapshotId"] is None
    assert (again["records"], again["duplicateRows"]) == (250, 0)


def test_totals_of_another_table_are_not_merged_onto(
    spark: Any, aws: AwsEnv, grown: tuple[JobArgs, dict[str, Any], Any]
) -> None:
    args, _, _ = grown
    bucket = aws.config.bucket
    stored = json.loads(aws.clients.s3.get_object(Bucket=bucket, Key=SUMMARY_KEY)["Body"].read())
    stored["tableUuid"] = "00000000-0000-0000-0000-000000000000"  # a dropped, recreated table
    aws.clients.s3.put_object(Bucket=bucket, Key=SUMMARY_KEY, Body=json.dumps(stored).encode())
    again = run_analytics(spark, args)
    assert again["increment"]["fromSnapshotId"] is None
    assert (again["records"], again["duplicateRows"]) == (250, 0)


def test_before_any_compaction_the_summary_is_empty(spark: Any, aws: AwsEnv) -> None:
    summary = run_analytics(spark, JobArgs.from_config(aws.config))
    assert (summary["records"], summary["snapshotId"], summary["ingestDelayMs"]) == (
        0,
        None,
        {"count": 0},
    )
    stored = json.loads(
        aws.clients.s3.get_object(Bucket=aws.config.bucket, Key=SUMMARY_KEY)["Body"].read()
    )
    assert stored == summary
