"""Cost benchmark: dollars per million records, from request counts measured here.

For each rate (records/s per shard) and record size it runs small workloads on the
embedded AWS (moto over HTTP) and meters every request they send (``RequestCounter``,
plus each DynamoDB request's items and consistency, and each table's measured item size):

- ingest: the Lambda handler on batches of the size the 1 s batching window gathers at
  that rate (capped by the batch size, 1,000, and Lambda's 6 MB payload);
- worker: a `shardlog consume` worker (default settings) following that log in simulated
  time (an injected clock), one ingest batch per window;
- Lambda consumer: the local Lambda consumer group (partitions stream -> waker -> SQS FIFO
  wake -> runner -> your function) following the same log, plus its one-minute sweep;
- compaction: the compaction protocol (plan, begin, commit: shardlog/spark/compaction.py)
  around a single-process floor of the executors' work (GET + decode + Parquet + PUT);
  EMR Serverless compute from that floor's CPU time per record, plus each run's minimum;
- Safya's design: one DynamoDB increment and one S3 PUT per record, one invoke per record;
- Firehose Direct PUT to S3 and Kinesis (provisioned, on-demand): their billing rules.

Prices: shardlog/pricing.py (dated); rules: shardlog/costmodel.py. Lambda duration is the
handler's measured CPU time (scaled to the function's vCPU share) plus an allowance per AWS
request (--aws-request-ms). Kinesis GetRecords, DynamoDB Streams reads by Lambda triggers and
the local event sources' empty SQS polls are not billed per request and are not counted.
The last two lines are the shardlog share (ingest: Lambda + DynamoDB + S3) and the all-in
(plus a provisioned Kinesis shard) at 1,000 records/s per shard, 1 KiB records.
Usage: python bench/cost.py [--quick] [--chart PATH] [--json PATH] [--aws-request-ms MS]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import common  # first: the repository importable, Powertools quiet

from shardlog import constants as C
from shardlog import costmodel as M
from shardlog.aws import Clients, RequestCounter
from shardlog.clock import ManualClock
from shardlog.config import ShardlogConfig
from shardlog.consumer import Checkpointer, Worker
from shardlog.dal import TRANSACTIONAL_READ, TRANSACTIONAL_WRITE
from shardlog.dal.partitions import PartitionsTable
from shardlog.format import IncomingRecord, LogRecord
from shardlog.local.embedded import EmbeddedAWS, provision
from shardlog.local.kinesis_fidelity import SEQUENCE_BASE
from shardlog.pricing import PRICES_AS_OF, REGION, US_EAST_1, PriceTable
from shardlog.shardsync import ShardSync
from shardlog.writer import LogWriter, WriterSettings

RATES = (10, 100, 1000)
SIZES = (1024, 10 * 1024)
PARTITION = "shardId-000000000000"
WINDOW_S = C.INGEST_BATCHING_WINDOW_S
# What the stack gives each function (infra/constants.py, infra/functions.py,
# infra/lambda_consumers.py); Safya's per-record function is taken at the default size.
INGEST_MEMORY_MB = 1024
RUNNER_MEMORY_MB = 512
WAKER_MEMORY_MB = 256
SAFYA_MEMORY_MB = 256
# EMR Serverless: a worker has 4 GB per vCPU (its default 4 vCPU / 16 GB); a run bills at
# least a driver and an executor for one minute each (its minimum billing).
EMR_GB_PER_VCPU = 4
EMR_RUN_MIN_VCPU_SECONDS = 2 * 4 * 60
COMPACTION_INTERVAL_S = 3600  # the stack's default schedule: hourly


# --- metering ----------------------------------------------------------------------------------
class Meter:
    """Requests by operation, and each DynamoDB request's table, items and consistency."""

    def __init__(self) -> None:
        self.requests = RequestCounter()
        self._lock = threading.Lock()
        self.dynamo: list[M.DynamoCall] = []
        self._scan = threading.local()  # the table of the Scan or Query being answered

    def attach(self, clients: Clients) -> Clients:
        self.requests.attach(clients)
        clients.add_hook("before-parameter-build.dynamodb", self._on_dynamodb)
        clients.add_hook("after-call.dynamodb", self._on_dynamodb_answer)
        return clients

    @property
    def total(self) -> int:
        return self.requests.total

    def reset(self) -> None:
        self.requests.reset()
        with self._lock:
            self.dynamo.clear()

    def _on_dynamodb(self, params: dict[str, Any], model: Any, **_: Any) -> None:
        op = model.name
        if op in ("Scan", "Query"):
            self._scan.table = params.get("TableName", "")  # units follow what was read
            self._scan.consistent = bool(params.get("ConsistentRead", False))
            return
        if op == TRANSACTIONAL_WRITE:
            items = params.get("TransactItems", [])
            tables = [next(iter(i.values()))["TableName"] for i in items]
        elif op == TRANSACTIONAL_READ:
            tables = [i["Get"]["TableName"] for i in params.get("TransactItems", [])]
        elif "TableName" in params:
            tables = [params["TableName"]]
        else:
            return  # BatchGetItem/BatchWriteItem: shardlog sends none
        consistent = bool(params.get("ConsistentRead", False))
        with self._lock:
            self.dynamo += [M.DynamoCall(op, table, 1, consistent) for table in tables]

    def _on_dynamodb_answer(self, parsed: dict[str, Any], model: Any, **_: Any) -> None:
        if model.name not in ("Scan", "Query"):
            return
        scanned = int(parsed.get("ScannedCount", parsed.get("Count", 0)))
        call = M.DynamoCall(model.name, self._scan.table, max(1, scanned), self._scan.consistent)
        with self._lock:
            self.dynamo.append(call)


