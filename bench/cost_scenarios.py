"""The cost benchmark's workloads, each run on a fresh log of the embedded AWS and metered.

- ingest: the Lambda handler on batches of the size the 1 s batching window gathers at the
  shape's rate (capped by the batch size, 1,000, and Lambda's 6 MB payload);
- worker: a `shardlog consume` worker (default settings) following that log in simulated
  time (an injected clock), one ingest batch per window;
- Lambda consumer: the local Lambda consumer group (partitions stream -> waker -> SQS FIFO
  wake -> runner -> your function) following the same log, plus its one-minute sweep;
- compaction: a single-process floor of the executors' work (GET + decode + Parquet +
  PUT), scaled to an hourly run;
- Safya's design: one DynamoDB increment and one S3 PUT per record, one invoke per record.

Each returns a ``costmodel.Usage``: what was metered, with the Lambda GB-seconds from the
handler's CPU time (``costmodel.lambda_gb_seconds``).
"""

from __future__ import annotations

import math
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

from bench import costmodel as M
from bench.common import kinesis_event, named_log
from bench.cost_metering import Meter, cpu_and_requests, unmetered_clients, usage_of
from shardlog import constants as C
from shardlog.clock import ManualClock
from shardlog.config import ShardlogConfig
from shardlog.consumer import Checkpointer, Worker
from shardlog.dal.partitions import PartitionsTable
from shardlog.format import IncomingRecord, LogRecord
from shardlog.local.embedded import provision
from shardlog.local.kinesis_fidelity import SEQUENCE_BASE
from shardlog.shardsync import ShardSync
from shardlog.writer import LogWriter, WriterSettings

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
    config = named_log(f"cost-{tag}", endpoint)
    unmetered = unmetered_clients(config)
    provision(unmetered, config, shard_count=1)
    ShardSync(unmetered, config.stream_name, config.tables).sync()  # lineage: consumers start
    return config


def unmetered_writer(config: ShardlogConfig, clock: ManualClock | None = None) -> LogWriter:
    clients = unmetered_clients(config)
    return LogWriter(clients, WriterSettings(config.bucket, config.tables), clock=clock)


@dataclass
class Shape:
    rate: int  # records/s per shard
    size: int  # bytes per record
    seconds: int  # simulated steady state for the consumers
    records_per_batch: int | None = None  # None: what the default 1 s window gathers

    @property
    def batch(self) -> int:
        if self.records_per_batch is not None:
            return self.records_per_batch
        return M.lambda_batch_records(self.rate, self.size, C.INGEST_BATCH_SIZE, WINDOW_S)

    @property
    def batches_per_s(self) -> float:
        return self.rate / self.batch


# --- workloads -----------------------------------------------------------------------------------
def ingest_usage_bytes_per_record(endpoint: str, usage: M.Usage) -> float:
    """What the log stores per record (segments in S3), measured on the ingest bucket."""
    config = LAST_INGEST_CONFIG[0]
    s3 = unmetered_clients(config).s3
    listed = s3.list_objects_v2(Bucket=config.bucket).get("Contents", [])
    return sum(o["Size"] for o in listed) / max(usage.records + 1, 1)  # + the warm-up record


LAST_INGEST_CONFIG: list[ShardlogConfig] = []


def ingest(endpoint: str, shape: Shape, meter: Meter, aws_request_ms: float,
           batches: int) -> M.Usage:  # fmt: skip
    from lambdas.ingest.handler import create_handler
    from shardlog.function_settings import IngestSettings
    from shardlog.local.lambda_context import LambdaContext

    config = fresh_log(endpoint, "ingest")
    LAST_INGEST_CONFIG[:] = [config]
    handle = create_handler(
        IngestSettings(
            bucket=config.bucket,
            tables=config.tables,
        ),
        config.clients(),
    )
    # A warm-up batch first (cold start, clients): Kinesis sequence numbers increase.
    epoch_ms = 1_700_000_000_000
    warm_up = kinesis_event(PARTITION, incoming(1, shape.size, epoch_ms))
    handle(warm_up, LambdaContext("warm-up"))
    events = [
        kinesis_event(PARTITION, incoming(shape.batch, shape.size, epoch_ms))
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
