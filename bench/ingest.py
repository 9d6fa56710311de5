"""Ingest benchmark: shardlog's write path vs a Safya-style baseline, same run, same AWS.

Both ingest the same Kinesis-like records into the embedded AWS (moto over HTTP):

- shardlog: LogWriter.append per Lambda batch (lease, head read, one segment
  PutObject, one commit transaction), and the same through the Lambda handler
  (event parsing included);
- baseline (the original Safya): per record one DynamoDB atomic increment of the
  partition counter and one S3 PutObject of the record.

Each path sends a warm-up first (a batch on another partition, or one request), untimed and
not counted: connections and lazy imports are not what a batch costs.
Prints records/s and AWS requests per 1,000 records for each, and the ratios.
Usage: python bench/ingest.py [--records N] [--batch-size N] [--baseline-records N] [--json]
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass
from typing import Any

import common  # first: makes the repository importable

from shardlog.aws import Clients, RequestCounter
from shardlog.config import ShardlogConfig
from shardlog.format import IncomingRecord
from shardlog.local.embedded import EmbeddedAWS, provision
from shardlog.local.kinesis_fidelity import SEQUENCE_BASE
from shardlog.segments import segment_key
from shardlog.writer import LogWriter, WriterSettings


@dataclass
class Row(common.Measurement):
    requests: int

    @property
    def requests_per_1000(self) -> float:
        return 1000 * self.requests / self.records


def make_records(count: int, size: int = 100) -> list[IncomingRecord]:
    payload = b"x" * size
    return [
        IncomingRecord(f"key-{i % 1000}", payload, str(SEQUENCE_BASE + 3 * i), 1_700_000_000_000)
        for i in range(count)
    ]


def counted(config: ShardlogConfig) -> tuple[Clients, RequestCounter]:
    clients = config.clients()
    return clients, RequestCounter().attach(clients)


def bench_writer(config: ShardlogConfig, records: list[IncomingRecord], batch: int,
                 segment_max_records: int, name: str, partition: str) -> Row:  # fmt: skip
    clients, counter = counted(config)
    writer = LogWriter(
        clients,
        WriterSettings(config.bucket, config.tables, segment_max_records=segment_max_records),
    )
    writer.append(f"{partition}-warm-up", records[:batch])  # connections, lazy imports
    counter.reset()
    start = time.perf_counter()
    for i in range(0, len(records), batch):
        writer.append(partition, records[i : i + batch])
    return Row(name, len(records), time.perf_counter() - start, counter.total)


def bench_handler(config: ShardlogConfig, records: list[IncomingRecord], batch: int) -> Row:
    from lambdas.ingest.handler import create_handler
    from lambdas.ingest.settings import IngestSettings
    from shardlog.local.poller import LambdaContext

    clients, counter = counted(config)
    handle = create_handler(
        IngestSettings(
            bucket=config.bucket,
            partitions_table=config.partitions_table,
            consumers_table=config.consumers_table,
        ),
        clients,
    )
    shard = "shardId-000000000001"
    events = [
        common.kinesis_event(shard, records[i : i + batch]) for i in range(0, len(records), batch)
    ]
    # A warm-up batch on another shard first (connections, lazy imports), as for the writer.
    handle(common.kinesis_event(f"{shard}-warm-up", records[:batch]), LambdaContext("warm-up"))
    counter.reset()
    start = time.perf_counter()
    for event in events:
        handle(event, LambdaContext("bench-ingest"))
    return Row("shardlog via Lambda handler", len(records), time.perf_counter() - start,
               counter.total)  # fmt: skip


def bench_baseline(config: ShardlogConfig, records: list[IncomingRecord]) -> Row:
    """Safya's original write: one atomic increment and one object per record."""
    clients, counter = counted(config)
    partition = "shardId-baseline"
    clients.s3.head_bucket(Bucket=config.bucket)  # a warm-up request (connections)
    counter.reset()
    start = time.perf_counter()
    for record in records:
        response = clients.dynamodb.update_item(
            TableName=config.partitions_table,
            Key={"partitionId": {"S": partition}},
            UpdateExpression="ADD nextSequenceNumber :one",
            ExpressionAttributeValues={":one": {"N": "1"}},
            ReturnValues="UPDATED_NEW",
        )
        seq = int(response["Attributes"]["nextSequenceNumber"]["N"]) - 1
        clients.s3.put_object(
            Bucket=config.bucket, Key=segment_key(partition, seq), Body=record.data
        )
    return Row("baseline (Safya: increment + PutObject per record)", len(records),
               time.perf_counter() - start, counter.total)  # fmt: skip


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
        records = make_records(args.records)
        rows = [
            bench_writer(config, records, args.batch_size, 10_000, "shardlog (segments)",
                         "shardId-000000000000"),
            bench_handler(config, records, args.batch_size),
            bench_writer(config, records[: args.baseline_records * 5], args.batch_size, 1,
                         "shardlog, one object per record", "shardId-one-per-record"),
            bench_baseline(config, records[: args.baseline_records]),
        ]  # fmt: skip
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
            }
        )
        if not args.json:
            print(
                f"{row.name:<52} {row.records:>8} {row.records_per_s:>11.0f} "
                f"{row.requests_per_1000:>11.2f} {ratio:>11.1f}x"
            )
    if args.json:
        print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
