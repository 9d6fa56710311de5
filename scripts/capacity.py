"""The capacity model: for N shards, G Lambda consumer groups, W worker groups and a rate per
shard, the request rate against every AWS quota on shardlog's path, the first one hit, and
the setting that lifts it.

Every request count comes from a budget the code documents (cited at each ``Budget``) and is
checked against the requests the embedded AWS recorded in a local run with 64 shards
(`make capacity-check`; 12 in make test: tests/functional/local/test_capacity_model.py,
within 10%). Quotas are AWS's defaults in
us-east-1 (``QUOTAS``, each with the page that states it) or, where AWS sets none, a budget
of shardlog's own (said so). A quota's **use** is demand / limit; the first limit a
configuration hits is the one of highest use (at or past 1.0: hit; below: the headroom).

The steady state modelled: each shard receives ``rate`` records/s and ingest commits a batch
per ``max(window, 1 s)`` (Lambda polls a shard about once a second; fewer when the batch
size or Lambda's 6 MB payload fills first); each commit wakes every Lambda group's runner for
that partition once (one runner invocation delivers it); each worker group's workers poll a
busy partition every 200 ms.

    python scripts/capacity.py --shards 1000 --lambda-groups 2 --rate 100
    python scripts/capacity.py --table          # docs/SCALE.md's table (1 to 10,000 shards)
    python scripts/capacity.py --shards 64 --json
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import click

from shardlog.dal.partitions import TRANSACTIONAL_READ, TRANSACTIONAL_WRITE

# --- the code's request budgets ------------------------------------------------------------------
# Ingest, per batch of a shard: docs/ARCHITECTURE.md section 4 ("4 AWS requests per batch, plus
# 1 per extra segment, whatever the batch size; 3 when the same warm Lambda container committed
# the shard's previous batch": the transactional read is skipped). Items: the lease and the
# commit each touch the $ingest item (consumers); the state read and the commit each touch the
# partition's item (partitions).
INGEST_COLD = {
    "dynamodb:UpdateItem": 1,  # 1. the lease
    f"dynamodb:{TRANSACTIONAL_READ}": 1,  # 2. head + checkpoint (2 items, 2 RRU each)
    "s3:PutObject": 1,  # 3. the segment
    f"dynamodb:{TRANSACTIONAL_WRITE}": 1,  # 4. head + checkpoint (2 items, 2 WRU each)
}
INGEST_WARM = {k: v for k, v in INGEST_COLD.items() if k != f"dynamodb:{TRANSACTIONAL_READ}"}
# A Lambda group, per wake of one (group, partition) that delivers one commit's records:
# shardlog/lambda_consumer/runner.py steps 1-5, delivery.py and feed.py.
RUNNER_PER_WAKE = {
    # 0. the lease item's checkpoint against the head the wake names (delivered already?);
    # 1. the partition (ready? and the head the first batches are read to); 4. the head
    # again when the buffer runs out (caught up); 5. the re-check after release. Three on
    # the partition's item, one on the lease's (3. the retry state comes with the take).
    "dynamodb:GetItem": 4,
    "dynamodb:UpdateItem": 3,  # 2. acquire; 4. checkpoint; 5. release
    # 4. the segment store: where the position's segment starts, then the segments from it
    # (shardlog/segments.py, segment_start and starts), and the commit's segment
    "s3:ListObjectsV2": 2,
    "s3:GetObject": 1,
    "lambda:Invoke": 1,  # 4. the group's function
}
RUNNER_PARTITION_READS = 3  # of RUNNER_PER_WAKE's GetItems, those of the partition's item
# SQS per wake (the wake queue; Lambda's SQS event source, batch size 1): one receive, one
# delete (DeleteMessageBatch, as Lambda's poller deletes). The waker sends the wakes of one
# stream batch in SendMessageBatch calls of 10 (shardlog/lambda_consumer/wake.py,
# SEND_BATCH), per group.
SQS_PER_WAKE = {"sqs:ReceiveMessage": 1, "sqs:DeleteMessageBatch": 1}
SEND_BATCH = 10
# Lambda polls each DynamoDB stream shard 4 times a second; the waker gets up to 100 records
# an invocation (shardlog/constants.py WAKER_BATCH_SIZE).
STREAM_POLLS_PER_S = 4
WAKER_BATCH_SIZE = 100
# A worker group, per busy partition (docs/CONSUMERS.md section 7): a head read (strongly
# consistent GetItem) every active poll (200 ms), a GetObject per commit and a checkpoint per
# delivered batch; per worker every take interval (3 s): a Scan of the partitions table and a
# Query of the group's leases.
WORKER_HEAD_READS_PER_S = 5
WORKER_TAKE_INTERVAL_S = 3
# The sweep: once a minute, a Scan of the partitions table and a Query of each group's leases
# (shardlog/lambda_consumer/wake.py, sweep; docs/CONSUMERS.md section 11).
SWEEP_INTERVAL_S = 60
# Compaction: one run an hour per job (the stack's default schedule); each run commits one
# Iceberg snapshot whose summary holds one watermark per partition ever created
# (shardlog/lake/commit.py, shardlog.watermarks: `"shardId-000000000123": 123456789,` is
# about 40 bytes with its escaping); the table keeps 7 days of snapshots
# (C.DEFAULT_LAKE_SNAPSHOT_RETENTION_HOURS), each with its summary, in metadata.json.
WATERMARK_BYTES = 40
SNAPSHOTS_KEPT = 7 * 24
# Item sizes, for capacity units: every item of both tables is well under 1 KB (writes: 1 WRU,
# 2 in a transaction) and 4 KB (reads: 1 RRU consistent, 2 in a transaction). A Scan reads
# about 300 bytes per partition item.
PARTITION_ITEM_BYTES = 300
# Lambda's invocation payload caps a Kinesis batch: the data in base64 plus ~400 bytes a record.
LAMBDA_PAYLOAD_BYTES = 6 * 1024 * 1024
EVENT_RECORD_OVERHEAD_BYTES = 400
POLL_S = 1.0  # Lambda reads each shard about once a second
# How long one wake's runner (and the group's function) runs: ~8 requests at ~10 ms and a
# function of ~100 ms. Concurrency = wakes/s x this (Little's law).
RUNNER_WAKE_S = 0.2
INGEST_INVOCATION_S = 0.1


@dataclass(frozen=True)
class Quota:
    key: str
    what: str
    limit: float
    unit: str
    lift: str  # the setting or request that raises or avoids it
    source: str  # where the limit is stated


# AWS's defaults, us-east-1 (adjustable ones can be raised through Service Quotas).
QUOTAS: dict[str, Quota] = {
    q.key: q
    for q in (
        Quota("kinesis.shards", "Kinesis shards per account", 500, "shards",
              "a Service Quotas increase (and shardlog:shardCount, at most 500 today)",
              "Kinesis Data Streams quotas: 500 shards per account in us-east-1"),
        Quota("kinesis.write", "Kinesis writes per shard", 1000, "records/s",
              "more shards (shardlog:shardCount), or on-demand (0)",
              "Kinesis quotas: 1 MB/s or 1,000 records/s per shard"),
        Quota("kinesis.read", "Kinesis reads per shard (shared by standard consumers)",
              2 * 1024 * 1024, "bytes/s",
              "shardlog:ingestFanOut=true (2 MB/s per shard for the ingest consumer alone)",
              "Kinesis quotas: GetRecords 2 MB/s and 5 calls/s per shard"),
        Quota("lambda.concurrency", "Lambda concurrent executions per account", 900,
              "executions", "a Service Quotas increase; shardlog:ingestReservedConcurrency",
              "Lambda quotas: 1,000 per region, 100 of them kept unreserved"),
        Quota("sqs.fifo", "each Lambda group's FIFO wake queue, per API action", 300,
              "calls/s", "high-throughput FIFO on the wake queues (infra/lambda_consumers.py)",
              "SQS quotas: FIFO 300 transactions/s per API action without high throughput"),
        Quota("sqs.fifo.high_throughput", "a high-throughput FIFO wake queue, per API action",
              70_000, "calls/s", "fewer commits: shardlog:ingestBatchingWindowMs",
              "SQS quotas: high-throughput FIFO 70,000 transactions/s (us-east-1)"),
        Quota("dynamodb.key.write", "DynamoDB writes to one partition key", 1000, "WRU/s",
              "fewer commits per shard: shardlog:ingestBatchingWindowMs (DynamoDB also splits a "
              "hot key's items by sort key under sustained load)",
              "DynamoDB: 1,000 WCU/s per partition"),
        Quota("dynamodb.key.read", "DynamoDB reads of one partition key", 3000, "RRU/s",
              "fewer worker polls (active_poll_interval_ms) or commits",
              "DynamoDB: 3,000 RCU/s per partition"),
        Quota("dynamodb.table.write", "DynamoDB on-demand writes per table", 40_000, "WRU/s",
              "a Service Quotas increase (table throughput); shardlog:ingestBatchingWindowMs",
              "DynamoDB quotas: 40,000 WRU/s per on-demand table"),
        Quota("dynamodb.table.read", "DynamoDB on-demand reads per table", 40_000, "RRU/s",
              "a Service Quotas increase; fewer worker polls",
              "DynamoDB quotas: 40,000 RRU/s per on-demand table"),
        Quota("s3.put", "S3 PUTs under events/ until S3 partitions the prefix", 3500, "PUT/s",
              "shardlog:ingestBatchingWindowMs (S3 also partitions events/<shard>/ by itself "
              "under sustained load, answering 503 SlowDown meanwhile)",
              "S3: 3,500 PUT/s per partitioned prefix"),
        Quota("s3.get", "S3 GETs under events/ until S3 partitions the prefix", 5500, "GET/s",
              "shardlog:ingestBatchingWindowMs", "S3: 5,500 GET/s per partitioned prefix"),
        Quota("iceberg.metadata", "the lake table's metadata.json (shardlog's budget)",
              100 * 1024 * 1024, "bytes",
              "a shorter lake snapshot retention; retired partitions' watermarks left out of "
              "each snapshot",
              "shardlog: pyiceberg reads and rewrites all of it on every commit and load"),
    )
}  # fmt: skip


@dataclass(frozen=True)
class Workload:
    shards: int
    lambda_groups: int = 1
    worker_groups: int = 0
    rate: float = 1000.0  # records/s per shard
    record_bytes: int = 1024
    window_s: float = 1.0  # shardlog:ingestBatchingWindowMs / 1000
    batch_size: int = 1000  # shardlog:ingestBatchSize
    fan_out: bool = False  # shardlog:ingestFanOut
    high_throughput_fifo: bool = True
    partitions_ever: int | None = None  # with resharding history; None: the shards
    partitions_per_worker: int = 100
    warm: bool = True  # ingest's warm container (3 requests a batch) or cold (4)

    @property
    def records_per_batch(self) -> int:
        per_record = 4 * math.ceil(self.record_bytes / 3) + EVENT_RECORD_OVERHEAD_BYTES
        gathered = math.ceil(self.rate * max(self.window_s, POLL_S))
        return max(1, min(self.batch_size, LAMBDA_PAYLOAD_BYTES // per_record, gathered))

    @property
    def commits_per_s(self) -> float:
        """Ingest batches committed per second, per shard."""
        return self.rate / self.records_per_batch

    @property
    def partitions(self) -> int:
        return self.partitions_ever or self.shards

    @property
    def workers_per_group(self) -> int:
        return math.ceil(self.shards / self.partitions_per_worker)


@dataclass
class Demand:
    """Requests per second by "service:Operation", and each quota's demand."""

    requests: dict[str, float] = field(default_factory=dict)
    quotas: dict[str, float] = field(default_factory=dict)

    def add(self, calls: Mapping[str, float], times: float) -> None:
        for name, n in calls.items():
            self.requests[name] = self.requests.get(name, 0.0) + n * times


