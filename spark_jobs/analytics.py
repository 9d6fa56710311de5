"""Analytics over the lake table: volume per hour and per partition key, top keys, and the
ingest delay (commit time minus Kinesis arrival time).

**Incremental**: a run reads only the data files appended since the snapshot its previous
run read (pyiceberg's incremental append scan), aggregates them in Spark and merges the
result into the previous totals on the driver (``shardlog.spark.aggregates``: sums, min/max
and a log-bucket sketch for the delay percentiles). Files are planned by pyiceberg on the
driver and read with boto3 + pyarrow in the executors: no JAR. Rows are kept only below the
watermarks of the snapshot read, so files a crashed run left behind are never seen.

Writes ``analytics/{hourly,keys,top_keys,delay_histogram,delay_sketch,partitions}.parquet``
(each tagged with the snapshot id it covers) and, last, ``analytics/summary.json`` (which
``shardlog spark summary`` renders). The next run trusts the previous totals only if the
summary and every tagged file name the same snapshot of the same table, and that snapshot
is in the current snapshot's lineage; otherwise (first run, a crash between the writes,
the snapshot expired by maintenance, a new table) it rescans the current snapshot in full.
Maintenance keeps a week of snapshots and analytics runs every 6 hours, so that is rare.
"""

from __future__ import annotations

import io
import json
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq
from botocore.exceptions import ClientError
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from shardlog import constants as C
from shardlog.aws import Clients
from shardlog.exceptions import aws_error_code
from shardlog.lake.catalog import open_table
from shardlog.lake.commit import table_watermarks
from shardlog.lake.exceptions import NoLakeTableError
from shardlog.spark import aggregates as A
from shardlog.spark.io import FILE_TASK_SCHEMA, RECORD_SCHEMA, FileReader, put_table
from shardlog.spark.jobs import SUMMARY_KEY, JobArgs
from shardlog.spark.session import build_session

if TYPE_CHECKING:  # pragma: no cover
    from pyiceberg.table import Table

APP_NAME = "shardlog-analytics"
WATERMARK_SCHEMA = "partition_id string, committed_end long"  # null end = SHARD_END: all
# Upper bounds (exclusive, ms) of the ingest-delay histogram buckets; the last is open.
DELAY_BUCKETS_MS = (100, 1_000, 10_000, 60_000, 600_000)
# Each output file names the snapshot it covers (Parquet key-value metadata).
SNAPSHOT_TAG = b"shardlog.snapshot-id"


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


def delay_totals(delays: DataFrame) -> DataFrame:
    """One row: count, sum, min and max of the delays (what merges across runs)."""
    return delays.agg(
        F.count("*").alias("count"),
        F.sum("delay_ms").alias("sumMs"),
        F.min("delay_ms").alias("min"),
        F.max("delay_ms").alias("max"),
    )


def delay_sketch(delays: DataFrame) -> DataFrame:
    """Records per log-scale delay bucket (``shardlog.spark.aggregates.sketch_bucket``)."""
    shifted = F.greatest(F.col("delay_ms"), F.lit(0)) + F.lit(1)
    bucket = F.ceil(F.log(shifted) / F.lit(math.log(A.SKETCH_GAMMA))).cast("long")
    return delays.groupBy(bucket.alias("bucket")).agg(F.count("*").alias("records"))


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
Tables = dict[str, list[dict[str, Any]]]  # output name -> rows


@dataclass
class Totals:
    """The previous run's outputs: the totals this run merges into."""

    snapshot_id: int | None = None
    tables: Tables = field(default_factory=dict)
    delay: dict[str, Any] = field(default_factory=lambda: {"count": 0})

    def rows(self, name: str) -> list[dict[str, Any]]:
        return self.tables.get(name, [])


MERGED = ("hourly", "keys", "delay_histogram", "delay_sketch", "partitions")


def previous_totals(clients: Clients, args: JobArgs, table: Table) -> Totals:
    """The previous run's totals if they all cover one snapshot still in this table's
    history; else none (a full rescan)."""
    summary = _get(clients, args.bucket, SUMMARY_KEY)
    if summary is None:
        return Totals()
    state = json.loads(summary)
    snapshot_id = state.get("snapshotId")
    if snapshot_id is None or state.get("tableUuid") != str(table.metadata.table_uuid):
        return Totals()
    tables = {}
    for name in MERGED:
        body = _get(clients, args.bucket, f"{C.ANALYTICS_PREFIX}{name}.parquet")
        if body is None:
            return Totals()
        read = pq.read_table(io.BytesIO(body))
        if (read.schema.metadata or {}).get(SNAPSHOT_TAG) != str(snapshot_id).encode():
            return Totals()  # a run crashed between its writes: rescan
        tables[name] = read.to_pylist()
    return Totals(snapshot_id, tables, dict(state.get("ingestDelayMs") or {"count": 0}))


def new_files(table: Table, args: JobArgs, since: int | None) -> list[str]:
    """Keys of the data files appended after snapshot ``since`` (all, if none) up to the
    current snapshot."""
    current = table.current_snapshot()
    if current is None:
        return []
    if since == current.snapshot_id:
        return []
    if since is None:
        tasks = table.scan(snapshot_id=current.snapshot_id).plan_files()
    else:  # ValueError if ``since`` is not in the current snapshot's lineage
        tasks = table.incremental_append_scan(
            from_snapshot_id_exclusive=since, to_snapshot_id_inclusive=current.snapshot_id
        ).plan_files()
    prefix = f"s3://{args.lake().bucket}/"
    return sorted(task.file.file_path.removeprefix(prefix) for task in tasks)


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