def metered(meter: Meter) -> Callable[[], None]:
    """Every Clients a ShardlogConfig builds from now on is metered; returns the undo."""
    original = ShardlogConfig.clients

    def clients(self: ShardlogConfig) -> Clients:
        return meter.attach(original(self))

    ShardlogConfig.clients = clients  # type: ignore[method-assign]

    def undo() -> None:
        ShardlogConfig.clients = original  # type: ignore[method-assign]

    return undo


@contextmanager
def cpu_and_requests(meter: Meter) -> Iterator[list[float]]:
    """Yields [cpu_ms, requests], filled in when the block ends (this thread's CPU only:
    the embedded AWS serves requests on other threads)."""
    out = [0.0, 0.0]
    cpu, requests = time.thread_time(), meter.total
    yield out
    out[0] = 1000 * (time.thread_time() - cpu)
    out[1] = meter.total - requests


def item_sizes(config: ShardlogConfig) -> dict[str, int]:
    """The largest item of each table, as DynamoDB sizes it (every item is billed at it)."""
    ddb = Clients(endpoint_url=config.endpoint_url, config=_aws(config)).dynamodb  # unmetered
    sizes = {}
    for table in (config.partitions_table, config.consumers_table):
        items = ddb.scan(TableName=table).get("Items", [])
        sizes[table] = max((M.item_size_bytes(i) for i in items), default=0)
    return sizes


def usage_of(meter: Meter, config: ShardlogConfig, records: int, **fields: Any) -> M.Usage:
    wru, rru = M.dynamodb_units(list(meter.dynamo), item_sizes(config))
    return M.Usage(
        records=records,
        requests=dict(meter.requests.snapshot()),
        dynamodb_wru=wru,
        dynamodb_rru=rru,
        **fields,
    )


# --- the log -------------------------------------------------------------------------------------
_kinesis_seq = iter(range(10**12))


def incoming(count: int, size: int, t: int) -> list[IncomingRecord]:
    payload = b"x" * size
    return [
        IncomingRecord(f"key-{i % 100}", payload, str(SEQUENCE_BASE + 3 * next(_kinesis_seq)), t)
        for i in range(count)
    ]