def requests_per_commit(w: Workload) -> dict[str, float]:
    """What one commit of one shard costs, end to end: ingest, then each Lambda group's wake
    and each worker group's read of it (the per-second polls and scans apart)."""
    demand = Demand()
    demand.add(INGEST_WARM if w.warm else INGEST_COLD, 1)
    demand.add(RUNNER_PER_WAKE, w.lambda_groups)
    demand.add(SQS_PER_WAKE, w.lambda_groups)
    demand.add({"s3:GetObject": 1, "dynamodb:UpdateItem": 1}, w.worker_groups)
    return demand.requests


def model(w: Workload) -> Demand:
    d = Demand()
    commits = w.shards * w.commits_per_s  # per second, all shards
    d.add(requests_per_commit(w), commits)
    # The waker: a stream batch per commit until the stream's polls gather several.
    stream_shards = max(1, math.ceil(commits * 2 / 1000))  # 2 WRU a commit per 1,000 WCU
    waker_invocations = min(commits, stream_shards * STREAM_POLLS_PER_S)
    per_invocation = commits / waker_invocations if waker_invocations else 0
    sends = waker_invocations * math.ceil(min(per_invocation, WAKER_BATCH_SIZE) / SEND_BATCH)
    if w.lambda_groups:
        d.add({"sqs:SendMessageBatch": sends}, w.lambda_groups)
    # Workers: head polls per busy partition; each worker's take cycle.
    workers = w.worker_groups * w.workers_per_group
    d.add({"dynamodb:GetItem": WORKER_HEAD_READS_PER_S * w.shards}, w.worker_groups)
    take = 1 / WORKER_TAKE_INTERVAL_S
    d.add({"dynamodb:Scan": take, "dynamodb:Query": take}, workers)
    if w.lambda_groups:
        d.add({"dynamodb:Scan": 1 / SWEEP_INTERVAL_S}, 1)
        d.add({"dynamodb:Query": 1 / SWEEP_INTERVAL_S}, w.lambda_groups)
    _quotas(w, d, commits, waker_invocations, workers, stream_shards)
    return d


