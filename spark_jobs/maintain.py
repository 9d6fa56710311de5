"""Maintenance of the lake table: expire old snapshots, rewrite small files into files near a
target size, remove files no snapshot references.

The work is ``shardlog.lake.maintenance`` on the driver (catalog calls, S3 listing and
batched deletes; the rewrite reads and writes a day's small files with pyarrow, one file
at a time, ``shardlog.lake.rewrite``): no executor work. It still starts a Spark session,
as every job EMR Serverless runs does, so the run's lifecycle is the same as compaction's.
The orphan grace (at least 3 h) exceeds a compaction run's timeout, so a running
compaction's files, written before its commit, are never removed. Scheduled daily by the
stack (docs/LAKE.md). Each declared typed table (``--lake-tables``) and its dead-letter
table are maintained the same way, after the raw table; a dead-letter table's rewrite
leaves the files at or above its typed table's watermark alone (the backfill keeps them
apart); an upsert table's files are not rewritten (its fold does). The report gives per
table the snapshots expired, the files removed and, per day rewritten, its files before
and after.
Run: ``spark-submit spark_jobs/maintain.py --bucket B --partitions-table P --consumers-table C``.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from pyiceberg.table import Table

from shardlog.lake.catalog import open_table
from shardlog.lake.commit import table_watermarks
from shardlog.lake.exceptions import NoLakeTableError
from shardlog.lake.maintenance import MaintenanceReport, maintain
from shardlog.lake.settings import LakeSettings
from shardlog.spark.jobs import JobArgs
from shardlog.spark.session import build_session
from shardlog.spark.typed import TypedTables

APP_NAME = "shardlog-maintain"


def run_maintenance(args: JobArgs, now: datetime) -> MaintenanceReport:
    """Expire and remove as of ``now`` (injected: the tests move it past the grace)."""
    settings = args.lake()
    # No table yet (no compaction ran): a clear error.
    return _maintain(args, settings, open_table(settings), now)


def run_declared_maintenance(args: JobArgs, now: datetime) -> dict[str, MaintenanceReport]:
    """The same for each declared typed table and its dead-letter table that compaction
    created already (a table declared since the last compaction run has none yet)."""
    reports = {}
    for declared in args.declared().tables:
        tables = TypedTables.beside(args.lake(), declared)
        try:
            typed, rejected = tables.open(create=False)
        except NoLakeTableError:
            continue
        # An upsert table's files hold keys, not seq ranges: its fold rewrites them.
        keep_files = declared.mode == "upsert"
        reports[tables.typed.table] = _maintain(
            args, tables.typed, typed, now, rewrite=not keep_files
        )
        # Read after the typed table's own maintenance: its watermark only grows.
        bound = table_watermarks(typed.refresh())
        reports[tables.rejected.table] = _maintain(args, tables.rejected, rejected, now, bound)
    return reports


def _maintain(
    args: JobArgs,
    settings: LakeSettings,
    table: Table,
    now: datetime,
    below: Mapping[str, int] | None = None,
    *,
    rewrite: bool = True,
) -> MaintenanceReport:
    return maintain(
        args.config().clients().s3,
        settings,
        table,
        now,
        snapshot_retention=timedelta(hours=args.snapshot_retention_hours),
        orphan_grace=timedelta(hours=args.orphan_grace_hours),
        rewrite=args.rewrite() if rewrite else None,
        below=below,
    )


def _summary(report: MaintenanceReport) -> dict[str, Any]:
    return {
        "expiredSnapshots": len(report.expired_snapshots),
        "removedFiles": len(report.removed_files),
        "keptYoungFiles": report.kept_young_files,
        "rewrittenDays": [
            {"day": r.day, "filesBefore": r.files_before, "filesAfter": r.files_after}
            for r in report.rewritten
        ],
    }


def main(argv: Sequence[str] | None = None) -> int:
    args = JobArgs.parse(sys.argv[1:] if argv is None else argv, (__doc__ or "").split("\n")[0])
    spark = build_session(APP_NAME)
    try:
        now = datetime.now(UTC)
        report = run_maintenance(args, now)
        declared = run_declared_maintenance(args, now)
    finally:
        spark.stop()
    summary = {
        "job": "maintain",
        **_summary(report),
        "tables": {name: _summary(r) for name, r in declared.items()},
    }
    print(json.dumps(summary, sort_keys=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
