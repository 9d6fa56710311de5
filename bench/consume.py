"""Consumer benchmark: consumer group workers vs a raw GetObject-and-decode baseline, same run.

One log is written into the embedded AWS (moto over HTTP) with LogWriter, then read:

- baseline: every committed segment fetched with GetObject and decoded, one by one, in
  one thread (no leases, no checkpoints, no ordering across partitions: the floor);
- shardlog, 1 worker: one consumer group worker, checkpointing every batch;
- shardlog, N workers: N workers of another group in threads of this process, each with
  its own clients, balancing the partitions among themselves.

Prints records/s and AWS requests per 1,000 records for each.
Usage: python bench/consume.py [--partitions N] [--records N] [--workers N] [--json]
"""

from __future__ import annotations

import argparse
import json
import logging
import threading
import time
from dataclasses import dataclass
from typing import Any

import common  # first: makes the repository importable

from shardlog import constants as C
from shardlog.aws import RequestCounter
from shardlog.config import ShardlogConfig
from shardlog.consumer import Checkpointer, ConsumerSettings, Worker
from shardlog.format import IncomingRecord, LogRecord
from shardlog.local.embedded import EmbeddedAWS, provision
from shardlog.local.kinesis_fidelity import SEQUENCE_BASE
from shardlog.segments import SegmentStore
from shardlog.tables import partition_key
from shardlog.writer import LogWriter, WriterSettings


@dataclass
class Row(common.Measurement):
    requests: int
    redelivered: int = 0  # delivered twice: a steal's victim had not checkpointed its batch

    @property
    def requests_per_1000(self) -> float:
        return 1000 * self.requests / self.records


def write_log(
    config: ShardlogConfig, partitions: list[str], per_partition: int, segment: int
) -> None:
    clients = config.clients()
    writer = LogWriter(
        clients,
        WriterSettings(config.bucket, config.tables, segment_max_records=segment),
    )
    payload = b"x" * 100
    for p, partition_id in enumerate(partitions):
        # What shard sync records for a root shard: consumers wait for known lineage.
        clients.dynamodb.update_item(
            TableName=config.partitions_table,
            Key=partition_key(partition_id),
            UpdateExpression="SET #p = :p, #hs = :hs, #he = :he, #n = :z, #s = :s",
            ExpressionAttributeNames={
                "#p": C.ATTR_PARENT_PARTITION_IDS,
                "#hs": C.ATTR_STARTING_HASH_KEY,
                "#he": C.ATTR_ENDING_HASH_KEY,
                "#n": C.ATTR_NEXT_SEQUENCE_NUMBER,
                "#s": C.ATTR_STATE,
            },
            ExpressionAttributeValues={
                ":p": {"L": []},
                ":hs": {"S": str(p)},
                ":he": {"S": str(p)},
                ":z": {"N": "0"},
                ":s": {"S": C.STATE_OPEN},
            },
        )
        records = [
            IncomingRecord(f"key-{i % 1000}", payload, str(SEQUENCE_BASE + 3 * i), 1_700_000_000)
            for i in range(per_partition)
        ]
        for start in range(0, per_partition, 10_000):
            writer.append(partition_id, records[start : start + 10_000])


def bench_baseline(config: ShardlogConfig, partitions: list[str]) -> Row:
    clients = config.clients()
    counter = RequestCounter().attach(clients)
    records = 0
    start = time.perf_counter()
    store = SegmentStore(clients, config.bucket)
    for partition_id in partitions:
        for first in store.starts(partition_id):
            records += len(store.fetch(partition_id, first).records)
    return Row("baseline: GetObject + decode, 1 thread", records, time.perf_counter() - start,
               counter.total)  # fmt: skip