def _quotas(w: Workload, d: Demand, commits: float, waker_invocations: float, workers: int,
            stream_shards: int) -> None:  # fmt: skip
    q = d.quotas
    per_shard_commits = w.commits_per_s
    wakes_per_group = commits  # one wake per commit per group
    q["kinesis.shards"] = w.shards
    q["kinesis.write"] = w.rate
    q["kinesis.read"] = 0 if w.fan_out else w.rate * w.record_bytes
    # Ingest: one invocation per shard at a time (the stack reserves 2 per shard); each group:
    # runners and the group's function in flight; the waker: one per stream shard.
    ingest = 2 * w.shards
    groups = w.lambda_groups * 2 * min(w.shards, wakes_per_group * RUNNER_WAKE_S)
    waker = min(stream_shards, waker_invocations * INGEST_INVOCATION_S) if w.lambda_groups else 0
    q["lambda.concurrency"] = ingest + groups + waker
    fifo = max(wakes_per_group, waker_invocations) if w.lambda_groups else 0
    q["sqs.fifo.high_throughput" if w.high_throughput_fifo else "sqs.fifo"] = fifo
    # The hot key: every group's lease items share its consumerGroup (the consumers table's
    # partition key): $ingest takes 1 (lease) + 2 (transaction) WRU a commit of each shard; a
    # Lambda group 3 a wake (acquire, checkpoint, release); a worker group 1 (checkpoint).
    ingest_key = 3 * commits
    lambda_key = 3 * wakes_per_group
    worker_key = commits
    hottest = max(ingest_key, lambda_key if w.lambda_groups else 0,
                  worker_key if w.worker_groups else 0)  # fmt: skip
    q["dynamodb.key.write"] = hottest
    # One partition's item: ingest's transactional read (2 RRU, cold), runners' reads of it
    # each wake, workers' head polls.
    q["dynamodb.key.read"] = (
        (0 if w.warm else 2) * per_shard_commits
        + RUNNER_PARTITION_READS * per_shard_commits * w.lambda_groups
        + WORKER_HEAD_READS_PER_S * w.worker_groups
    )
    consumers_writes = ingest_key + w.lambda_groups * lambda_key + w.worker_groups * worker_key
    partitions_writes = 2 * commits
    q["dynamodb.table.write"] = max(consumers_writes, partitions_writes)
    scan_rru = math.ceil(w.partitions * PARTITION_ITEM_BYTES / 4096) / 2  # eventually consistent
    scans = workers / WORKER_TAKE_INTERVAL_S + (1 / SWEEP_INTERVAL_S if w.lambda_groups else 0)
    partitions_reads = (
        (0 if w.warm else 2) * commits
        + RUNNER_PARTITION_READS * commits * w.lambda_groups
        + WORKER_HEAD_READS_PER_S * w.shards * w.worker_groups
        + scan_rru * scans
    )
    q["dynamodb.table.read"] = partitions_reads
    q["s3.put"] = commits
    # GETs and the runners' LISTs (LIST is not in S3's per-prefix figures: counted as a GET)
    q["s3.get"] = commits * (w.lambda_groups * 3 + w.worker_groups)
    q["iceberg.metadata"] = SNAPSHOTS_KEPT * w.partitions * WATERMARK_BYTES


