"""Maintenance of the lake table: expire old snapshots, remove files no snapshot references.

The work is ``shardlog.lake.maintenance`` on the driver (catalog calls, S3 listing and
batched deletes): no executor work. It still starts a Spark session, as every job EMR
Serverless runs does, so the run's lifecycle is the same as compaction's. The orphan grace
(at least 3 h) exceeds a compaction run's timeout, so a running compaction's files, written
before its commit, are never removed. Scheduled daily by the stack (docs/LAKE.md).
Run: ``spark-submit spark_jobs/maintain.py --bucket B --partitions-table P --consumers-table C``.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from shardlog.lake.catalog import open_table
from shardlog.lake.maintenance import MaintenanceReport, maintain
from shardlog.spark.jobs import JobArgs
from shardlog.spark.session import build_session

APP_NAME = "shardlog-maintain"


def run_maintenance(args: JobArgs, now: datetime) -> MaintenanceReport:
    """Expire and remove as of ``now`` (injected: the tests move it past the grace)."""
    settings = args.lake()
    return maintain(
        args.config().clients().s3,
        settings,
        open_table(settings),  # no table yet (no compaction ran): a clear error
        now,
        snapshot_retention=timedelta(hours=args.snapshot_retention_hours),
        orphan_grace=timedelta(hours=args.orphan_grace_hours),
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = JobArgs.parse(sys.argv[1:] if argv is None else argv, (__doc__ or "").split("\n")[0])
    spark = build_session(APP_NAME)
    try:
        report = run_maintenance(args, datetime.now(UTC))
    finally:
        spark.stop()
    summary = {
        "job": "maintain",
        "expiredSnapshots": len(report.expired_snapshots),
        "removedFiles": len(report.removed_files),
        "keptYoungFiles": report.kept_young_files,
    }
    print(json.dumps(summary, sort_keys=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