class Counting:
    """Counts records (distinct and in all) and checkpoints every batch, as a real processor."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.delivered = 0
        self.next_seq: dict[str, int] = {}  # per partition: one past the highest seq seen

    @property
    def distinct(self) -> int:
        with self.lock:
            return sum(self.next_seq.values())

    def __call__(self, records: list[LogRecord], checkpointer: Checkpointer) -> None:
        with self.lock:
            self.delivered += len(records)
            last = records[-1]
            self.next_seq[last.partition_id] = max(
                self.next_seq.get(last.partition_id, 0), last.seq + 1
            )
        checkpointer.checkpoint()


def bench_workers(
    config: ShardlogConfig, group: str, workers: int, total: int, settings: ConsumerSettings
) -> Row:
    counting = Counting()
    counter = RequestCounter()
    crew = []
    for i in range(workers):
        clients = config.clients()
        counter.attach(clients)
        crew.append(
            Worker(group, counting, config, clients=clients, settings=settings, worker_id=f"w{i}")
        )
    stop = threading.Event()
    threads = [threading.Thread(target=w.run, args=(stop,), daemon=True) for w in crew]
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    deadline = start + 600
    while counting.distinct < total and time.perf_counter() < deadline:
        time.sleep(0.01)
    elapsed = time.perf_counter() - start
    stop.set()
    for thread in threads:
        thread.join(timeout=60)
    if counting.distinct < total:
        raise SystemExit(f"{group}: only {counting.distinct} of {total} records consumed")
    name = f"shardlog, {workers} worker{'s' if workers > 1 else ''} (threads)"
    return Row(name, total, elapsed, counter.total, counting.delivered - total)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--records", type=int, default=50_000, help="per partition")
    parser.add_argument("--segment-records", type=int, default=C.DEFAULT_SEGMENT_MAX_RECORDS)
    parser.add_argument("--records-per-call", type=int, default=ConsumerSettings.records_per_call)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.ERROR)  # takes, steals and losses are logged at INFO

    partitions = [f"shardId-{i:012d}" for i in range(args.partitions)]
    total = args.partitions * args.records
    settings = ConsumerSettings(
        lease_duration_ms=10_000,
        renew_interval_ms=3_000,
        take_interval_ms=100,
        idle_poll_interval_ms=50,
        records_per_call=args.records_per_call,
    )
    with EmbeddedAWS() as aws:
        config = ShardlogConfig(endpoint_url=aws.endpoint_url)
        provision(config.clients(), config, shard_count=1)
        write_log(config, partitions, args.records, args.segment_records)
        rows = [
            bench_baseline(config, partitions),
            bench_workers(config, "bench-one", 1, total, settings),
            bench_workers(config, "bench-many", args.workers, total, settings),
        ]
    baseline = rows[0]
    report: list[dict[str, Any]] = []
    if not args.json:
        print(f"{args.partitions} partitions x {args.records} records, segments of "
              f"{args.segment_records}, {args.records_per_call} records per call")  # fmt: skip
        header = f"{'path':<42} {'records':>8} {'records/s':>11} {'req/1k rec':>11}"
        print(f"{header} {'vs baseline':>12} {'redelivered':>12}")
    for row in rows:
        ratio = row.records_per_s / baseline.records_per_s
        report.append(
            {
                "path": row.name,
                "records": row.records,
                "recordsPerSecond": round(row.records_per_s, 1),
                "requestsPer1000Records": round(row.requests_per_1000, 2),
                "vsBaseline": round(ratio, 2),
                "redelivered": row.redelivered,
            }
        )
        if not args.json:
            print(
                f"{row.name:<42} {row.records:>8} {row.records_per_s:>11.0f} "
                f"{row.requests_per_1000:>11.2f} {ratio:>11.2f}x {row.redelivered:>12}"
            )
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(
            "moto serves S3 and DynamoDB from this same Python process: every path shares one\n"
            "interpreter lock, so worker threads add coordination, not CPU. Workers scale as\n"
            "processes or hosts; redelivered = records a steal's victim had not checkpointed."
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