@dataclass(frozen=True)
class Use:
    quota: Quota
    demand: float

    @property
    def use(self) -> float:
        return self.demand / self.quota.limit

    def as_dict(self) -> dict[str, Any]:
        return {
            "quota": self.quota.key,
            "what": self.quota.what,
            "demand": round(self.demand, 3),
            "limit": self.quota.limit,
            "unit": self.quota.unit,
            "use": round(self.use, 4),
            "lift": self.quota.lift,
            "source": self.quota.source,
        }


def uses(w: Workload) -> list[Use]:
    """Every quota's use, highest first."""
    d = model(w)
    return sorted((Use(QUOTAS[k], v) for k, v in d.quotas.items()), key=lambda u: -u.use)


def first_limit(w: Workload) -> Use:
    return uses(w)[0]


def report(w: Workload) -> dict[str, Any]:
    d = model(w)
    found = uses(w)
    return {
        "workload": {
            "shards": w.shards,
            "lambdaGroups": w.lambda_groups,
            "workerGroups": w.worker_groups,
            "ratePerShard": w.rate,
            "recordBytes": w.record_bytes,
            "windowSeconds": w.window_s,
            "batchSize": w.batch_size,
            "fanOut": w.fan_out,
            "highThroughputFifo": w.high_throughput_fifo,
            "partitionsEver": w.partitions,
        },
        "recordsPerBatch": w.records_per_batch,
        "commitsPerSecond": round(w.shards * w.commits_per_s, 3),
        "requestsPerSecond": {k: round(v, 3) for k, v in sorted(d.requests.items())},
        "quotas": [u.as_dict() for u in found],
        "firstLimit": found[0].as_dict(),
        "hit": found[0].use >= 1.0,
    }