def fresh_log(endpoint: str, name: str) -> ShardlogConfig:
    tag = f"{name}-{uuid.uuid4().hex[:6]}"
    config = ShardlogConfig(
        stream_name=f"cost-{tag}",
        bucket=f"cost-{tag}",
        partitions_table=f"cost-{tag}-partitions",
        consumers_table=f"cost-{tag}-consumers",
        endpoint_url=endpoint,
    )
    unmetered = Clients(endpoint_url=endpoint, config=_aws(config))
    provision(unmetered, config, shard_count=1)
    ShardSync(unmetered, config.stream_name, config.tables).sync()  # lineage: consumers start
    return config


def _aws(config: ShardlogConfig) -> Any:
    from shardlog.aws import AwsConfig
    from shardlog.config import LOCAL_CREDENTIALS

    key, secret = LOCAL_CREDENTIALS
    return AwsConfig(config.region, config.endpoint_url, key, secret)


def unmetered_writer(config: ShardlogConfig, clock: ManualClock | None = None) -> LogWriter:
    clients = Clients(endpoint_url=config.endpoint_url, config=_aws(config))
    return LogWriter(clients, WriterSettings(config.bucket, config.tables), clock=clock)


@dataclass
class Shape:
    rate: int  # records/s per shard
    size: int  # bytes per record
    seconds: int  # simulated steady state for the consumers

    @property
    def batch(self) -> int:
        return M.lambda_batch_records(self.rate, self.size, C.INGEST_BATCH_SIZE, WINDOW_S)

    @property
    def batches_per_s(self) -> float:
        return self.rate / self.batch


# --- workloads -----------------------------------------------------------------------------------
def ingest_usage_bytes_per_record(endpoint: str, usage: M.Usage) -> float:
    """What the log stores per record (segments in S3), measured on the ingest bucket."""
    config = LAST_INGEST_CONFIG[0]
    s3 = Clients(endpoint_url=endpoint, config=_aws(config)).s3
    listed = s3.list_objects_v2(Bucket=config.bucket).get("Contents", [])
    return sum(o["Size"] for o in listed) / max(usage.records + 1, 1)  # + the warm-up record


LAST_INGEST_CONFIG: list[ShardlogConfig] = []


def ingest(endpoint: str, shape: Shape, meter: Meter, aws_request_ms: float,
           batches: int) -> M.Usage:  # fmt: skip
    from lambdas.ingest.handler import create_handler
    from lambdas.ingest.settings import IngestSettings
    from shardlog.local.poller import LambdaContext

    config = fresh_log(endpoint, "ingest")
    LAST_INGEST_CONFIG[:] = [config]
    handle = create_handler(
        IngestSettings(
            bucket=config.bucket,
            partitions_table=config.partitions_table,
            consumers_table=config.consumers_table,
        ),
        config.clients(),
    )
    # A warm-up batch first (cold start, clients): Kinesis sequence numbers increase.
    epoch_ms = 1_700_000_000_000
    warm_up = common.kinesis_event(PARTITION, incoming(1, shape.size, epoch_ms))
    handle(warm_up, LambdaContext("warm-up"))
    events = [
        common.kinesis_event(PARTITION, incoming(shape.batch, shape.size, epoch_ms))
        for _ in range(batches)
    ]
    meter.reset()
    gb_s = 0.0
    for event in events:
        with cpu_and_requests(meter) as spent:
            handle(event, LambdaContext("shardlog-ingest"))
        gb_s += M.lambda_gb_seconds(spent[0], int(spent[1]), INGEST_MEMORY_MB, aws_request_ms)
    return usage_of(
        meter, config, shape.batch * batches, lambda_invocations=batches, lambda_gb_seconds=gb_s
    )


class Delivered:
    def __init__(self) -> None:
        self.records = 0
        self.invocations = 0

    def processor(self, batch: list[LogRecord], checkpointer: Checkpointer) -> None:
        self.records += len(batch)
        checkpointer.checkpoint()

    def function(self, event: dict[str, Any], _context: Any) -> dict[str, Any]:
        self.records += len(event["Records"])
        self.invocations += 1
        return {"batchItemFailures": []}


