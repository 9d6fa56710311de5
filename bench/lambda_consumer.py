"""Lambda consumer benchmark: the runner beside a `shardlog consume` worker, same log, same run.

On the embedded AWS (moto over HTTP, in this process):

- throughput: one partition's log read to its head by the Lambda consumer runner (the
  function called in-process) and by a consumer group worker, both in batches of
  ``--batch-size``: records/s, AWS requests per 1,000 records and per batch (besides
  the invoke, which on AWS is one Lambda Invoke per batch);
- lanes: one partition, a function that takes ``--lanes-delay-ms`` per invocation, read
  to its head at parallelization factor 4 and at factor 1 in the same run: records/s,
  the ratio (factor 4 should deliver at least 3x), and AWS requests per batch besides
  the invoke at each factor;
- latency: records committed at a steady rate while the local Lambda consumer group runs
  (the partitions stream, the waker, the SQS FIFO wake queue, the runner, all real
  threads on the real clock): commit-to-invoke p50/p95/p99/max, beside a worker's
  commit-to-delivery.

Exits non-zero unless every record was delivered exactly once, in order (in lanes: each
key's records in order).
Usage: python bench/lambda_consumer.py [--records N] [--batch-size N] [--lanes-records N]
       [--commits N] [--json]
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import threading
import time
from collections.abc import Callable
from typing import Any

import common  # first: the repository importable

from shardlog.aws import RequestCounter
from shardlog.clock import SystemClock
from shardlog.config import ShardlogConfig
from shardlog.consumer import Checkpointer, ConsumerSettings, Worker
from shardlog.dal.partitions import PartitionsTable
from shardlog.format import IncomingRecord, LogRecord
from shardlog.lambda_consumer.registration import register
from shardlog.lambda_consumer.runner import Runner
from shardlog.lambda_consumer.settings import LambdaConsumerSettings, RunnerSettings
from shardlog.lambda_consumer.wake import WakeSender, wake_queue_name
from shardlog.local.embedded import EmbeddedAWS, provision
from shardlog.local.kinesis_fidelity import SEQUENCE_BASE
from shardlog.local.lambda_consumers import LocalGroup, LocalLambdaConsumers
from shardlog.local.lambda_context import LocalInvoker
from shardlog.writer import LogWriter, WriterSettings

PARTITION = "shardId-000000000000"
_seq = iter(range(10**12))


def records(count: int, keys: int = 100) -> list[IncomingRecord]:
    now = SystemClock().now_ms()
    return [
        IncomingRecord(f"key-{i % keys}", b"x" * 100, str(SEQUENCE_BASE + 7 * next(_seq)), now)
        for i in range(count)
    ]


def register_root(config: ShardlogConfig, partition_id: str) -> None:
    """What shard sync records for a root shard: consumers wait for known lineage."""
    PartitionsTable(config.clients(), config.tables).record_lineage(partition_id, (), "0", "0")


class Counter:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.seqs: list[int] = []
        self.invoked_at: dict[int, float] = {}

    def note(self, seqs: list[int]) -> None:
        now = time.monotonic()
        with self.lock:
            self.seqs += seqs
            for seq in seqs:
                self.invoked_at.setdefault(seq, now)

    def function(self, event: dict[str, Any], _context: Any) -> Any:
        self.note([int(r["kinesis"]["sequenceNumber"]) for r in event["Records"]])
        return {"batchItemFailures": []}

    def processor(self, batch: list[LogRecord], checkpointer: Checkpointer) -> None:
        self.note([r.seq for r in batch])
        checkpointer.checkpoint()

    def exactly_once_in_order(self, total: int) -> bool:
        return self.seqs == list(range(total))


def runner_for(
    config: ShardlogConfig,
    function: Callable[[dict[str, Any], Any], Any],
    batch_size: int,
    group: str = "bench",
    factor: int = 1,
) -> tuple[Runner, RequestCounter]:
    clients = config.clients()
    sqs = clients.client("sqs")
    url = sqs.create_queue(QueueName=wake_queue_name(group), Attributes={"FifoQueue": "true"})[
        "QueueUrl"
    ]
    settings = RunnerSettings(
        consumer=LambdaConsumerSettings(
            group=group,
            function_name="count",
            batch_size=batch_size,
            parallelization_factor=factor,
        ),
        bucket=config.bucket,
        tables=config.tables,
        wake_queue_url=url,
        event_source_arn="arn:aws:kinesis:us-east-1:123456789012:stream/bench",
    )
    register(  # what deploy does, not counted as the runner's requests
        clients,
        group,
        settings.consumer.start_position(),
        bucket=config.bucket,
        names=config.tables,
        now_ms=SystemClock().now_ms(),
    )
    requests = RequestCounter().attach(clients)
    invoker = LocalInvoker(function, "count", clients.region)
    return Runner(clients, settings, invoker, WakeSender(clients, {group: url})), requests


def throughput(config: ShardlogConfig, total: int, batch_size: int) -> list[dict[str, Any]]:
    writer = LogWriter(config.clients(), WriterSettings(config.bucket, config.tables))
    register_root(config, PARTITION)
    for start in range(0, total, 10_000):
        writer.append(PARTITION, records(min(10_000, total - start)))
    rows = []
    counter = Counter()
    runner, requests = runner_for(config, counter.function, batch_size)
    started = time.perf_counter()
    report = runner.run(PARTITION, request_id="bench", remaining_ms=lambda: 900_000)
    elapsed = time.perf_counter() - started
    if not counter.exactly_once_in_order(total):
        raise SystemExit(
            f"Lambda consumer: not every record exactly once in order ({len(counter.seqs)})"
        )
    rows.append(_row("Lambda consumer runner", total, elapsed, requests.total, report.invocations))

    worker_counter = Counter()
    clients = config.clients()
    worker_requests = RequestCounter().attach(clients)
    settings = ConsumerSettings(
        records_per_call=batch_size, take_interval_ms=1, idle_poll_interval_ms=0
    )
    worker = Worker(
        "bench-worker",
        worker_counter.processor,
        config,
        clients=clients,
        settings=settings,
        threads=1,
    )
    started = time.perf_counter()
    for _ in range(100_000):
        worker.run_once()
        if len(worker_counter.seqs) >= total:
            break
    elapsed = time.perf_counter() - started
    worker.close()
    if not worker_counter.exactly_once_in_order(total):
        raise SystemExit("worker: not every record exactly once in order")
    batches = -(-total // batch_size)
    rows.append(_row("`shardlog consume` worker", total, elapsed, worker_requests.total, batches))
    return rows


def _row(name: str, total: int, seconds: float, requests: int, batches: int) -> dict[str, Any]:
    return {
        "path": name,
        "records": total,
        "recordsPerSecond": round(total / seconds, 1),
        "requestsPer1000Records": round(1000 * requests / total, 2),
        "requestsPerBatch": round(requests / max(batches, 1), 2),
    }


class SlowFunction:
    """A function that takes ``delay_ms`` an invocation (real time: it is the load), and
    notes each record's key and seq; called from the runner's lanes at once."""

    def __init__(self, delay_ms: int) -> None:
        self.delay_ms = delay_ms
        self.lock = threading.Lock()
        self.seen: list[tuple[str, int]] = []

    def __call__(self, event: dict[str, Any], _context: Any) -> Any:
        time.sleep(self.delay_ms / 1000)
        batch = [
            (r["kinesis"]["partitionKey"], int(r["kinesis"]["sequenceNumber"]))
            for r in event["Records"]
        ]
        with self.lock:
            self.seen.extend(batch)
        return {"batchItemFailures": []}


def lanes(
    config: ShardlogConfig, total: int, batch_size: int, delay_ms: int
) -> list[dict[str, Any]]:
    """One partition (1,000 keys), a function taking ``delay_ms`` an invocation, at factor 4
    and factor 1: records/s and AWS requests per batch (besides the invoke) of each."""
    partition = "shardId-000000000002"
    register_root(config, partition)
    writer = LogWriter(config.clients(), WriterSettings(config.bucket, config.tables))
    written = records(total, keys=1_000)
    writer.append(partition, written)
    rows = []
    for factor in (4, 1):
        slow = SlowFunction(delay_ms)
        runner, requests = runner_for(config, slow, batch_size, f"lanes-{factor}", factor)
        started = time.perf_counter()
        report = runner.run(partition, request_id=f"lanes-{factor}", remaining_ms=lambda: 900_000)
        elapsed = time.perf_counter() - started
        by_key: dict[str, list[int]] = {}
        for key, seq in slow.seen:
            by_key.setdefault(key, []).append(seq)
        if sorted(s for _, s in slow.seen) != list(range(total)) or any(
            seqs != sorted(seqs) for seqs in by_key.values()
        ):
            raise SystemExit(f"factor {factor}: not every record once with each key in order")
        row = _row(f"factor {factor}", total, elapsed, requests.total, report.invocations)
        rows.append({**row, "factor": factor, "invocations": report.invocations})
    return rows


def percentiles(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    q = statistics.quantiles(ordered, n=100, method="inclusive")
    return {"p50": q[49], "p95": q[94], "p99": q[98], "max": ordered[-1]}


def latency(
    config: ShardlogConfig, commits: int, per_commit: int, interval_ms: int
) -> list[dict[str, Any]]:
    partition = "shardId-000000000001"
    register_root(config, partition)
    counter = Counter()
    group = LocalGroup(
        LambdaConsumerSettings(group="latency", function_name="count", batch_size=100),
        counter.function,
        "bench:count",
    )
    consumers = LocalLambdaConsumers(config.clients(), config, [group]).start()
    worker_counter = Counter()
    worker = Worker(
        "latency-worker",
        worker_counter.processor,
        config,
        settings=ConsumerSettings(take_interval_ms=200),  # the default idle poll: 1 s
        threads=2,
    )
    stop = threading.Event()
    consumers.run_in_background(stop)
    worker_thread = threading.Thread(target=worker.run, args=(stop,), daemon=True)
    worker_thread.start()
    writer = LogWriter(config.clients(), WriterSettings(config.bucket, config.tables))
    committed_at: dict[int, float] = {}
    seq = 0
    for _ in range(commits):
        writer.append(partition, records(per_commit))
        now = time.monotonic()
        for _ in range(per_commit):
            committed_at[seq] = now
            seq += 1
        time.sleep(interval_ms / 1000)  # a steady commit rate (this is the load, not a wait)
    total = seq
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and (
        len(counter.invoked_at) < total or len(worker_counter.invoked_at) < total
    ):
        time.sleep(0.05)  # bounded: waiting for the last deliveries
    stop.set()
    worker_thread.join(30)
    consumers.join(30)
    rows = []
    for name, seen in (
        ("Lambda consumer: commit to invoke", counter),
        ("worker: commit to delivery", worker_counter),
    ):
        missing = total - len({s for s in seen.seqs if s < total})
        if missing:
            raise SystemExit(f"{name}: {missing} records never delivered")
        delays = [1000 * (seen.invoked_at[s] - committed_at[s]) for s in range(total)]
        rows.append(
            {
                "path": name,
                "records": total,
                **{k: round(v, 1) for k, v in percentiles(delays).items()},
            }
        )
    return rows


def _print_rows(rows: list[dict[str, Any]], title: str, key: str, spec: str) -> None:
    """Path, records/s, the column ``key`` (headed ``title``), requests per batch."""
    print(f"{'path':<30} {'records/s':>11} {title:>11} {'req/batch':>10}")
    for row in rows:
        rate, value, per_batch = row["recordsPerSecond"], row[key], row["requestsPerBatch"]
        print(f"{row['path']:<30} {rate:>11.0f} {value:>11{spec}} {per_batch:>10.2f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=50_000, help="throughput: log size")
    parser.add_argument("--batch-size", type=int, default=100)
    parser.add_argument("--lanes-records", type=int, default=4_000, help="lanes: log size")
    parser.add_argument("--lanes-batch-size", type=int, default=10)
    parser.add_argument("--lanes-delay-ms", type=int, default=20, help="lanes: per invocation")
    parser.add_argument("--commits", type=int, default=200, help="latency: commits")
    parser.add_argument("--per-commit", type=int, default=10, help="latency: records a commit")
    parser.add_argument("--interval-ms", type=int, default=20, help="latency: between commits")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.ERROR)
    logging.getLogger("shardlog").setLevel(logging.WARNING)  # takes and wakes log at INFO
    with EmbeddedAWS() as aws:
        config = ShardlogConfig(endpoint_url=aws.endpoint_url)
        provision(config.clients(), config, shard_count=1)
        throughput_rows = throughput(config, args.records, args.batch_size)
        lane_rows = lanes(config, args.lanes_records, args.lanes_batch_size, args.lanes_delay_ms)
        # A log of its own: the groups must not start with the throughput backlog.
        fresh = common.named_log("latency", aws.endpoint_url)
        provision(fresh.clients(), fresh, shard_count=1)
        latency_rows = latency(fresh, args.commits, args.per_commit, args.interval_ms)
    if args.json:
        document = {"throughput": throughput_rows, "lanes": lane_rows, "latency": latency_rows}
        print(json.dumps(document, indent=2))
        return 0
    print(f"throughput: one partition, {args.records} records, batches of {args.batch_size}")
    _print_rows(throughput_rows, "req/1k rec", "requestsPer1000Records", ".2f")
    ratio = throughput_rows[0]["recordsPerSecond"] / throughput_rows[1]["recordsPerSecond"]
    print(f"runner / worker records/s: {ratio:.2f}x (the invoke is in-process here)")
    print(
        f"\nlanes: one partition, {args.lanes_records} records, batches of "
        f"{args.lanes_batch_size}, a function taking {args.lanes_delay_ms} ms an invocation"
    )
    _print_rows(lane_rows, "invokes", "invocations", "d")
    speedup = lane_rows[0]["recordsPerSecond"] / lane_rows[1]["recordsPerSecond"]
    print(f"factor 4 / factor 1 records/s: {speedup:.2f}x")
    print(
        f"\nlatency (ms): {args.commits} commits of {args.per_commit} records, "
        f"one every {args.interval_ms} ms"
    )
    print(f"{'path':<36} {'p50':>7} {'p95':>7} {'p99':>7} {'max':>7}")
    for row in latency_rows:
        figures = " ".join(f"{row[k]:>7.0f}" for k in ("p50", "p95", "p99", "max"))
        print(f"{row['path']:<36} {figures}")
    print(f"p99 commit-to-invoke (Lambda consumer): {latency_rows[0]['p99']:.0f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