# --- docs/SCALE.md's table ------------------------------------------------------------------------
TABLE_SHARDS = (1, 100, 1_000, 10_000)


def table_workloads(base: Workload) -> list[Workload]:
    return [replace(base, shards=n) for n in TABLE_SHARDS]


def markdown_table(base: Workload) -> list[str]:
    lines = [
        "| shards | commits/s | requests/s | first limit | use | then | lifted by |",
        "| ---: | ---: | ---: | --- | ---: | --- | --- |",
    ]
    for w in table_workloads(base):
        found = uses(w)
        first, second = found[0], found[1]
        total = sum(model(w).requests.values())
        lines.append(
            f"| {w.shards:,} | {w.shards * w.commits_per_s:,.1f} | {total:,.0f} | "
            f"{first.quota.what} ({first.demand:,.0f} of {first.quota.limit:,.0f} "
            f"{first.quota.unit}) | {first.use:.2f} | {second.quota.what} {second.use:.2f} | "
            f"{first.quota.lift} |"
        )
    return lines


def _text(r: dict[str, Any]) -> str:
    w = r["workload"]
    lines = [
        f"{w['shards']:,} shards, {w['lambdaGroups']} Lambda and {w['workerGroups']} worker "
        f"groups, {w['ratePerShard']:g} records/s per shard of {w['recordBytes']} B, window "
        f"{w['windowSeconds']:g} s: {r['recordsPerBatch']} records a batch, "
        f"{r['commitsPerSecond']:,} commits/s",
        "requests/s: " + ", ".join(f"{k} {v:,.1f}" for k, v in r["requestsPerSecond"].items()),
        f"{'quota':<58} {'demand':>14} {'limit':>12} {'use':>6}",
    ]
    for u in r["quotas"]:
        lines.append(f"{u['what']:<58} {u['demand']:>14,.1f} {u['limit']:>12,.0f} {u['use']:>6.2f}")
    first = r["firstLimit"]
    verb = "hits" if r["hit"] else "comes closest to"
    lines.append(f"first limit: {verb} {first['what']} ({first['use']:.2f}); lift: {first['lift']}")
    return "\n".join(lines)


