"""Ingest benchmark: shardlog's write path vs a Safya-style baseline, same run, same AWS.

Both ingest the same Kinesis-like records into the embedded AWS (moto over HTTP):

- shardlog: LogWriter.append per Lambda batch (lease, head read, one segment
  PutObject, one commit transaction), and the same through the Lambda handler
  (event parsing included);
- baseline (the original Safya): per record one DynamoDB atomic increment of the
  partition counter and one S3 PutObject of the record.

Each path sends a warm-up first (a batch on another partition, or one request), untimed and
not counted: connections and lazy imports are not what a batch costs; then the test data is
frozen out of the garbage collector's reach (``settle_fixtures``), and the bare writer, the
handler and the baseline are timed interleaved, a batch of each in turn (the baseline's
records cut into as many runs), so that what slows the machine for a while slows all three
alike and their ratios are measured side by side. Each path's CPU is split
into its requests' (both ends, by operation) and its own code's, and the requests' CPU bounds
the bare writer / baseline ratio on the embedded AWS: the last line says at what.
Prints records/s and AWS requests per 1,000 records for each, and the ratios.
Usage: python bench/ingest.py [--records N] [--batch-size N] [--baseline-records N] [--json]
"""

from __future__ import annotations

import argparse
import functools
import gc
import json
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import common  # first: makes the repository importable

from shardlog.aws import Clients, RequestCounter
from shardlog.config import ShardlogConfig
from shardlog.dal.partitions import PartitionsTable
from shardlog.format import IncomingRecord
from shardlog.local.embedded import EmbeddedAWS, provision
from shardlog.local.kinesis_fidelity import SEQUENCE_BASE
from shardlog.segments import segment_key
from shardlog.shardsync import ShardSync
from shardlog.writer import LogWriter, WriterSettings


@dataclass
class Row(common.Measurement):
    requests: int
    cpu_s: float = 0.0  # the process's CPU time over the timed part (both ends)
    request_cpu_ms: dict[str, float] = field(default_factory=dict)  # by operation

    @property
    def requests_per_1000(self) -> float:
        return self.per_1000_records(self.requests)


class RequestCpu:
    """The CPU time of each AWS request, both ends: the embedded AWS serves in this process
    and a call waits for its answer, so the process's CPU time during a call is the request's
    (botocore's and moto's work). What is left of a path's CPU time is its own code."""

    def __init__(self) -> None:
        self.ms: defaultdict[str, float] = defaultdict(float)

    def attach(self, clients: Clients) -> RequestCpu:
        for client in (clients.dynamodb, clients.s3):
            original = client._make_api_call

            def timed(operation: str, params: dict[str, Any], original: Any = original) -> Any:
                start = time.process_time()
                try:
                    return original(operation, params)
                finally:
                    self.ms[operation] += 1000 * (time.process_time() - start)

            client._make_api_call = timed  # type: ignore[method-assign]
        return self


class Timed:
    """Wall and process CPU time of the timed part of a path."""

    def __enter__(self) -> Timed:
        self.wall, self.cpu = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall = time.perf_counter() - self.wall
        self.cpu = time.process_time() - self.cpu


def make_records(count: int, size: int = 100) -> list[IncomingRecord]:
    payload = b"x" * size
    return [
        IncomingRecord(f"key-{i % 1000}", payload, str(SEQUENCE_BASE + 3 * i), 1_700_000_000_000)
        for i in range(count)
    ]


def settle_fixtures() -> None:
    """Move the benchmark's own test data (the records, the events) and what the warm-up
    loaded (lazy imports: Powertools' metrics and tracer, botocore's models) out of the
    collector's reach: else its full collections walk them over and over, and the pause
    lands on whichever request happens to run (seen: the writer's commit at 8 ms instead of
    5.5). Every path is timed from a settled heap, after its warm-up."""
    gc.collect()
    gc.freeze()


def counted(config: ShardlogConfig) -> tuple[Clients, RequestCounter, RequestCpu]:
    clients = config.clients()
    return clients, RequestCounter().attach(clients), RequestCpu().attach(clients)


Call = Callable[[], object]
Batch = Callable[[], Call]  # called untimed; returns the call to time


