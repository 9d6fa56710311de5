"""This machine's speed, as the benchmarks feel it: the CPU time of one DynamoDB GetItem
sent by boto3 to the embedded AWS and served there (both ends in this process).

Local figures scale with it, so it is printed beside them: compare runs on two machines
by this figure first. The median of 5 rounds of 400 calls, after 200 to warm up.
Usage: python bench/speed.py [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import common  # noqa: F401  (first: the repository importable)

from shardlog.config import ShardlogConfig
from shardlog.local.embedded import EmbeddedAWS, provision

ROUNDS, CALLS, WARM_UP = 5, 400, 200


def get_item_cpu_ms() -> float:
    with EmbeddedAWS() as aws:
        config = ShardlogConfig(endpoint_url=aws.endpoint_url)
        clients = config.clients()
        provision(clients, config, shard_count=1)
        key = {"partitionId": {"S": "speed"}}
        table = config.tables.partitions
        clients.dynamodb.put_item(TableName=table, Item={**key, "nextSequenceNumber": {"N": "0"}})
        for _ in range(WARM_UP):
            clients.dynamodb.get_item(TableName=table, Key=key)
        rounds = []
        for _ in range(ROUNDS):
            started = time.process_time()
            for _ in range(CALLS):
                clients.dynamodb.get_item(TableName=table, Key=key)
            rounds.append(1000 * (time.process_time() - started) / CALLS)
    return statistics.median(rounds)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    ms = get_item_cpu_ms()
    print(json.dumps({"getItemCpuMs": round(ms, 2)}) if args.json else
          f"a GetItem to the embedded AWS: {ms:.2f} ms of CPU")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