def _steady_commits(shape: Shape) -> Iterator[int]:
    """Records to commit at each simulated second: whole batches, at the shape's rate."""
    owed = 0.0
    for _ in range(shape.seconds):
        owed += shape.batches_per_s
        whole = int(owed)
        owed -= whole
        yield whole


def worker(endpoint: str, shape: Shape, meter: Meter) -> M.Usage:
    config = fresh_log(endpoint, "worker")
    clock = ManualClock()
    writer = unmetered_writer(config, clock)
    seen = Delivered()
    consumer = Worker("cost-worker", seen.processor, config, clock=clock, threads=1)
    consumer.run_once()  # takes the lease
    meter.reset()
    step_ms = 1000
    for batches in _steady_commits(shape):
        for _ in range(batches):
            writer.append(PARTITION, incoming(shape.batch, shape.size, clock.now_ms()))
        for _ in range(5):  # bounded: deliver, then one empty poll
            if consumer.run_once().delivered == 0:
                break
        clock.advance(step_ms)
    consumer.close()
    if seen.records == 0:
        raise SystemExit("worker cost workload delivered nothing")
    return usage_of(meter, config, seen.records)


def lambda_consumer(endpoint: str, shape: Shape, meter: Meter, aws_request_ms: float) -> M.Usage:
    from shardlog.lambda_consumer.settings import LambdaConsumerSettings
    from shardlog.local.lambda_consumers import LocalGroup, LocalLambdaConsumers

    config = fresh_log(endpoint, "lambda")
    clock = ManualClock()
    writer = unmetered_writer(config, clock)
    seen = Delivered()
    group = LocalGroup(
        LambdaConsumerSettings(group="cost", function_name="bench:count"), seen.function, "b:c"
    )
    consumers = LocalLambdaConsumers(config.clients(), config, [group], clock=clock).start()
    assert consumers.stream is not None
    source = consumers.sources["cost"]
    consumers.sweep()
    meter.reset()
    runner_gb_s = waker_gb_s = 0.0
    runner_invocations = waker_invocations = receives = 0
    for batches in _steady_commits(shape):
        for _ in range(batches):
            writer.append(PARTITION, incoming(shape.batch, shape.size, clock.now_ms()))
        for _ in range(20):  # bounded: until the wake path is quiet
            before = consumers.stream.invocations
            with cpu_and_requests(meter) as spent:
                woken = consumers.stream.poll_once()
            if consumers.stream.invocations > before:
                waker_invocations += consumers.stream.invocations - before
                waker_gb_s += M.lambda_gb_seconds(spent[0], int(spent[1]), WAKER_MEMORY_MB,
                                                  aws_request_ms)  # fmt: skip
            with cpu_and_requests(meter) as spent:
                got = source.poll_once()
            if got:
                receives += 1
                runner_invocations += 1
                runner_gb_s += M.lambda_gb_seconds(spent[0], int(spent[1]), RUNNER_MEMORY_MB,
                                                   aws_request_ms)  # fmt: skip
            if not woken and not got:
                break
        clock.advance(1000)
    delivered = seen.records
    if delivered == 0:
        raise SystemExit("Lambda consumer cost workload delivered nothing")
    steady = usage_of(meter, config, delivered)
    # The sweep: one waker invocation a minute, pro rata over the simulated time.
    meter.reset()
    with cpu_and_requests(meter) as spent:
        consumers.sweep()
    sweep = usage_of(meter, config, delivered)
    share = shape.seconds / (C.LAMBDA_CONSUMER_SWEEP_RATE_MINUTES * 60)
    requests = Counter(steady.requests)
    for key, n in sweep.requests.items():
        requests[key] += round(n * share)
    sqs_billed = (
        sum(
            n
            for key, n in requests.items()
            if key.startswith("sqs.") and key != "sqs.ReceiveMessage"
        )
        + receives
    )  # only receives that got a message: Lambda's poller is not emulated
    sweep_gb_s = M.lambda_gb_seconds(spent[0], int(spent[1]), WAKER_MEMORY_MB, aws_request_ms)
    return replace(
        steady,
        requests=dict(requests),
        dynamodb_wru=steady.dynamodb_wru + share * sweep.dynamodb_wru,
        dynamodb_rru=steady.dynamodb_rru + share * sweep.dynamodb_rru,
        # runner + waker invocations, and the group's function's (its request price only:
        # its duration is the user's code)
        lambda_invocations=runner_invocations
        + waker_invocations
        + seen.invocations
        + math.ceil(share),
        lambda_gb_seconds=runner_gb_s + waker_gb_s + share * sweep_gb_s,
        sqs_requests=sqs_billed,
    )


