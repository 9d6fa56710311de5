"""Producer API benchmark: records/s through the local HTTP API beside the SDK, same run.

Both put the same records into the embedded Kinesis (moto over HTTP), each into its own
stream:

- SDK: ``shardlog.Producer.put_records`` straight to Kinesis (PutRecords of up to 500);
- API: ``shardlog.api_client.ApiClient`` -> HTTP on 127.0.0.1 -> API Gateway proxy event
  -> the producer Lambda handler (Powertools validation, the same Producer) -> Kinesis,
  requests of up to 500 records.

Each path is warmed up (connections, moto's first calls) and then timed ``--rounds`` times,
alternating, each round on fresh streams; the best round of each is reported. Prints
records/s, Kinesis PutRecords calls and HTTP requests for each, and the ratio.
Usage: python bench/api.py [--records N] [--size BYTES] [--keys N] [--rounds N] [--json]
"""

from __future__ import annotations

import argparse
import itertools
import json
import time
from dataclasses import dataclass
from typing import Any

import common  # first: makes the repository importable

from lambdas.producer_api.handler import create_handler
from shardlog.api_client import ApiClient
from shardlog.aws import Clients, RequestCounter
from shardlog.config import ShardlogConfig
from shardlog.function_settings import ProducerApiSettings
from shardlog.local.embedded import EmbeddedAWS
from shardlog.local.http_api import LocalApiServer
from shardlog.outcomes import PutFailure
from shardlog.producer import Producer
from shardlog.records import ProducerRecord

_streams = itertools.count()
WARM_UP = 500  # records put before the clock starts


@dataclass
class Row(common.Measurement):
    put_records_calls: int
    http_requests: int


def make_records(count: int, size: int, keys: int) -> list[ProducerRecord]:
    payload = b"x" * size
    return [ProducerRecord(f"key-{i % keys:05d}", payload) for i in range(count)]


def new_stream(
    config: ShardlogConfig, name: str, shards: int
) -> tuple[str, Clients, RequestCounter]:
    name = f"{name}-{next(_streams)}"
    clients = config.clients()
    clients.kinesis.create_stream(StreamName=name, ShardCount=shards)
    clients.kinesis.get_waiter("stream_exists").wait(
        StreamName=name, WaiterConfig={"Delay": 0.1, "MaxAttempts": 100}
    )
    return name, clients, RequestCounter().attach(clients)


def bench_sdk(config: ShardlogConfig, records: list[ProducerRecord], shards: int) -> Row:
    stream, clients, counter = new_stream(config, "bench-sdk", shards)
    producer = Producer(stream, clients)
    producer.put_records(records[:WARM_UP])
    counter.reset()
    start = time.perf_counter()
    results = producer.put_records(records)
    seconds = time.perf_counter() - start
    assert len(results) == len(records)
    return Row("SDK: Producer -> Kinesis", len(records), seconds,
               counter.by_operation["kinesis.PutRecords"], 0)  # fmt: skip


def bench_api(config: ShardlogConfig, records: list[ProducerRecord], shards: int) -> Row:
    stream, clients, counter = new_stream(config, "bench-api", shards)
    handler = create_handler(ProducerApiSettings(stream_name=stream), clients)
    with LocalApiServer(handler) as server:
        client = ApiClient(server.url)
        client.put_records(records[:WARM_UP])
        counter.reset()
        client.requests = 0
        start = time.perf_counter()
        results = client.put_records(records)
        seconds = time.perf_counter() - start
    failed = [r for r in results if isinstance(r, PutFailure)]
    assert not failed, failed[:3]
    return Row("API: HTTP -> handler -> Producer -> Kinesis", len(records), seconds,
               counter.by_operation["kinesis.PutRecords"], client.requests)  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--size", type=int, default=100, help="Bytes of data per record.")
    parser.add_argument("--keys", type=int, default=1_000)
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)

    records = make_records(args.records, args.size, args.keys)
    with EmbeddedAWS() as aws:
        config = ShardlogConfig(endpoint_url=aws.endpoint_url)
        sdk_rows, api_rows = [], []
        for _ in range(max(1, args.rounds)):
            sdk_rows.append(bench_sdk(config, records, args.shards))
            api_rows.append(bench_api(config, records, args.shards))
    sdk = min(sdk_rows, key=lambda row: row.seconds)
    api = min(api_rows, key=lambda row: row.seconds)
    rows = [sdk, api]
    report: list[dict[str, Any]] = [
        {
            "path": row.name,
            "records": row.records,
            "recordsPerSecond": round(row.records_per_s, 1),
            "putRecordsCalls": row.put_records_calls,
            "httpRequests": row.http_requests,
            "vsSdk": round(row.records_per_s / sdk.records_per_s, 2),
        }
        for row in rows
    ]
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(
        f"{args.records} records of {args.size} bytes over {args.keys} keys, {args.shards} "
        f"shards; best of {max(1, args.rounds)} rounds"
    )
    header = f"{'path':<46} {'records':>8} {'records/s':>10} {'PutRecords':>11} {'HTTP req':>9}"
    print(f"{header} {'vs SDK':>7}")
    for row in rows:
        print(
            f"{row.name:<46} {row.records:>8} {row.records_per_s:>10.0f} "
            f"{row.put_records_calls:>11} {row.http_requests:>9} "
            f"{row.records_per_s / sdk.records_per_s:>6.2f}x"
        )
    print(f"API / SDK records/s: {api.records_per_s / sdk.records_per_s:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
