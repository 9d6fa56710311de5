"""Compaction by volume beside the hourly schedule: $ per million records and the lake's
freshness at 10, 100 and 1,000 records/s (one shard).

- **hourly** (the stack's default): one run an hour, priced as bench/cost.py's compaction
  column (executors' work measured, plus EMR Serverless's one-minute minimum per run);
- **volume**: the schedule still runs hourly, and a run also starts each time the backlog
  counted since the last crossing or scheduled run reaches the threshold
  (shardlog/spark/volume.py). It adds a run's minimum per crossing (floor(rate x 1 h /
  threshold) an hour; the executors' work per record is the same) and the counter: the
  Spark trigger invoked per stream batch, one UpdateItem per partition a batch moved,
  metered here on the embedded AWS with one commit per ingest batch (each its own stream
  batch: the most invocations).

Freshness is the lake's worst lag behind the log, run time apart: the interval between
runs, min(1 h, threshold / rate).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from bench import cost_scenarios as S
from bench import costmodel as M
from bench.cost_metering import Meter, cpu_and_requests, usage_of
from bench.pricing import PriceTable
from shardlog.dal.volume import BacklogCounter
from shardlog.spark.jobs import JobArgs
from shardlog.spark.trigger import SparkTarget, SparkTrigger
from shardlog.spark.volume import VolumeThreshold, VolumeTrigger

DEFAULT_THRESHOLD = 100_000  # records
TRIGGER_MEMORY_MB = 128  # infra/functions.py's default: the trigger sets no other
SCHEDULE_S = S.COMPACTION_INTERVAL_S


def run_minimum(prices: PriceTable) -> float:
    """What one EMR Serverless run costs at least, whatever it compacts."""
    vcpu_h = S.EMR_RUN_MIN_VCPU_SECONDS / 3600
    return vcpu_h * (
        prices.emr_serverless_vcpu_hour + S.EMR_GB_PER_VCPU * prices.emr_serverless_gb_hour
    )


def counter(endpoint: str, shape: S.Shape, meter: Meter, aws_request_ms: float,
            commits: int) -> M.Usage:  # fmt: skip
    """The trigger's counting: ``commits`` commits of ``shape.batch`` records, each read
    from the partitions table's stream and counted (no crossing: the threshold is above)."""
    from shardlog.local.event_sources import DynamoDbStreamSource

    config = S.fresh_log(endpoint, "volume")
    clients = config.clients()
    writer = S.unmetered_writer(config)
    never = VolumeThreshold(records=10**12)
    spark = SparkTrigger(
        clients.client("emr-serverless"),
        SparkTarget("unused", "arn:aws:iam::123456789012:role/unused", "s3://unused/"),
        JobArgs.from_config(config),
    )
    trigger = VolumeTrigger(spark, BacklogCounter(clients, config.consumers_table), never)
    table = clients.dynamodb.describe_table(TableName=config.partitions_table)["Table"]

    def handle(event: dict[str, Any], _context: Any) -> None:
        records = event["Records"]
        trigger.on_changes([(_image(r, "OldImage"), _image(r, "NewImage")) for r in records])

    source = DynamoDbStreamSource(
        clients, table["LatestStreamArn"], handle, function_name="volume"
    ).start()
    meter.reset()
    gb_s = 0.0
    for _ in range(commits):
        writer.append(S.PARTITION, S.incoming(shape.batch, shape.size, 1_700_000_000_000))
        with cpu_and_requests(meter) as spent:
            source.poll_once()
        gb_s += M.lambda_gb_seconds(spent[0], int(spent[1]), TRIGGER_MEMORY_MB, aws_request_ms)
    assert source.failures == 0
    return usage_of(meter, config, commits * shape.batch, lambda_invocations=source.invocations,
                    lambda_gb_seconds=gb_s)  # fmt: skip


def _image(record: dict[str, Any], name: str) -> dict[str, Any] | None:
    from shardlog.tables import from_ddb

    image = record["dynamodb"].get(name)
    return from_ddb(image) if image else None


@dataclass(frozen=True)
class VolumeRow:
    rate: int
    threshold: int
    hourly: float  # $ per million records
    counter: float  # $ per million records, the trigger's counting
    extra_runs: float  # $ per million records, the crossings' run minimums
    requests_per_batch: float  # DynamoDB requests per stream batch (the stream read is free)

    @property
    def volume(self) -> float:
        return self.hourly + self.counter + self.extra_runs

    @property
    def hourly_lag_s(self) -> float:
        return SCHEDULE_S

    @property
    def volume_lag_s(self) -> float:
        return min(SCHEDULE_S, self.threshold / self.rate)

    def as_dict(self) -> dict[str, object]:
        return {
            "rate": self.rate,
            "threshold": self.threshold,
            "hourly": round(self.hourly, 6),
            "volume": round(self.volume, 6),
            "counter": round(self.counter, 6),
            "extraRuns": round(self.extra_runs, 6),
            "hourlyLagS": self.hourly_lag_s,
            "volumeLagS": round(self.volume_lag_s, 1),
            "requestsPerStreamBatch": round(self.requests_per_batch, 2),
        }


def crossings_per_hour(rate: int, threshold: int) -> int:
    """Crossings between two scheduled runs: each scheduled run resets the backlog."""
    return math.floor(rate * SCHEDULE_S / threshold)


def volume_row(rate: int, threshold: int, hourly: float, counted: M.Usage,
               prices: PriceTable) -> VolumeRow:  # fmt: skip
    counter_cost = sum(M.cost_per_million(counted, prices).values())
    batches = max(1, counted.lambda_invocations)
    return VolumeRow(
        rate=rate,
        threshold=threshold,
        hourly=hourly,
        counter=counter_cost,
        extra_runs=crossings_per_hour(rate, threshold)
        * run_minimum(prices)
        * M.MILLION
        / (rate * SCHEDULE_S),
        requests_per_batch=counted.count("dynamodb") / batches,
    )


def _lag(seconds: float) -> str:
    return f"{seconds / 60:.0f} min" if seconds >= 60 else f"{seconds:.0f} s"


def print_volume(rows: Sequence[VolumeRow]) -> None:
    threshold = rows[0].threshold if rows else DEFAULT_THRESHOLD
    print(f"compaction by volume ({threshold:,} records) beside the hourly schedule, "
          "$ per million records, 1 KiB records, one shard:")  # fmt: skip
    print(f"{'rec/s':>6} | {'hourly':>8} {'lake lag':>9} | {'volume':>8} {'lake lag':>9} | "
          f"{'counter':>8} {'runs':>8} {'req/batch':>9}")  # fmt: skip
    for r in rows:
        print(f"{r.rate:>6} | {r.hourly:>8.4f} {_lag(r.hourly_lag_s):>9} | {r.volume:>8.4f} "
              f"{_lag(r.volume_lag_s):>9} | {r.counter:>8.4f} {r.extra_runs:>8.4f} "
              f"{r.requests_per_batch:>9.2f}")  # fmt: skip
    print("volume = hourly + counter (the trigger per stream batch: Lambda + one UpdateItem per "
          "partition moved)\n+ runs (an EMR Serverless run's one-minute minimum per crossing); "
          "lake lag = the worst, run time apart.")  # fmt: skip