@click.command()
@click.option("--shards", type=click.IntRange(min=1), default=64, show_default=True)
@click.option("--lambda-groups", type=click.IntRange(min=0), default=1, show_default=True)
@click.option("--worker-groups", type=click.IntRange(min=0), default=0, show_default=True)
@click.option("--rate", type=click.FloatRange(min=0.001), default=1000.0, show_default=True,
              help="records/s per shard")  # fmt: skip
@click.option("--record-bytes", type=click.IntRange(min=1), default=1024, show_default=True)
@click.option("--window-ms", type=click.IntRange(0, 300_000), default=1000, show_default=True,
              help="shardlog:ingestBatchingWindowMs")  # fmt: skip
@click.option("--batch-size", type=click.IntRange(1, 10_000), default=1000, show_default=True,
              help="shardlog:ingestBatchSize")  # fmt: skip
@click.option("--fan-out", is_flag=True, help="shardlog:ingestFanOut=true")
@click.option("--standard-fifo", is_flag=True,
              help="wake queues without high-throughput mode (before this change)")  # fmt: skip
@click.option("--partitions-ever", type=click.IntRange(min=1), default=None,
              help="partitions ever created (resharding history); default: --shards")  # fmt: skip
@click.option("--table", "as_table", is_flag=True,
              help="docs/SCALE.md's table: 1, 100, 1,000 and 10,000 shards")  # fmt: skip
@click.option("--json", "as_json", is_flag=True)
def main(shards: int, lambda_groups: int, worker_groups: int, rate: float, record_bytes: int,
         window_ms: int, batch_size: int, fan_out: bool, standard_fifo: bool,
         partitions_ever: int | None, as_table: bool, as_json: bool) -> None:  # fmt: skip
    """The request rate against every AWS quota on the path, and the first limit hit."""
    base = Workload(
        shards=shards,
        lambda_groups=lambda_groups,
        worker_groups=worker_groups,
        rate=rate,
        record_bytes=record_bytes,
        window_s=window_ms / 1000,
        batch_size=batch_size,
        fan_out=fan_out,
        high_throughput_fifo=not standard_fifo,
        partitions_ever=partitions_ever,
    )
    workloads: Sequence[Workload] = table_workloads(base) if as_table else [base]
    if as_json:
        click.echo(json.dumps([report(w) for w in workloads], indent=2))
    elif as_table:
        click.echo("\n".join(markdown_table(base)))
    else:
        click.echo(_text(report(base)))


if __name__ == "__main__":
    main()