def increment(
    spark: SparkSession, args: JobArgs, keys: Sequence[str], watermarks: dict[str, int]
) -> tuple[Tables, dict[str, Any]]:
    """The aggregates of the new files' committed rows: (tables, delay totals)."""
    rows = committed_rows(read_compacted(spark, args, keys), watermark_frame(spark, watermarks))
    delays = with_ingest_delay(rows).cache()
    frames = {
        "hourly": hourly_stats(delays),
        "keys": key_stats(delays),
        "delay_histogram": delay_histogram(delays),
        "delay_sketch": delay_sketch(delays),
        "partitions": partition_stats(delays),
    }
    tables = {name: _records(frame) for name, frame in frames.items()}
    (totals,) = _records(delay_totals(delays))
    delays.unpersist()
    return tables, totals if totals["count"] else {"count": 0}


def merge(previous: Totals, new: Tables) -> Tables:
    """The previous totals plus this run's."""
    return {
        "hourly": A.merge_sums(
            previous.rows("hourly"), new["hourly"], ("date", "hour"), ("records", "bytes")
        ),
        "keys": A.merge_sums(
            previous.rows("keys"), new["keys"], ("partition_key",), ("records", "bytes")
        ),
        "delay_histogram": A.merge_sums(
            previous.rows("delay_histogram"), new["delay_histogram"], ("upper_ms",), ("records",)
        ),
        "delay_sketch": A.merge_sums(
            previous.rows("delay_sketch"), new["delay_sketch"], ("bucket",), ("records",)
        ),
        "partitions": A.merge_partitions(previous.rows("partitions"), new["partitions"]),
    }


def _records(frame: DataFrame) -> list[dict[str, Any]]:
    # Results hold no timestamps (hours are date + hour): collect() converts those with the
    # Python process's zone, not the session's.
    return [row.asDict() for row in frame.collect()]


def _get(clients: Clients, bucket: str, key: str) -> bytes | None:
    try:
        return bytes(clients.s3.get_object(Bucket=bucket, Key=key)["Body"].read())
    except ClientError as exc:
        if aws_error_code(exc) in ("NoSuchKey", "404"):
            return None
        raise


def _put_tagged(
    clients: Clients,
    bucket: str,
    name: str,
    rows: list[dict[str, Any]],
    schema: pa.Schema,
    snapshot_id: int | None,
) -> None:
    tags = {SNAPSHOT_TAG: str(snapshot_id).encode()} if snapshot_id is not None else {}
    table = pa.Table.from_pylist(rows, schema=schema.with_metadata(tags))
    put_table(clients.s3, bucket, f"{C.ANALYTICS_PREFIX}{name}.parquet", table)


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def _camel_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{_camel(k): v for k, v in row.items()} for row in rows]


OUTPUT_SCHEMAS = {
    "hourly": pa.schema(
        [
            ("date", pa.string()),
            ("hour", pa.int32()),
            ("records", pa.int64()),
            ("bytes", pa.int64()),
        ]
    ),
    "keys": pa.schema(
        [("partition_key", pa.string()), ("records", pa.int64()), ("bytes", pa.int64())]
    ),
    "top_keys": pa.schema(
        [
            ("rank", pa.int32()),
            ("partition_key", pa.string()),
            ("records", pa.int64()),
            ("bytes", pa.int64()),
        ]
    ),
    "delay_histogram": pa.schema([("upper_ms", pa.int64()), ("records", pa.int64())]),
    "delay_sketch": pa.schema([("bucket", pa.int64()), ("records", pa.int64())]),
    "partitions": pa.schema(
        [
            ("partition_id", pa.string()),
            ("rows", pa.int64()),
            ("distinct_seqs", pa.int64()),
            ("min_seq", pa.int64()),
            ("max_seq", pa.int64()),
        ]
    ),
}


def run_analytics(
    spark: SparkSession, args: JobArgs, clients: Clients | None = None
) -> dict[str, Any]:
    clients = clients or args.config().clients()
    try:
        table: Table | None = open_table(args.lake())
    except NoLakeTableError:
        table = None
    current = table.current_snapshot() if table is not None else None
    previous = previous_totals(clients, args, table) if table is not None else Totals()
    keys: list[str] = []
    if table is not None:
        try:
            keys = new_files(table, args, previous.snapshot_id)
        except ValueError:  # the previous snapshot is not an ancestor of this one: rescan
            previous = Totals()
            keys = new_files(table, args, None)
    since = previous.snapshot_id
    watermarks = table_watermarks(table) if table is not None else {}
    new, new_delay = increment(spark, args, keys, watermarks)
    tables = merge(previous, new)
    tables["top_keys"] = A.top_keys(tables["keys"], args.top_keys)
    delay = A.merge_delay(previous.delay, new_delay)
    snapshot_id = current.snapshot_id if current is not None else None
    for name, rows in tables.items():  # the files first, the summary (the commit) last
        _put_tagged(clients, args.bucket, name, rows, OUTPUT_SCHEMAS[name], snapshot_id)
    partitions = _camel_rows(tables["partitions"])
    summary = {
        "records": sum(p["rows"] for p in partitions),
        "bytes": sum(k["bytes"] for k in tables["keys"]),
        "keys": len(tables["keys"]),
        "duplicateRows": sum(p["rows"] - p["distinctSeqs"] for p in partitions),
        "partitions": partitions,
        "hourly": _camel_rows(tables["hourly"]),
        "topKeys": _camel_rows(tables["top_keys"]),
        "ingestDelayMs": A.delay_summary(delay, tables["delay_sketch"]),
        "delayHistogram": _camel_rows(tables["delay_histogram"]),
        "snapshotId": snapshot_id,
        "tableUuid": str(table.metadata.table_uuid) if table is not None else None,
        "watermarks": watermarks,
        "increment": {
            "fromSnapshotId": since,
            "files": len(keys),
            "records": new_delay["count"],
        },
    }
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