def ready(call: Call) -> Batch:
    """A batch with nothing to set up before its timed call."""
    return lambda: call


@dataclass
class Path:
    """A path to time batch by batch: its batches, its meters, its totals."""

    name: str
    records: int
    batches: Sequence[Batch]
    counter: RequestCounter
    cpu: RequestCpu
    wall_s: float = 0.0
    cpu_s: float = 0.0

    def row(self) -> Row:
        return Row(self.name, self.records, self.wall_s, self.counter.total, self.cpu_s,
                   dict(self.cpu.ms))  # fmt: skip


def timed(*paths: Path) -> list[Row]:
    """Time the paths' batches interleaved (a batch of each in turn, the order flipped at
    every round), from a settled heap: whatever slows the machine for a while (another
    process, the clock speed, a full collection) falls on every path alike, so their ratio
    is measured side by side rather than one after the other."""
    settle_fixtures()
    for path in paths:
        path.counter.reset()
        path.cpu.ms.clear()
    for round_number, batches in enumerate(zip(*(path.batches for path in paths), strict=True)):
        turn = list(zip(paths, batches, strict=True))
        for path, batch in turn if round_number % 2 == 0 else reversed(turn):
            call = batch()
            with Timed() as spent:
                call()
            path.wall_s += spent.wall
            path.cpu_s += spent.cpu
    return [path.row() for path in paths]


def writer_path(config: ShardlogConfig, records: list[IncomingRecord], batch: int,
                segment_max_records: int, name: str, partition: str) -> Path:  # fmt: skip
    """LogWriter.append per batch, after a warm-up batch on another partition (connections,
    lazy imports)."""
    clients, counter, cpu = counted(config)
    writer = LogWriter(
        clients,
        WriterSettings(config.bucket, config.tables, segment_max_records=segment_max_records),
    )
    writer.append(f"{partition}-warm-up", records[:batch])
    batches = [
        ready(functools.partial(writer.append, partition, records[i : i + batch]))
        for i in range(0, len(records), batch)
    ]
    return Path(name, len(records), batches, counter, cpu)


def handler_path(config: ShardlogConfig, records: list[IncomingRecord], batch: int) -> Path:
    """The ingest Lambda handler per Kinesis event, after a warm-up event on another shard.

    Each event is kept as the JSON Lambda delivers and decoded just before its call, untimed,
    as the Lambda runtime does before it calls the handler: the handler reads a fresh event,
    not one built minutes earlier (whose 1,000 record dicts, cold in the CPU's caches, made
    the event parsing 0.87 ms a batch instead of 0.71)."""
    from lambdas.ingest.handler import create_handler
    from shardlog.function_settings import IngestSettings
    from shardlog.local.lambda_context import LambdaContext

    clients, counter, cpu = counted(config)
    handle = create_handler(
        IngestSettings(
            bucket=config.bucket,
            tables=config.tables,
        ),
        clients,
    )
    shard = "shardId-000000000001"
    handle(common.kinesis_event(f"{shard}-warm-up", records[:batch]), LambdaContext("warm-up"))
    context = LambdaContext("bench-ingest")

    def invocation(payload: bytes) -> Call:
        return functools.partial(handle, json.loads(payload), context)

    batches = [
        functools.partial(
            invocation, json.dumps(common.kinesis_event(shard, records[i : i + batch])).encode()
        )
        for i in range(0, len(records), batch)
    ]
    return Path("shardlog via Lambda handler", len(records), batches, counter, cpu)


