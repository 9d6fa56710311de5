"""Compaction benchmark: the Spark job on local[2] beside a single-process pyarrow baseline,
over the same committed segments, in the same run, against the embedded AWS (moto over HTTP).

- Spark: ``spark_jobs.compact.compact`` as EMR Serverless runs it (plan from the lake
  table's watermarks, executors decode segments and PUT Parquet data files, the driver
  commits them to the Iceberg table in one snapshot), on a warm session;
- baseline: one Python process lists the same segments, decodes them, groups rows by
  (partition, arrival day) with pyarrow and PUTs the same Parquet files under another prefix
  (no table commit).

Prints records/s of each and the ratio, and where each spends its time: the job's steps
(``CompactionReport.phase_seconds``: plan, write = the executors' Spark job, check, commit,
mirror) and the baseline's (list, GET, decode, Arrow build, group, Parquet encode, PUT): the
baseline is the floor with the same bound (the same S3 over HTTP), so Spark's "write" minus
the baseline's fetch-to-PUT steps is what Spark itself adds (scheduling, Python workers,
Arrow serialisation, the shuffle by file). Both read from and write to the same S3 (moto), so
the figures are mostly decode + Parquet + HTTP cost on this machine, not EMR's.
Then typed compaction (``--typed-records``): a log of JSON orders compacted raw and then into
a declared table (``shardlog.spark.typed``: the parse in the JVM, as DataFrame transforms) as
one job run does it (the typed table reads the raw run's files, not the log again), on the
same session, after a warm-up run of its own, records/s of each and the ratio:
``--typed-rounds`` runs, each into tables of its own, the median run's.
The session runs the JVM with the service's JIT (``SERVICE_JIT``), not the tests' C1 only.
Last, right-sized files: a day of small files, as ``--rewrite-runs`` hourly compaction runs
leave them (the compaction's own file write and commit, no Spark), rewritten by
maintenance's rewrite at its default target (``shardlog.lake.rewrite``): the day's files
before and after, and the rewrite's seconds.
Usage: python bench/compact.py [--records N] [--segment-records N] [--typed-records N]
[--typed-rounds N] [--fresh-records N] [--rewrite-records N] [--rewrite-runs N] [--json]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any

import common  # first: makes the repository importable

# isort: split
import pyarrow as pa
import pyarrow.compute as pc

from shardlog.config import ShardlogConfig
from shardlog.format import IncomingRecord, decode_segment
from shardlog.lake.files import parquet_bytes, segment_records
from shardlog.local.embedded import EmbeddedAWS, provision
from shardlog.local.kinesis_fidelity import SEQUENCE_BASE
from shardlog.segments import SegmentStore, segment_key
from shardlog.spark.jobs import JobArgs
from shardlog.spark.session import local_environment, local_session
from shardlog.tables import Tables
from shardlog.writer import LogWriter, WriterSettings

PARTITIONS = ("shardId-000000000000", "shardId-000000000001")
BASELINE_PREFIX = "bench-baseline/"


@dataclass
class Row(common.Measurement):
    files: int
    phases: dict[str, float] = field(default_factory=dict)  # seconds per step
    bytes: int = 0  # of the Parquet files written


class Phases:
    """Seconds per step of the single-process floor, summed over its loop."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - started