def compaction(endpoint: str, shape: Shape, meter: Meter, segments: int) -> M.Usage:
    """The executors' work of a compaction run over ``segments`` ingest segments, in one
    process (list, GET + decode, Arrow, Parquet, PUT), scaled to an hourly run.

    Only what any compaction must do is measured: the run's own bookkeeping (the watermark
    and its commit, a few requests per run and partition, see docs/SPARK.md) is left out,
    as it does not grow with the records."""
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq

    from shardlog.segments import SegmentStore

    config = fresh_log(endpoint, "compact")
    writer = unmetered_writer(config)
    for _ in range(segments):
        writer.append(PARTITION, incoming(shape.batch, shape.size, 1_700_000_000_000))
    clients = config.clients()
    meter.reset()
    cpu = time.thread_time()
    store = SegmentStore(clients, config.bucket)
    rows: list[LogRecord] = []
    for first in store.starts(PARTITION):
        rows += store.fetch(PARTITION, first).records
    table = pa.table(
        {
            "partition_id": [r.partition_id for r in rows],
            "seq": [r.seq for r in rows],
            "partition_key": [r.partition_key for r in rows],
            "data": [r.data for r in rows],
            "arrival_ms": [r.arrival_ms for r in rows],
        }
    )
    body = io.BytesIO()
    pq.write_table(table, body, compression="zstd")
    clients.s3.put_object(Bucket=config.bucket, Key="bench-compacted/one.parquet",
                          Body=body.getvalue())  # fmt: skip
    cpu_s = time.thread_time() - cpu
    measured = usage_of(meter, config, len(rows))
    # An hourly run compacts rate x 3600 records: per-segment requests (a GET each, a LIST
    # page per 1,000 keys) scale with the segments; the PUT of the hour's file does not.
    per_run = shape.rate * COMPACTION_INTERVAL_S
    scale = per_run / len(rows)
    requests = {
        key: round(n * scale) if key in ("s3.GetObject", "s3.ListObjectsV2") else n
        for key, n in measured.requests.items()
    }
    vcpu_s = cpu_s * scale + EMR_RUN_MIN_VCPU_SECONDS
    return M.Usage(
        records=per_run,
        requests=requests,
        emr_vcpu_hours=vcpu_s / 3600,
        emr_gb_hours=vcpu_s * EMR_GB_PER_VCPU / 3600,
    )


def safya(endpoint: str, shape: Shape, meter: Meter, aws_request_ms: float,
          records: int) -> M.Usage:  # fmt: skip
    """Safya's write: per record one atomic increment, one PutObject, in one invocation."""
    config = fresh_log(endpoint, "safya")
    clients = config.clients()
    heads = PartitionsTable(clients, config.tables)
    payload = b"x" * shape.size
    meter.reset()
    gb_s = 0.0
    for _ in range(records):
        with cpu_and_requests(meter) as spent:
            seq = heads.increment_head("safya")
            clients.s3.put_object(Bucket=config.bucket, Key=f"safya/{seq:020d}", Body=payload)
        gb_s += M.lambda_gb_seconds(spent[0], int(spent[1]), SAFYA_MEMORY_MB, aws_request_ms)
    return usage_of(meter, config, records, lambda_invocations=records, lambda_gb_seconds=gb_s)


