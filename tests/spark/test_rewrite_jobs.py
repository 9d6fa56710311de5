"""Right-sized files among the Spark jobs: the scheduled maintenance job rewrites a declared
table and its dead-letter table (``spark_jobs/maintain.py``) and a backfill follows (every
rewritten file is still one log partition's seq range, so the backfill's swap replaces
them; the dead-letter refusals of a compaction between its two commits are left apart: a
file merged across the typed table's watermark would straddle the swap's bound); analytics'
incremental read across a rewrite counts each record once."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest

from shardlog.lake.catalog import open_table
from shardlog.lake.commit import table_watermarks
from shardlog.lake.replace import file_range
from shardlog.spark.jobs import JobArgs
from spark_jobs.analytics import run_analytics
from spark_jobs.compact import compact as compact_raw
from tests.spark.helpers import dying_between_the_typed_commits
from tests.spark.test_analytics_incremental import rescan, totals
from tests.spark.test_typed_backfill import (
    P0,
    P1,
    V1,
    V2,
    append,
    assert_v2_exactly_once,
    backfill,
    compact,
    job_args,
    tables,
)
from tests.support.aws import AwsEnv
from tests.support.factories import incoming_records, writer_for


def files_of(table: Any) -> list[tuple[str, int, int]]:
    return sorted(file_range(t.file.file_path) for t in table.refresh().scan().plan_files())


def test_maintenance_rewrites_both_tables_and_a_backfill_follows(
    spark: Any, aws: AwsEnv, clock: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from spark_jobs.maintain import run_declared_maintenance

    # Three compaction runs over P0 (and one over P1): three small files of P0 per table.
    append(aws, clock, P0, 0, 90)
    append(aws, clock, P1, 0, 20)
    assert compact(spark, aws, V1, "a" * 16).records == 110
    append(aws, clock, P0, 90, 30)
    assert compact(spark, aws, V1, "b" * 16).records == 30
    append(aws, clock, P0, 120, 30)
    assert compact(spark, aws, V1, "c" * 16).records == 30
    # A run dies between its two commits: its refusals are above the typed watermark.
    append(aws, clock, P0, 150, 30)
    with dying_between_the_typed_commits(monkeypatch), pytest.raises(SystemExit):
        compact(spark, aws, V2, "d" * 16)
    typed, rejected = tables(aws, V2).open(create=False)
    assert table_watermarks(rejected)[P0] == 180 > table_watermarks(typed)[P0] == 150
    assert [f for f in files_of(typed) if f[0] == P0] == [(P0, 0, 89), (P0, 90, 119),
                                                          (P0, 120, 149)]  # fmt: skip
    marks = (table_watermarks(typed), table_watermarks(rejected))

    args = replace(job_args(aws, V2), target_file_mib=1, small_file_mib=1)
    reports = run_declared_maintenance(args, datetime.now(UTC))
    day = {
        name: [(d.files_before, d.files_after) for d in r.rewritten] for name, r in reports.items()
    }
    assert day[tables(aws, V2).typed.table] == [(4, 2)]  # P0's three and P1's one
    assert day[tables(aws, V2).rejected.table] == [(5, 3)]  # P0's fourth left apart
    assert [f for f in files_of(typed) if f[0] == P0] == [(P0, 0, 149)]
    rejected_p0 = [f for f in files_of(rejected) if f[0] == P0]
    assert rejected_p0[-1][1] >= 150 and all(last < 150 for _, _, last in rejected_p0[:-1])
    assert len(rejected_p0) == 2  # the three below the typed watermark as one, the last apart
    assert (table_watermarks(typed), table_watermarks(rejected)) == marks

    report = backfill(spark, aws, "e" * 16)  # V2: re-derives [0, 150) and swaps both tables
    assert report.records == 170 and report.attempts == 1
    rerun = compact(spark, aws, V2, "f" * 16)  # the crashed run's records, its refusals kept
    assert rerun.records == 30 and rerun.rejected == 0
    assert_v2_exactly_once(aws)


def test_analytics_across_a_rewrite_counts_each_record_once(
    spark: Any, aws: AwsEnv, clock: Any
) -> None:
    """The rewrite's snapshot is an overwrite, not an append: analytics' incremental read
    takes only the appends since its previous run, whose rows it had not counted."""
    from spark_jobs.maintain import run_maintenance

    writer = writer_for(aws, clock, segment_max_records=40)
    writer.append(P0, incoming_records(160, start=0))
    args = replace(JobArgs.from_config(aws.config), target_file_mib=1, small_file_mib=1)
    for _ in range(3):  # three runs, three small files
        compact_raw(spark, replace(args, max_records=40))
    first = run_analytics(spark, args)
    compact_raw(spark, replace(args, max_records=40))  # a fourth, after analytics read
    (day,) = run_maintenance(args, datetime.now(UTC)).rewritten
    assert (day.files_before, day.files_after) == (4, 1)
    assert len(open_table(args.lake()).scan().plan_files()) == 1
    second = run_analytics(spark, args)
    assert (first["records"], second["records"]) == (120, 160)
    assert second["increment"]["fromSnapshotId"] == first["snapshotId"]
    assert second["increment"]["records"] == 40  # the fourth run's, not the rewritten file
    assert totals(second) == totals(rescan(spark, aws, args))