def write_log(
    config: ShardlogConfig,
    records: int,
    segment_records: int,
    first_seq: int = 0,
    payload: Callable[[int], bytes] = lambda _i: b"x" * 100,
) -> None:
    """``records`` more committed records over two partitions, arrived over the two hours
    up to now (so the table's freshness after a run is a real age)."""
    writer = LogWriter(
        config.clients(),
        WriterSettings(config.bucket, config.tables, segment_max_records=segment_records),
    )
    per_partition = records // len(PARTITIONS)
    step_ms = max(1, 2 * 3_600_000 // per_partition)
    start_ms = int(time.time() * 1000) - per_partition * step_ms
    for p, partition in enumerate(PARTITIONS):
        batch = [
            IncomingRecord(
                f"key-{i % 1000}",
                payload(first_seq + i),
                str(SEQUENCE_BASE + p * 10**12 + first_seq + i),
                start_ms + i * step_ms,
            )
            for i in range(per_partition)
        ]
        for i in range(0, len(batch), 10_000):
            writer.append(partition, batch[i : i + 10_000])


def bench_baseline(config: ShardlogConfig) -> Row:
    """Single process: list, GET + decode, group by file with pyarrow, PUT Parquet; the time
    of each step kept apart (the profile the Spark job is compared with)."""
    from shardlog.spark.compaction import batch_bounds

    clients = config.clients()
    store = SegmentStore(clients, config.bucket)
    phase = Phases()
    started = time.perf_counter()
    total = files = size = 0
    for partition in Tables(clients, config.tables).list_partitions():
        with phase("list"):
            starts = list(store.starts(partition.partition_id))
        bounds = batch_bounds(starts, 0, partition.next_seq, partition.next_seq)
        batches = []
        for first in bounds[:-1]:
            with phase("fetch (GET)"):
                key = segment_key(partition.partition_id, first)
                body = clients.s3.get_object(Bucket=config.bucket, Key=key)["Body"].read()
            with phase("decode"):
                segment = decode_segment(body)
            with phase("Arrow build"):
                batches.append(segment_records(segment))
        with phase("group by file"):
            table = pa.Table.from_batches(batches)
            hours = pc.strftime(table.column("arrival_time"), format="arrival_day=%Y-%m-%d")
            table = table.append_column("file_hour", hours)
            groups = [
                (hour, table.filter(pc.equal(table.column("file_hour"), hour)))
                for hour in pc.unique(hours).to_pylist()
            ]
        for hour, rows in groups:
            seqs = rows.column("seq")
            key = (
                f"{BASELINE_PREFIX}{hour}/{partition.partition_id}-"
                f"{pc.min(seqs).as_py():020d}-{pc.max(seqs).as_py():020d}.parquet"
            )
            with phase("Parquet encode"):
                body = parquet_bytes(rows)
            with phase("PUT"):
                clients.s3.put_object(Bucket=config.bucket, Key=key, Body=body)
            files += 1
            size += len(body)
        total += table.num_rows
    elapsed = time.perf_counter() - started
    return Row("baseline: one process, pyarrow", total, elapsed, files, phase.seconds, size)


# The JVM as EMR Serverless runs it: the default tiered JIT. The local configuration stops
# at the C1 compiler (short test jobs start faster); over a million records the JVM's own
# work (the typed run's JSON parse) runs about 3.5x slower on C1 code.
SERVICE_JIT = {"spark.driver.extraJavaOptions": "-XX:+UseSerialGC"}


def spark_session() -> Any:
    """The one local configuration (``shardlog.spark.session``), as the tests and the
    embedded AWS's job runs have it, with the service's JIT (``SERVICE_JIT``); its
    environment unless the caller set one."""
    for name, value in local_environment(sys.executable).items():
        os.environ.setdefault(name, value)
    return local_session("shardlog-bench-compact", SERVICE_JIT)


def bench_spark(spark: Any, config: ShardlogConfig) -> Row:
    from spark_jobs.compact import compact

    started = time.perf_counter()
    report = compact(spark, replace(bench_args(config), max_records=10**9))
    return Row("spark_jobs/compact.py on local[2] -> Iceberg", report.records,
               time.perf_counter() - started, report.files, report.phase_seconds,
               report.bytes)  # fmt: skip


def bench_args(config: ShardlogConfig) -> JobArgs:
    """The job's arguments, with a lake table of the log's own (one Glue catalog serves
    every log of the run)."""
    return replace(
        JobArgs.from_config(config), lake_table=f"{config.bucket.replace('-', '_')}.events"
    )


def table_freshness_s(config: ShardlogConfig) -> float:
    """Seconds from the newest arrival in the lake table to now (right after a run)."""
    from shardlog.lake.catalog import open_table

    table = open_table(bench_args(config).lake())
    arrivals = table.scan(selected_fields=("arrival_time",)).to_arrow()["arrival_time"]
    newest = pc.max(arrivals).as_py()
    return time.time() - newest.timestamp()


def bench_fresh_query(config: ShardlogConfig, extra: int, segment_records: int) -> dict[str, Any]:
    """One partition key's rows from the table alone, then with ``--fresh`` after ``extra``
    more records were committed to the log but not compacted: what the union read costs."""
    from shardlog import constants as C
    from shardlog.lake.catalog import open_table
    from shardlog.lake.query import LakeQuery, run_query

    clients = config.clients()
    table = open_table(bench_args(config).lake())
    query = LakeQuery(partition_keys=("key-7",), limit=C.LAKE_QUERY_MAX_LIMIT)
    started = time.perf_counter()
    plain = run_query(table, query)
    plain_s = time.perf_counter() - started
    heads = Tables(clients, config.tables).list_partitions()
    write_log(config, extra, segment_records, first_seq=sum(p.next_seq for p in heads))
    heads = Tables(clients, config.tables).list_partitions()
    started = time.perf_counter()
    fresh = run_query(
        table, query, fresh=True, clients=clients, bucket=config.bucket, partitions=heads
    )
    fresh_s = time.perf_counter() - started
    return {
        "query": "--partition-key key-7",
        "uncompactedRecords": extra,
        "tableRows": plain.num_rows,
        "freshRows": fresh.num_rows,
        "plainSeconds": round(plain_s, 3),
        "freshSeconds": round(fresh_s, 3),
        "freshOverPlain": round(fresh_s / plain_s, 2),
    }


def new_log(aws: EmbeddedAWS, name: str, records: int, segment_records: int) -> ShardlogConfig:
    config = common.named_log(f"bench-{name}", aws.endpoint_url)
    provision(config.clients(), config, shard_count=1)
    write_log(config, records, segment_records)
    return config


# The declared table of the typed run: what an analyst asks of JSON orders.
ORDERS = [
    {
        "name": "orders",
        "schema": {
            "type": "object",
            "required": ["orderId"],
            "properties": {
                "orderId": {"type": "string"},
                "country": {"type": "string"},
                "amount": {"type": "number", "format": "decimal", "precision": 12, "scale": 2},
                "n": {"type": "integer"},
            },
        },
    }
]
COUNTRIES = ("DE", "FR", "NL", "PL", "SE", "US", "JP", "BR")
TYPED_QUERY = "SELECT country, sum(amount) AS revenue, count(*) AS orders FROM orders GROUP BY 1"
# The same question over the raw table, as an analyst without typed tables writes it.
RAW_QUERY = """SELECT json_extract_string(decode(data), '$.country') AS country,
       sum(CAST(json_extract(decode(data), '$.amount') AS DECIMAL(12, 2))) AS revenue,
       count(*) AS orders
FROM events GROUP BY 1"""


# Records of the typed warm-up: the JIT still compiles the parse's paths well past 20,000.
TYPED_WARMUP = 100_000
# Job runs, each raw then typed: one pair's ratio moved from 0.57x to 0.75x between runs of
# the same code on this machine (the raw run's records/s most: 95,093 to 149,033); the
# median of three is the figure.
TYPED_ROUNDS = 3


def order(i: int) -> bytes:
    """Record ``i``'s payload: a JSON order (about 90 bytes, like the raw run's 100)."""
    return json.dumps(
        {"orderId": f"o-{i}", "country": COUNTRIES[i % len(COUNTRIES)],
         "amount": float(f"{i % 10_000}.{i % 100:02d}"), "n": i}
    ).encode()  # fmt: skip


def job_run(
    spark: Any, config: ShardlogConfig, args: JobArgs, declared: Any, run_id: str
) -> tuple[dict[str, float], dict[str, int]]:
    """One job run's two steps (``spark_jobs.compact``), each timed, wall and the tree's
    CPU: the raw table's run, then the declared table's from what the raw run committed;
    the records each compacted (and the typed run read from the raw run's files)."""
    from shardlog.lake.catalog import open_table
    from shardlog.spark.compaction import CompactionReport
    from shardlog.spark.typed import compact_typed
    from spark_jobs.compact import compact_raw

    clients = config.clients()
    seconds: dict[str, float] = {}
    started, cpu = time.perf_counter(), common.tree_cpu_seconds()
    report = CompactionReport(run_id=run_id)
    raw = compact_raw(spark, clients, args, open_table(args.lake(), create=True), report)
    seconds["raw"] = time.perf_counter() - started
    seconds["rawCpu"] = common.tree_cpu_seconds() - cpu
    started, cpu = time.perf_counter(), common.tree_cpu_seconds()
    typed = compact_typed(spark, clients, args, declared, run_id, raw)
    seconds["typed"] = time.perf_counter() - started
    seconds["typedCpu"] = common.tree_cpu_seconds() - cpu
    return seconds, {"raw": report.records, "typed": typed.typed, "fromRaw": typed.from_raw}


def bench_typed(
    spark: Any, aws: EmbeddedAWS, records: int, segment_records: int, rounds: int = TYPED_ROUNDS
) -> dict[str, Any]:
    """Raw and typed compaction of the same JSON log as one job run does them (raw, then the
    typed table from what the raw run committed: ``spark_jobs.compact``), ``rounds`` times,
    each round into tables of its own (records/s of each, the ratio of each round and their
    median), then one question asked with DuckDB of the first round's typed table and of
    its ``events`` with json_extract (seconds, ratio; the answers must agree)."""
    from shardlog.lake.declared import parse_lake_tables
    from shardlog.lake.sql import S3Access, connect, metadata_locations

    declared = parse_lake_tables(ORDERS, "bench").tables[0]
    warmup = common.named_log("bench-typed-warmup", aws.endpoint_url)
    provision(warmup.clients(), warmup, shard_count=1)
    write_log(warmup, min(records, TYPED_WARMUP), segment_records, payload=order)
    warmup_args = replace(bench_args(warmup), lake_tables=json.dumps(ORDERS))
    # The JIT's work on the parse, what a long-lived job has paid (as the raw run's warm-up).
    job_run(spark, warmup, warmup_args, declared, "bench-typed-warmup")
    config = common.named_log("bench-typed", aws.endpoint_url)
    provision(config.clients(), config, shard_count=1)
    write_log(config, records, segment_records, payload=order)
    first = bench_args(config)  # the first round's tables, which DuckDB is asked about
    pairs = []
    for n in range(rounds):
        database = first.lake_table.split(".")[0] + (f"_round{n}" if n else "")
        args = replace(
            first,
            max_records=10**9,
            lake_table=f"{database}.events",
            lake_tables=json.dumps(ORDERS),
        )
        seconds, done = job_run(spark, config, args, declared, f"round-{n}")
        if done != {"raw": records, "typed": records, "fromRaw": records}:
            raise SystemExit(f"round {n}: of {records} records, {done}")
        pairs.append(seconds)
    args = replace(first, lake_tables=json.dumps(ORDERS))
    lake = args.lake()
    tables = metadata_locations([lake, lake.sibling("orders")])
    with connect(tables, S3Access.of(lake)) as con:
        answers, seconds = {}, {}
        for name, statement in (("typed", TYPED_QUERY), ("raw", RAW_QUERY)):
            started = time.perf_counter()
            answers[name] = sorted(con.execute(statement).fetchall())
            seconds[name] = time.perf_counter() - started
    if answers["typed"] != answers["raw"]:
        raise SystemExit(f"the typed table answers {answers['typed'][:2]}..., events "
                         f"{answers['raw'][:2]}...")  # fmt: skip
    ratios = [p["raw"] / p["typed"] for p in pairs]
    middle = pairs[ratios.index(statistics.median_low(ratios))]
    return {
        "records": records,
        "rounds": [
            {
                "rawSeconds": round(p["raw"], 2),
                "typedSeconds": round(p["typed"], 2),
                "typedVsRaw": round(p["raw"] / p["typed"], 2),
                "rawCpuSeconds": round(p["rawCpu"], 2),
                "typedCpuSeconds": round(p["typedCpu"], 2),
                "typedVsRawCpu": round(p["rawCpu"] / p["typedCpu"], 2),
            }
            for p in pairs
        ],
        "rawCompactionSeconds": round(middle["raw"], 2),
        "typedCompactionSeconds": round(middle["typed"], 2),
        "rawRecordsPerSecond": round(records / middle["raw"], 1),
        "typedRecordsPerSecond": round(records / middle["typed"], 1),
        "typedVsRaw": round(statistics.median_low(ratios), 2),
        # Records per CPU second (the driver with the embedded AWS, the JVM, the Python
        # workers): what EMR Serverless bills, steadier than wall time on a shared machine.
        "typedVsRawCpu": round(
            statistics.median_low(p["rawCpu"] / p["typedCpu"] for p in pairs), 2
        ),
        "query": TYPED_QUERY,
        "typedQuerySeconds": round(seconds["typed"], 3),
        "jsonExtractQuerySeconds": round(seconds["raw"], 3),
        "jsonExtractOverTyped": round(seconds["raw"] / seconds["typed"], 2),
    }


def bench_rewrite(aws: EmbeddedAWS, records: int, runs: int) -> dict[str, Any]:
    """``runs`` compaction runs' appends (one small file per partition each, the same day),
    then one rewrite at the default target: files before and after per day rewritten,
    seconds, and the rows checked to be all there once."""
    from shardlog.lake.catalog import open_table
    from shardlog.lake.commit import LakeAppend, append
    from shardlog.lake.files import s3_uri, write_data_files
    from shardlog.lake.rewrite import RewriteSettings, rewrite_table

    segment = 1_000
    config = new_log(aws, "rewrite", records, segment)
    lake = bench_args(config).lake()
    table = open_table(lake, create=True)
    store = SegmentStore(config.clients(), config.bucket)
    per_partition = records // len(PARTITIONS)
    step = max(segment, per_partition // runs // segment * segment)  # whole segments
    bounds = [*range(0, per_partition, step), per_partition]
    for number, (start, end) in enumerate(itertools.pairwise(bounds)):
        segments = [s for p in PARTITIONS for s in store.segments(p, start, end)]
        run_id = f"benchrun{number:04d}"
        files = write_data_files(config.clients().s3, lake, segments, run_id)
        uris = [s3_uri(lake.bucket, f.key) for f in files]
        append(table, LakeAppend({p: (start, end) for p in PARTITIONS}, uris, run_id))
    started = time.perf_counter()
    days = rewrite_table(config.clients().s3, lake, table, RewriteSettings())
    seconds = time.perf_counter() - started
    held = open_table(lake).scan(selected_fields=("partition_id", "seq")).to_arrow()
    once = held.group_by(["partition_id", "seq"]).aggregate([]).num_rows
    if held.num_rows != records or once != records or not days:
        raise SystemExit(f"after the rewrite: {held.num_rows} rows, {once} distinct, of {records}")
    rewritten = sum(d.records for d in days)
    return {
        "records": records,
        "compactionRuns": len(bounds) - 1,
        "days": [
            {
                "day": d.day,
                "filesBefore": d.files_before,
                "filesAfter": d.files_after,
                "mibBefore": round(d.bytes_before / 2**20, 2),
                "mibAfter": round(d.bytes_after / 2**20, 2),
            }
            for d in days
        ],
        "seconds": round(seconds, 2),
        "recordsPerSecond": round(rewritten / seconds, 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--segment-records", type=int, default=5_000)
    parser.add_argument(
        "--fresh-records", type=int, default=20_000, help="Uncompacted records for --fresh."
    )
    parser.add_argument(
        "--typed-records",
        type=int,
        default=200_000,
        help="JSON records compacted raw and typed in the same run (0: skip).",
    )
    parser.add_argument(
        "--typed-rounds",
        type=int,
        default=TYPED_ROUNDS,
        help="Raw and typed runs in pairs; the ratio is their median.",
    )
    parser.add_argument(
        "--rewrite-records",
        type=int,
        default=96_000,
        help="Records of the day whose small files are rewritten (0: skip).",
    )
    parser.add_argument(
        "--rewrite-runs", type=int, default=24, help="Compaction runs leaving small files."
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)

    with EmbeddedAWS() as aws:
        config = new_log(aws, "main", args.records, args.segment_records)
        warmup = new_log(aws, "warmup", 2_000, 500)
        started = time.perf_counter()
        spark = spark_session()
        startup_s = time.perf_counter() - started
        bench_spark(spark, warmup)  # JIT, Python workers: what a long-lived job has paid
        rows = [bench_spark(spark, config)]
        freshness_s = table_freshness_s(config)
        rows.append(bench_baseline(config))
        typed = (
            bench_typed(spark, aws, args.typed_records, args.segment_records, args.typed_rounds)
            if args.typed_records
            else None
        )
        spark.stop()
        fresh = bench_fresh_query(config, args.fresh_records, args.segment_records)
        rewrite = (
            bench_rewrite(aws, args.rewrite_records, args.rewrite_runs)
            if args.rewrite_records
            else None
        )
    spark_row, baseline = rows
    per_partition = args.fresh_records // len(PARTITIONS)
    expected_fresh = len(PARTITIONS) * sum(1 for i in range(per_partition) if i % 1000 == 7)
    if spark_row.records != args.records or baseline.records != args.records:
        raise SystemExit(f"compacted {spark_row.records}, baseline {baseline.records}, "
                         f"of {args.records} records")  # fmt: skip
    if fresh["freshRows"] != fresh["tableRows"] + expected_fresh:
        raise SystemExit(f"--fresh gave {fresh['freshRows']} rows, not "
                         f"{fresh['tableRows']} + {expected_fresh}")  # fmt: skip
    report = {
        "records": args.records,
        "sparkSessionStartupSeconds": round(startup_s, 2),
        "paths": [
            {
                "path": r.name,
                "records": r.records,
                "seconds": round(r.seconds, 2),
                "recordsPerSecond": round(r.records_per_s, 1),
                "files": r.files,
                "bytes": r.bytes,
                "phaseSeconds": {k: round(v, 3) for k, v in r.phases.items()},
            }
            for r in rows
        ],
        "sparkVsBaseline": round(spark_row.records_per_s / baseline.records_per_s, 2),
        "tableCommitSeconds": spark_row.phases.get("commit"),
        "tableFreshnessSecondsAfterRun": round(freshness_s, 1),
        "freshQuery": fresh,
        "typed": typed,
        "rewrite": rewrite,
    }
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(f"{'path':<46} {'records':>9} {'seconds':>8} {'records/s':>11} {'files':>6} {'MiB':>7}")
    for r in rows:
        print(
            f"{r.name:<46} {r.records:>9} {r.seconds:>8.2f} {r.records_per_s:>11.0f} "
            f"{r.files:>6} {r.bytes / 2**20:>7.1f}"
        )
    for r in rows:
        steps = ", ".join(f"{k} {v:.2f}" for k, v in r.phases.items())
        print(f"  {r.name}: seconds by step: {steps}")
    print(f"spark / baseline: {report['sparkVsBaseline']}x records/s "
          f"(Spark session startup {startup_s:.1f}s, not counted)")  # fmt: skip
    print(
        f"table commit (one Iceberg snapshot): {report['tableCommitSeconds']:.2f}s; "
        f"table freshness right after the run: {freshness_s:.1f}s since the newest arrival"
    )
    print(f"query {fresh['query']}: table alone {fresh['plainSeconds']:.2f}s "
          f"({fresh['tableRows']} rows); --fresh over {fresh['uncompactedRecords']:,} "
          f"uncompacted records {fresh['freshSeconds']:.2f}s ({fresh['freshRows']} rows): "
          f"{fresh['freshOverPlain']}x")  # fmt: skip
    if typed:
        print(
            f"typed compaction of {typed['records']:,} JSON records: "
            f"{typed['typedRecordsPerSecond']:,.0f} records/s against raw "
            f"{typed['rawRecordsPerSecond']:,.0f} in the same run: {typed['typedVsRaw']}x "
            f"(the median of {len(typed['rounds'])} job runs, raw then typed: "
            f"{', '.join(str(r['typedVsRaw']) for r in typed['rounds'])}); per CPU second "
            f"{typed['typedVsRawCpu']}x ("
            f"{', '.join(str(r['typedVsRawCpu']) for r in typed['rounds'])})"
        )
        print(
            f"DuckDB, revenue by country: typed table {typed['typedQuerySeconds']:.3f}s, "
            f"json_extract over events {typed['jsonExtractQuerySeconds']:.3f}s "
            f"({typed['jsonExtractOverTyped']}x)"
        )
    if rewrite:
        for day in rewrite["days"]:
            print(
                f"rewrite of day {day['day']} after {rewrite['compactionRuns']} compaction runs: "
                f"{day['filesBefore']} files ({day['mibBefore']} MiB) -> {day['filesAfter']} "
                f"({day['mibAfter']} MiB)"
            )
        print(
            f"  {rewrite['records']:,} records rewritten in {rewrite['seconds']:.2f}s "
            f"({rewrite['recordsPerSecond']:,.0f} records/s), every row once"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
