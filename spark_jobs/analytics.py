"""Analytics over the lake table: volume per hour and per partition key, top keys, and the
ingest delay (commit time minus Kinesis arrival time).

It reads the data files of the table's current snapshot (planned by pyiceberg on the
driver, read with boto3 + pyarrow in the executors: no JAR) and keeps only rows below the
watermarks that snapshot carries, so a compaction committing at the same time, or files a
crashed run left behind, are never seen.
Writes ``analytics/{hourly,keys,top_keys,delay_histogram,partitions}.parquet`` and
``analytics/summary.json`` (``shardlog spark summary`` renders it). Each run recomputes
everything and overwrites the same keys: the output is a snapshot, never appended to.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame, Row, SparkSession, Window
from pyspark.sql import functions as F

from shardlog import constants as C
from shardlog.aws import Clients
from shardlog.lake.catalog import open_table
from shardlog.lake.commit import table_watermarks
from shardlog.lake.exceptions import NoLakeTableError
from shardlog.spark.io import FILE_TASK_SCHEMA, RECORD_SCHEMA, FileReader, put_table
from shardlog.spark.jobs import SUMMARY_KEY, JobArgs
from shardlog.spark.session import build_session

APP_NAME = "shardlog-analytics"
WATERMARK_SCHEMA = "partition_id string, committed_end long"  # null end = SHARD_END: all
# Upper bounds (exclusive, ms) of the ingest-delay histogram buckets; the last is open.
DELAY_BUCKETS_MS = (100, 1_000, 10_000, 60_000, 600_000)
PERCENTILES = (0.5, 0.9, 0.99)


# --- pure transforms ---------------------------------------------------------------------
def committed_rows(rows: DataFrame, watermarks: DataFrame) -> DataFrame:
    """Rows below their partition's compaction watermark; partitions without one: none."""
    marks = watermarks.withColumnRenamed("partition_id", "wm_partition_id")
    joined = rows.join(marks, rows.partition_id == marks.wm_partition_id, "inner")
    keep = F.col("committed_end").isNull() | (F.col("seq") < F.col("committed_end"))
    return joined.where(keep).drop("wm_partition_id", "committed_end")


def with_ingest_delay(rows: DataFrame) -> DataFrame:
    """``delay_ms``: commit time (the segment's written-at) minus Kinesis arrival time."""
    delay = F.expr("unix_millis(committed_at) - unix_millis(arrival_time)")
    return rows.withColumn("delay_ms", delay)


def hourly_stats(rows: DataFrame) -> DataFrame:
    """Records and payload bytes per arrival hour: ``date`` (yyyy-MM-dd) and ``hour``, UTC."""
    date = F.date_format("arrival_time", "yyyy-MM-dd").alias("date")
    return (
        rows.groupBy(date, F.hour("arrival_time").alias("hour"))
        .agg(F.count("*").alias("records"), F.sum(F.length("data")).alias("bytes"))
        .orderBy("date", "hour")
    )


def key_stats(rows: DataFrame) -> DataFrame:
    """Records and payload bytes per partition key."""
    return rows.groupBy("partition_key").agg(
        F.count("*").alias("records"), F.sum(F.length("data")).alias("bytes")
    )


def top_keys(keys: DataFrame, n: int) -> DataFrame:
    """The n keys with the most records (ties: by key), ranked from 1."""
    order = (F.desc("records"), F.asc("partition_key"))
    # The window runs on the n rows the limit kept, so it never gathers every key in one task.
    return (
        keys.orderBy(*order)
        .limit(n)
        .select(
            F.row_number().over(Window.orderBy(*order)).alias("rank"),
            "partition_key",
            "records",
            "bytes",
        )
    )


def delay_summary(delays: DataFrame) -> DataFrame:
    """One row: count, min, mean, p50, p90, p99 (approximate, 0.01% error) and max."""
    percentiles = F.percentile_approx("delay_ms", list(PERCENTILES), 10_000)
    return delays.agg(
        F.count("*").alias("count"),
        F.min("delay_ms").alias("min"),
        F.avg("delay_ms").alias("mean"),
        percentiles.alias("percentiles"),
        F.max("delay_ms").alias("max"),
    ).select(
        "count",
        "min",
        "mean",
        *(F.col("percentiles")[i].alias(f"p{round(q * 100)}") for i, q in enumerate(PERCENTILES)),
        "max",
    )


def delay_histogram(delays: DataFrame) -> DataFrame:
    """Records per delay bucket: ``upper_ms`` is the bucket's exclusive bound (null: open)."""
    bucket = F.lit(None).cast("long")
    for bound in reversed(DELAY_BUCKETS_MS):
        bucket = F.when(F.col("delay_ms") < bound, F.lit(bound)).otherwise(bucket)
    return (
        delays.groupBy(bucket.alias("upper_ms"))
        .agg(F.count("*").alias("records"))
        .orderBy(F.col("upper_ms").asc_nulls_last())
    )


