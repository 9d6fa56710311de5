"""Compaction: the committed log, beyond the lake table's watermark, into the lake table.

The exactly-once protocol (open, plan, write, commit, mirror) lives in
``shardlog.spark.compaction`` and ``shardlog.lake``; this job is ``main(argv)`` and the
wiring. The executors write one file per (chunk of segments, arrival day):
``<table location>/data/arrival_day=D/<partition>-<first seq>-<last seq>-<run id>.parquet``.
Run: ``spark-submit spark_jobs/compact.py --bucket B --partitions-table P --consumers-table C``.
"""

from __future__ import annotations

import json
import sys
import uuid
from collections.abc import Sequence

from pyspark.sql import SparkSession

from shardlog.aws import Clients
from shardlog.lake.catalog import open_table
from shardlog.lake.commit import table_watermarks
from shardlog.lake.exceptions import LakeConflictError
from shardlog.spark.compaction import (
    CompactionReport,
    check_files,
    commit_batches,
    mirror_watermarks,
    plan_batches,
    remove_files,
    summarize,
    write_chunks,
)
from shardlog.spark.jobs import JobArgs
from shardlog.spark.session import build_session
from shardlog.spark.watermark import WatermarkStore
from shardlog.tables import Tables

APP_NAME = "shardlog-compact"


def compact(
    spark: SparkSession, args: JobArgs, clients: Clients | None = None, run_id: str | None = None
) -> CompactionReport:
    clients = clients or args.config().clients()
    settings = args.lake()
    report = CompactionReport(run_id=run_id or uuid.uuid4().hex[:16])
    with report.phase("plan"):
        table = open_table(settings, create=True)  # first: a bad catalog fails before any work
        partitions = Tables(clients, args.config().tables).list_partitions()
        marks = table_watermarks(table)
        plans = plan_batches(clients, args, marks, partitions)
    with report.phase("write"):  # the executors: fetch, decode, group, Parquet, PUT
        files = write_chunks(spark, args, plans, report.run_id)
    if plans:
        with report.phase("check"):
            check_files(plans, files)
        with report.phase("commit"):
            try:
                committed = commit_batches(table, settings, plans, files, report.run_id)
            except LakeConflictError as exc:
                report.conflicts.append(str(exc))
                remove_files(clients, settings, files)
                plans, files = [], []
                marks = table_watermarks(table.refresh())
            else:
                report.snapshot_id, marks = committed.snapshot_id, dict(committed.watermarks)
    with report.phase("mirror"):
        mirror_watermarks(WatermarkStore(clients, args.consumers_table), partitions, marks, report)
    return summarize(report, plans, files)


def main(argv: Sequence[str] | None = None) -> int:
    args = JobArgs.parse(sys.argv[1:] if argv is None else argv, (__doc__ or "").split("\n")[0])
    spark = build_session(APP_NAME)
    try:
        report = compact(spark, args)
    finally:
        spark.stop()
    print(json.dumps({"job": "compact", **report.as_dict()}, sort_keys=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