# --- the table -----------------------------------------------------------------------------------
@dataclass
class Row:
    rate: int
    size: int
    batch: int
    ingest: dict[str, float]
    worker: float
    lambda_consumer: float
    compaction: float
    kinesis_provisioned: float
    kinesis_on_demand: float
    firehose: float
    safya_share: float
    storage_month: float
    requests_per_1000: dict[str, float] = field(default_factory=dict)

    @property
    def ingest_share(self) -> float:
        return sum(self.ingest.values())

    @property
    def all_in(self) -> float:
        return self.ingest_share + self.kinesis_provisioned

    @property
    def safya_all_in(self) -> float:
        return self.safya_share + self.kinesis_provisioned

    def as_dict(self) -> dict[str, Any]:
        return {
            "ratePerShard": self.rate,
            "recordBytes": self.size,
            "recordsPerIngestBatch": self.batch,
            "ingest": {k: round(v, 6) for k, v in self.ingest.items()},
            "ingestShare": round(self.ingest_share, 6),
            "kinesisProvisioned": round(self.kinesis_provisioned, 6),
            "kinesisOnDemand": round(self.kinesis_on_demand, 6),
            "allIn": round(self.all_in, 6),
            "worker": round(self.worker, 6),
            "lambdaConsumer": round(self.lambda_consumer, 6),
            "compaction": round(self.compaction, 6),
            "firehose": round(self.firehose, 6),
            "safyaShare": round(self.safya_share, 6),
            "safyaAllIn": round(self.safya_share + self.kinesis_provisioned, 6),
            "storagePerMonth": round(self.storage_month, 6),
            "requestsPer1000Records": self.requests_per_1000,
        }


def per_1000(usage: M.Usage) -> float:
    billed = sum(n for k, n in usage.requests.items() if k.split(".")[0] in ("s3", "dynamodb"))
    return round(1000 * billed / usage.records, 2)


def measure(endpoint: str, shape: Shape, args: argparse.Namespace, meter: Meter,
            prices: PriceTable) -> Row:  # fmt: skip
    total = sum
    ms = args.aws_request_ms
    ingest_usage = ingest(endpoint, shape, meter, ms, batches=args.batches)
    worker_usage = worker(endpoint, shape, meter)
    lambda_usage = lambda_consumer(endpoint, shape, meter, ms)
    compaction_usage = compaction(endpoint, shape, meter, segments=args.segments)
    safya_usage = safya(endpoint, shape, meter, ms, records=args.safya_records)
    ingest_cost = M.cost_per_million(ingest_usage, prices)
    bytes_per_record = ingest_usage_bytes_per_record(endpoint, ingest_usage)
    return Row(
        rate=shape.rate,
        size=shape.size,
        batch=shape.batch,
        ingest={k: v for k, v in ingest_cost.items() if k in ("lambda", "dynamodb", "s3")},
        worker=total(M.cost_per_million(worker_usage, prices).values()),
        lambda_consumer=total(M.cost_per_million(lambda_usage, prices).values()),
        compaction=total(M.cost_per_million(compaction_usage, prices).values()),
        kinesis_provisioned=M.kinesis_provisioned_per_million(shape.rate, shape.size, prices),
        kinesis_on_demand=M.kinesis_on_demand_per_million(shape.rate, shape.size, prices),
        firehose=total(M.firehose_per_million(shape.rate, shape.size, prices).values()),
        safya_share=total(M.cost_per_million(safya_usage, prices).values()),
        storage_month=M.storage_per_million_month(bytes_per_record, prices),
        requests_per_1000={
            "ingest": per_1000(ingest_usage),
            "worker": per_1000(worker_usage),
            "lambdaConsumer": per_1000(lambda_usage),
            "compaction": per_1000(compaction_usage),
            "safya": per_1000(safya_usage),
        },
    )