def partition_stats(rows: DataFrame) -> DataFrame:
    """Per partition: rows, distinct seqs and the seq range (dense and unique: all equal)."""
    return (
        rows.groupBy("partition_id")
        .agg(
            F.count("*").alias("rows"),
            F.countDistinct("seq").alias("distinct_seqs"),
            F.min("seq").alias("min_seq"),
            F.max("seq").alias("max_seq"),
        )
        .orderBy("partition_id")
    )


# --- I/O at the edges --------------------------------------------------------------------
def table_files(args: JobArgs) -> tuple[list[str], dict[str, int]]:
    """The keys (in the log bucket) of the current snapshot's data files, and the
    watermarks of that snapshot; none before the first compaction."""
    try:
        table = open_table(args.lake())
    except NoLakeTableError:
        return [], {}
    snapshot = table.current_snapshot()
    if snapshot is None:
        return [], {}
    prefix = f"s3://{args.lake().bucket}/"
    keys = sorted(
        task.file.file_path.removeprefix(prefix)
        for task in table.scan(snapshot_id=snapshot.snapshot_id).plan_files()
    )
    return keys, table_watermarks(table)


def read_compacted(spark: SparkSession, args: JobArgs, keys: Sequence[str]) -> DataFrame:
    if not keys:
        return spark.createDataFrame([], RECORD_SCHEMA)
    slices = max(1, min(len(keys), spark.sparkContext.defaultParallelism * 4))
    tasks = spark.createDataFrame(
        spark.sparkContext.parallelize([(k,) for k in keys], slices), FILE_TASK_SCHEMA
    )
    return tasks.mapInArrow(FileReader(args.config()), RECORD_SCHEMA)


def watermark_frame(spark: SparkSession, watermarks: dict[str, int]) -> DataFrame:
    rows = [(partition_id, next_seq) for partition_id, next_seq in sorted(watermarks.items())]
    return spark.createDataFrame(rows, WATERMARK_SCHEMA)


def _records(frame: DataFrame) -> list[dict[str, Any]]:
    # Results hold no timestamps (hours are date + hour): collect() converts those with the
    # Python process's zone, not the session's.
    return [row.asDict() for row in frame.collect()]


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def _camel_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{_camel(k): v for k, v in row.items()} for row in rows]


def _arrow(rows: list[dict[str, Any]], frame: DataFrame) -> pa.Table:
    names = frame.columns
    return pa.Table.from_pylist(rows) if rows else pa.table({n: pa.array([]) for n in names})


def run_analytics(
    spark: SparkSession, args: JobArgs, clients: Clients | None = None
) -> dict[str, Any]:
    clients = clients or args.config().clients()
    config = args.config()
    keys, watermarks = table_files(args)
    rows = committed_rows(read_compacted(spark, args, keys), watermark_frame(spark, watermarks))
    delays = with_ingest_delay(rows).cache()
    tables = {
        "hourly": hourly_stats(delays),
        "keys": key_stats(delays),
        "top_keys": top_keys(key_stats(delays), args.top_keys),
        "delay_histogram": delay_histogram(delays),
        "partitions": partition_stats(delays),
    }
    # Aggregates are small (one row per hour, key, bucket or partition): written from the
    # driver. Per-key rows grow with the key count; millions of keys would want FileWriter.
    results = {name: _records(frame) for name, frame in tables.items()}
    for name, frame in tables.items():
        put_table(config, f"{C.ANALYTICS_PREFIX}{name}.parquet", _arrow(results[name], frame))
    (delay,) = _records(delay_summary(delays))
    totals: Row = delays.agg(
        F.count("*").alias("records"), F.coalesce(F.sum(F.length("data")), F.lit(0)).alias("bytes")
    ).first()  # type: ignore[assignment]
    partitions = _camel_rows(results["partitions"])
    summary = {
        "records": totals["records"],
        "bytes": totals["bytes"],
        "keys": len(results["keys"]),
        "duplicateRows": sum(p["rows"] - p["distinctSeqs"] for p in partitions),
        "partitions": partitions,
        "hourly": _camel_rows(results["hourly"]),
        "topKeys": _camel_rows(results["top_keys"]),
        "ingestDelayMs": delay if delay["count"] else {"count": 0},
        "delayHistogram": _camel_rows(results["delay_histogram"]),
    }
    delays.unpersist()
    clients.s3.put_object(
        Bucket=args.bucket,
        Key=SUMMARY_KEY,
        Body=json.dumps(summary, indent=2, sort_keys=True).encode(),
        ContentType="application/json",
    )
    return summary


def main(argv: Sequence[str] | None = None) -> int:
    args = JobArgs.parse(sys.argv[1:] if argv is None else argv, (__doc__ or "").split("\n")[0])
    spark = build_session(APP_NAME)
    try:
        summary = run_analytics(spark, args)
    finally:
        spark.stop()
    print(json.dumps({"job": "analytics", "records": summary["records"]}, sort_keys=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
