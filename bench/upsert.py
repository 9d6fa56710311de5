"""Latest-by-key benchmark: the cost of one compaction run's upsert into a table of N keys,
against the embedded AWS (moto's Glue and S3 over HTTP), in one process.

An upsert table (``mode: upsert``, keyed by ``orderId``) is seeded with N keys in one run;
then one run folds a batch of updates (``--updates`` records of keys drawn at random, some
keys several times) into it, as typed compaction's driver does after its executors staged
the batch (``shardlog.lake.upsert``: clock the batch, keep its newest row per key, read the
table's files, rewrite those holding a key of the batch, commit one overwrite snapshot).
The Spark part of the run (read, parse, stage the records) is typed compaction's own cost,
measured by ``bench/compact.py``; this measures what an upsert table adds to it.

Prints per run: seconds (wall and this process's CPU), files read, rewritten and written,
the table's rows, and the AWS requests by operation (the data files' S3 requests and the
catalog's Glue requests; pyiceberg reads and writes the metadata, manifest list and
manifests through its own FileIO, a handful per commit, not counted); then checks the table
holds each key once with its newest value.
Usage: python bench/upsert.py [--keys N] [--updates M] [--json]
"""

from __future__ import annotations

import argparse
import json
import random
import time
import uuid
from datetime import UTC, datetime
from typing import Any

import common  # first: makes the repository importable

# isort: split
import pyarrow as pa
from compact import ORDERS

from shardlog.aws import RequestCounter
from shardlog.lake.declared import LakeTableDeclaration, parse_lake_tables
from shardlog.lake.settings import LakeSettings
from shardlog.lake.upsert import LakeUpsert, UpsertResult, UpsertTarget, upsert
from shardlog.local.embedded import EmbeddedAWS, provision
from shardlog.spark.typed import TypedTables

PARTITION = "shardId-000000000000"
T0_MS = 1_700_000_000_000
# bench/compact.py's typed table of JSON orders, keyed by its order id.
LATEST = [{**ORDERS[0], "name": "latest", "mode": "upsert", "key": "orderId"}]


def batch_rows(declared: LakeTableDeclaration, first_seq: int, keys: list[int]) -> pa.Table:
    """Typed rows of seqs ``first_seq..``, one per key index (``o-<i>``), a millisecond apart."""
    from decimal import Decimal

    count = len(keys)
    seqs = list(range(first_seq, first_seq + count))
    arrival = [datetime.fromtimestamp((T0_MS + s) / 1000, UTC) for s in seqs]
    columns = {
        "partition_id": [PARTITION] * count,
        "seq": seqs,
        "partition_key": [f"k{i % 64}" for i in keys],
        "arrival_time": arrival,
        "record_id": [None] * count,
        "order_id": [f"o-{i}" for i in keys],
        "country": [("DE", "FR", "NL", "US")[i % 4] for i in keys],
        "amount": [Decimal(f"{s % 10_000}.{s % 100:02d}") for s in seqs],
        "n": seqs,  # the value to check: the newest record's seq
    }
    return pa.Table.from_pydict(columns, schema=declared.typed_schema().arrow())


def measured(
    table: Any, target: UpsertTarget, batch: LakeUpsert, counter: RequestCounter
) -> dict[str, Any]:
    before = dict(counter.by_operation)
    wall, cpu = time.perf_counter(), time.process_time()
    result: UpsertResult = upsert(table, target, batch)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    requests = {k: v - before.get(k, 0) for k, v in counter.by_operation.items()}
    return {
        "batchRecords": batch.rows.num_rows,
        "batchKeys": result.keys,
        "seconds": round(wall, 2),
        "cpuSeconds": round(cpu, 2),
        "filesRead": result.files_read,
        "filesRewritten": result.files_rewritten,
        "filesWritten": result.files_written,
        "tableRows": result.rows,
        "requests": {k: v for k, v in sorted(requests.items()) if v},
        "requestsTotal": sum(requests.values()),
    }


def check(table: Any, keys: int, newest: dict[int, int]) -> None:
    """Each key once; an updated key's value is its newest record's."""
    rows = table.scan(selected_fields=("order_id", "n")).to_arrow()
    ids = rows.column("order_id").to_pylist()
    if len(ids) != keys or len(set(ids)) != keys:
        raise SystemExit(f"the table holds {len(ids)} rows of {len(set(ids))} keys, not {keys}")
    values = dict(zip(ids, rows.column("n").to_pylist(), strict=True))
    wrong = [i for i, n in newest.items() if values[f"o-{i}"] != n]
    if wrong:
        raise SystemExit(f"{len(wrong)} keys do not hold their newest record, e.g. o-{wrong[0]}")


def run(keys: int, updates: int, seed: int) -> dict[str, Any]:
    declared = parse_lake_tables(LATEST, "bench").tables[0]
    with EmbeddedAWS() as aws:
        config = common.named_log(f"bench-upsert-{uuid.uuid4().hex[:6]}", aws.endpoint_url)
        clients = config.clients()
        provision(clients, config, shard_count=1)
        raw = LakeSettings.for_deployment(
            config.bucket, config.region, config.endpoint_url, "bench_upsert.events"
        )
        tables = TypedTables.beside(raw, declared)
        table, _ = tables.open()
        counter = RequestCounter().attach(clients)
        glue = table.catalog.glue  # type: ignore[attr-defined]  # pyiceberg's own client
        glue.meta.events.register("before-send", counter._on_send)
        target = UpsertTarget(tables.typed, declared.table_schema(), clients.s3)
        key = declared.key_column()
        seeded = batch_rows(declared, 0, list(range(keys)))
        seed_run = measured(
            table, target, LakeUpsert({PARTITION: (0, keys)}, seeded, key, {}, "seed"), counter
        )
        drawn = random.Random(seed).choices(range(keys), k=updates)
        update_rows = batch_rows(declared, keys, drawn)
        newest = {i: keys + offset for offset, i in enumerate(drawn)}
        ranges = {PARTITION: (keys, keys + updates)}
        update_run = measured(
            table, target, LakeUpsert(ranges, update_rows, key, {}, "update"), counter
        )
        check(tables.open(create=False)[0], keys, newest)
    return {"keys": keys, "updates": updates, "seed": seed_run, "update": update_run}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument(
        "--keys", type=int, default=20_000, help="Keys in the table (1,000,000 for the figure)."
    )
    parser.add_argument(
        "--updates", type=int, default=0, help="Records of the measured run (default: keys / 10)."
    )
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.keys < 1 or args.updates < 0:
        parser.error("--keys must be at least 1 and --updates at least 0")
    report = run(args.keys, args.updates or max(1, args.keys // 10), args.seed)
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(f"{'run':<8} {'records':>9} {'keys':>9} {'seconds':>8} {'cpu s':>7} {'read':>5} "
          f"{'rewritten':>9} {'written':>7} {'rows':>9} {'requests':>8}")  # fmt: skip
    for name in ("seed", "update"):
        r = report[name]
        print(f"{name:<8} {r['batchRecords']:>9} {r['batchKeys']:>9} {r['seconds']:>8.2f} "
              f"{r['cpuSeconds']:>7.2f} {r['filesRead']:>5} {r['filesRewritten']:>9} "
              f"{r['filesWritten']:>7} {r['tableRows']:>9} {r['requestsTotal']:>8}")  # fmt: skip
    for name in ("seed", "update"):
        print(f"  {name} requests: {report[name]['requests']}")
    print(f"checked: {report['keys']:,} keys once each, the updated ones at their newest record")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