def print_table(rows: Sequence[Row]) -> None:
    print(f"$ per million records, {REGION} list prices of {PRICES_AS_OF} (shardlog/pricing.py)")
    print(
        f"{'rec/s/shard':>11} {'size':>6} {'batch':>5} | {'ingest':>8} {'+Kinesis':>9} | "
        f"{'worker':>8} {'Lambda c.':>9} {'compact':>8} | {'Firehose':>8} {'Safya':>8} "
        f"{'Safya+K':>8} | {'K on-dem':>8}"
    )
    for r in rows:
        print(
            f"{r.rate:>11} {r.size // 1024:>4}Ki {r.batch:>5} | {r.ingest_share:>8.4f} "
            f"{r.all_in:>9.4f} | {r.worker:>8.4f} {r.lambda_consumer:>9.4f} {r.compaction:>8.4f} "
            f"| {r.firehose:>8.4f} {r.safya_share:>8.4f} {r.safya_all_in:>8.4f}"
            f" | {r.kinesis_on_demand:>8.4f}"
        )
    print(
        "ingest = shardlog's share (ingest Lambda + DynamoDB + S3); +Kinesis = all-in with a "
        "provisioned shard;\nworker excludes its host; Lambda c. includes the group function's "
        "invoke requests, not its duration;\ncompaction = one hourly EMR Serverless run per "
        "shard (its minimum shared by more shards in practice);\nK on-dem = Kinesis on-demand "
        "instead of provisioned, for reference."
    )
    print("AWS requests (DynamoDB + S3) per 1,000 records, measured:")
    for r in rows:
        parts = ", ".join(f"{k} {v}" for k, v in r.requests_per_1000.items())
        print(f"  {r.rate:>5}/s {r.size // 1024:>2} KiB: {parts}")


def chart(rows: Sequence[Row], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [f"{r.rate}/s\n{r.size // 1024} KiB" for r in rows]
    series = {
        "shardlog ingest, all-in": [r.all_in for r in rows],
        "+ worker": [r.all_in + r.worker for r in rows],
        "+ Lambda consumer": [r.all_in + r.lambda_consumer for r in rows],
        "Firehose to S3": [r.firehose for r in rows],
        "Safya design, all-in": [r.safya_share + r.kinesis_provisioned for r in rows],
    }
    fig, ax = plt.subplots(figsize=(10, 5))
    width = 0.8 / len(series)
    for i, (name, values) in enumerate(series.items()):
        ax.bar([x + i * width for x in range(len(rows))], values, width, label=name)
    ax.set_xticks([x + 0.4 - width / 2 for x in range(len(rows))], labels)
    ax.set_yscale("log")
    ax.set_ylabel("$ per million records (log)")
    ax.set_title(f"Cost per million records by rate per shard and record size ({PRICES_AS_OF})")
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer batches, shorter runs")
    parser.add_argument("--chart", type=Path, default=Path("build/bench/cost.png"))
    parser.add_argument("--json", type=Path, default=None, help="also write the rows here")
    parser.add_argument("--aws-request-ms", type=float, default=M.DEFAULT_AWS_REQUEST_MS)
    args = parser.parse_args(argv)
    args.batches = 3 if args.quick else 6
    args.segments = 3 if args.quick else 8
    args.safya_records = 50 if args.quick else 200
    seconds = 10 if args.quick else 30

    meter = Meter()
    undo = metered(meter)
    rows = []
    try:
        with EmbeddedAWS() as aws:
            for rate in RATES:
                for size in SIZES:
                    print(f"measuring {rate} records/s per shard, {size} B ...", file=sys.stderr,
                          flush=True)  # fmt: skip
                    rows.append(measure(aws.endpoint_url, Shape(rate, size, seconds), args, meter,
                                        US_EAST_1))  # fmt: skip
    finally:
        undo()
    print_table(rows)
    chart(rows, args.chart)
    print(f"chart: {args.chart}")
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps([r.as_dict() for r in rows], indent=2) + "\n")
    headline = next(r for r in rows if r.rate == 1000 and r.size == 1024)
    print(f"shardlog share at 1000 records/s per shard, 1 KiB records: "
          f"${headline.ingest_share:.4f} per million")  # fmt: skip
    print(f"all-in at 1000 records/s per shard, 1 KiB records: ${headline.all_in:.4f} per million")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
