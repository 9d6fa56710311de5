"""Compaction: the committed log, beyond the lake table's watermark, into the lake table.

The exactly-once protocol (open, plan, write, commit, mirror) lives in
``shardlog.spark.compaction`` and ``shardlog.lake``; this job is ``main(argv)``, the pure
DataFrame transforms that name the files, and the wiring. Files:
``<table location>/data/arrival_day=D/<partition>-<first seq>-<last seq>-<run id>.parquet``.
Run: ``spark-submit spark_jobs/compact.py --bucket B --partitions-table P --consumers-table C``.
"""

from __future__ import annotations

import json
import sys
import uuid
from collections.abc import Sequence
from typing import Any

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from shardlog import constants as C
from shardlog.aws import Clients
from shardlog.lake.catalog import open_table
from shardlog.lake.commit import table_watermarks
from shardlog.lake.exceptions import LakeConflictError
from shardlog.lake.files import DATA_DIR
from shardlog.lake.schema import PARTITION_FIELD
from shardlog.spark.compaction import (
    BatchPlan,
    CompactionReport,
    check_files,
    commit_batches,
    mirror_watermarks,
    plan_batches,
    read_segments,
    remove_files,
    summarize,
    write_files,
)
from shardlog.spark.jobs import JobArgs
from shardlog.spark.session import build_session
from shardlog.spark.watermark import WatermarkStore
from shardlog.tables import Tables

APP_NAME = "shardlog-compact"


# --- pure transforms ---------------------------------------------------------------------
def with_time_partitions(records: DataFrame) -> DataFrame:
    """Add ``date`` (yyyy-MM-dd) and ``hour`` (0-23) of the arrival time, in UTC."""
    return records.withColumn("date", F.date_format("arrival_time", "yyyy-MM-dd")).withColumn(
        "hour", F.hour("arrival_time")
    )


def with_file_keys(records: DataFrame, prefix: str, run_id: str) -> DataFrame:
    """Add ``file_key``: one data file per (partition, arrival day) of the batch, named by
    its partition, seq range and run (``shardlog.lake.files.data_file_key``)."""
    group = Window.partitionBy("partition_id", "date")
    first = F.lpad(F.min("seq").over(group).cast("string"), C.SEQ_DIGITS, "0")
    last = F.lpad(F.max("seq").over(group).cast("string"), C.SEQ_DIGITS, "0")
    key = F.concat(
        F.lit(f"{prefix}{DATA_DIR}{PARTITION_FIELD}="),
        "date",
        F.lit("/"),
        "partition_id",
        F.lit("-"),
        first,
        F.lit("-"),
        last,
        F.lit(f"-{run_id}.parquet"),
    )
    return records.withColumn("file_key", key)


# --- wiring ------------------------------------------------------------------------------
def write_batches(
    spark: SparkSession, args: JobArgs, plans: Sequence[BatchPlan], run_id: str
) -> list[dict[str, Any]]:
    """Step 3: the batches' records, one Parquet file per (partition, arrival day)."""
    if not plans:
        return []
    slices = max(1, spark.sparkContext.defaultParallelism)
    # One shuffle: the file-key window is partitioned by these very columns, so Spark reuses
    # this partitioning for it, and each file's rows end up in a single task.
    grouped = with_time_partitions(read_segments(spark, args, plans)).repartition(
        slices, "partition_id", "date"
    )
    return write_files(with_file_keys(grouped, args.lake().key_prefix, run_id), args)


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
        files = write_batches(spark, args, plans, report.run_id)
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