def baseline_path(config: ShardlogConfig, records: list[IncomingRecord], rounds: int) -> Path:
    """Safya's original write: one atomic increment and one object per record, in ``rounds``
    runs of consecutive records (to interleave with the batches of the other paths)."""
    clients, counter, cpu = counted(config)
    partition = "shardId-baseline"
    clients.s3.head_bucket(Bucket=config.bucket)  # a warm-up request (connections)
    heads = PartitionsTable(clients, config.tables)

    def write(chunk: list[IncomingRecord]) -> None:
        for record in chunk:
            seq = heads.increment_head(partition)
            clients.s3.put_object(
                Bucket=config.bucket, Key=segment_key(partition, seq), Body=record.data
            )

    size = -(-len(records) // rounds)  # every round but the last ones gets this many
    batches = [
        ready(functools.partial(write, records[i * size : (i + 1) * size])) for i in range(rounds)
    ]
    name = "baseline (Safya: increment + PutObject per record)"
    return Path(name, len(records), batches, counter, cpu)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=50_000)
    parser.add_argument("--batch-size", type=int, default=1_000)
    parser.add_argument("--baseline-records", type=int, default=1_000)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)

    with EmbeddedAWS() as aws:
        config = ShardlogConfig(endpoint_url=aws.endpoint_url)
        provision(config.clients(), config, shard_count=2)
        # Lineage recorded, as the stack's scheduled shard sync (and the local runtime's at
        # start) does before the shards' first batches arrive.
        ShardSync(config.clients(), config.stream_name, config.tables).sync()
        records = make_records(args.records)
        writer = writer_path(config, records, args.batch_size, 10_000, "shardlog (segments)",
                             "shardId-000000000000")  # fmt: skip
        handler = handler_path(config, records, args.batch_size)
        safya_path = baseline_path(config, records[: args.baseline_records], len(writer.batches))
        bare, via_handler, safya = timed(writer, handler, safya_path)
        (one_per_record,) = timed(
            writer_path(config, records[: args.baseline_records * 5], args.batch_size, 1,
                        "shardlog, one object per record", "shardId-one-per-record")
        )  # fmt: skip
        rows = [bare, via_handler, one_per_record, safya]
    baseline = rows[-1]
    report: list[dict[str, Any]] = []
    if not args.json:
        header = ("path", "records", "records/s", "req/1k rec", "vs baseline")
        print(f"{header[0]:<52} {header[1]:>8} {header[2]:>11} {header[3]:>11} {header[4]:>12}")
    for row in rows:
        ratio = row.records_per_s / baseline.records_per_s
        report.append(
            {
                "path": row.name,
                "records": row.records,
                "recordsPerSecond": round(row.records_per_s, 1),
                "requestsPer1000Records": round(row.requests_per_1000, 2),
                "speedupVsBaseline": round(ratio, 1),
                "cpuMsPer1000Records": round(row.per_1000_records(1000 * row.cpu_s), 2),
                "requestCpuMsPer1000Records": round(
                    row.per_1000_records(sum(row.request_cpu_ms.values())), 2
                ),
                "requestCpuMsPer1000RecordsByOperation": {
                    op: round(row.per_1000_records(ms), 2)
                    for op, ms in sorted(row.request_cpu_ms.items(), key=lambda kv: -kv[1])
                },
            }
        )
        if not args.json:
            print(
                f"{row.name:<52} {row.records:>8} {row.records_per_s:>11.0f} "
                f"{row.requests_per_1000:>11.2f} {ratio:>11.1f}x"
            )
    report[0]["requestCpuBoundVsBaseline"] = round(request_cpu_bound(report), 1)
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print("\nCPU per 1,000 records (both ends: the embedded AWS runs in this process)")
    for entry in report:
        requests = entry["requestCpuMsPer1000Records"]
        by_operation = ", ".join(
            f"{op} {ms:,.2f}" for op, ms in entry["requestCpuMsPer1000RecordsByOperation"].items()
        )
        print(
            f"  {entry['path']:<52} {entry['cpuMsPer1000Records']:>9,.2f} ms: requests "
            f"{requests:,.2f} ({by_operation}), own code "
            f"{entry['cpuMsPer1000Records'] - requests:,.2f}"
        )
    bound = report[0]["requestCpuBoundVsBaseline"]
    print(f"bound: {bound:,.0f}x, the bare writer / baseline ratio of a writer whose CPU were "
          "its requests' alone")  # fmt: skip
    return 0


def request_cpu_bound(report: list[dict[str, Any]]) -> float:
    """The records/s ratio bare writer / baseline if the writer spent no CPU outside its
    requests: on the embedded AWS each request costs CPU, and not the same for each kind."""
    writer, baseline = report[0], report[-1]
    return float(
        baseline["requestCpuMsPer1000Records"] / max(writer["requestCpuMsPer1000Records"], 1e-9)
    )


if __name__ == "__main__":
    raise SystemExit(main())
