"""Compaction: the committed log, beyond the lake table's watermark, into the lake table.

The exactly-once protocol (open, plan, write, commit, mirror) lives in
``shardlog.spark.compaction`` and ``shardlog.lake``; this job is ``main(argv)`` and the
wiring. The executors write one file per (chunk of segments, arrival day):
``<table location>/data/arrival_day=D/<partition>-<first seq>-<last seq>-<run id>.parquet``.
Then each declared typed table (``--lake-tables``, docs/LAKE.md) and its dead-letter table,
each from its own watermarks (``shardlog.spark.typed``; what the raw run just committed read
from its files, not decoded from the log again), its schema first evolved to its
declaration (``shardlog.lake.evolution``; re-deriving old rows is ``shardlog lake backfill``).
Run: ``spark-submit spark_jobs/compact.py --bucket B --partitions-table P --consumers-table C``.
"""

from __future__ import annotations

import json
import sys
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from pyspark.sql import SparkSession

from shardlog.aws import Clients
from shardlog.lake.catalog import open_table
from shardlog.spark.compaction import BatchPlan, CompactionReport, run_compaction, write_chunks
from shardlog.spark.jobs import JobArgs
from shardlog.spark.session import build_session
from shardlog.spark.typed import RawBatch, compact_typed, publish_rejections

if TYPE_CHECKING:  # pragma: no cover
    from pyiceberg.table import Table

APP_NAME = "shardlog-compact"


def compact(
    spark: SparkSession, args: JobArgs, clients: Clients | None = None, run_id: str | None = None
) -> CompactionReport:
    clients = clients or args.config().clients()
    report = CompactionReport(run_id=run_id or uuid.uuid4().hex[:16])
    with report.phase("plan"):
        table = open_table(args.lake(), create=True)  # first: a bad catalog fails before work
    declared = args.declared()  # a bad declaration fails before any work too
    raw = compact_raw(spark, clients, args, table, report)
    typed_reports = []
    for table_declared in declared.tables:  # then each typed table, from its own watermarks
        with report.phase(f"typed:{table_declared.name}"):
            typed_reports.append(
                compact_typed(spark, clients, args, table_declared, report.run_id, raw)
            )
    report.tables = [typed.as_dict() for typed in typed_reports]
    publish_rejections(clients, typed_reports)
    return report


def compact_raw(
    spark: SparkSession, clients: Clients, args: JobArgs, table: Table, report: CompactionReport
) -> RawBatch | None:
    """The raw table's run (the executors: fetch, decode, group, Parquet, PUT) into
    ``report``; what it committed, which the typed tables read instead of the log's
    segments (None: it committed no batch)."""
    written: list[dict[str, Any]] = []

    def write(plans: Sequence[BatchPlan]) -> list[dict[str, Any]]:
        written[:] = write_chunks(spark, args, plans, report.run_id)
        return written

    run_compaction(clients, args, table, report, write)
    if report.snapshot_id is None:
        return None
    ranges = {b["partitionId"]: (b["start"], b["end"]) for b in report.batches}
    return RawBatch(args.lake().bucket, ranges, written)


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
