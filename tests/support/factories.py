"""The one place tests build records, writers, partitions and consumer workers."""

from __future__ import annotations

import itertools
import threading
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from lambdas.ingest.handler import create_handler
from shardlog import constants as C
from shardlog.aws import RequestCounter
from shardlog.clock import Clock, ManualClock
from shardlog.consumer import Checkpointer, ConsumerSettings, Worker
from shardlog.format import IncomingRecord, LogRecord
from shardlog.function_settings import IngestSettings
from shardlog.local.kinesis_fidelity import SEQUENCE_BASE
from shardlog.local.poller import EventSourcePoller, EventSourceSettings
from shardlog.tables import Lease, Tables, partition_key
from shardlog.writer import LogWriter, WriterSettings
from tests.support.aws import AwsEnv

BASE_ARRIVAL_MS = 1_700_000_000_000
DEFAULT_KEYS = ("k0", "k1", "k2", "k3", "k4")
# Numbering for calls without ``start``: far above any explicit start, and never reused.
_NEXT_INDEX = itertools.count(10**9)
_NEXT_INDEX_LOCK = threading.Lock()


def incoming_records(
    count: int,
    *,
    start: int | None = None,
    keys: Sequence[str] = DEFAULT_KEYS,
    arrival_ms: int = BASE_ARRIVAL_MS,
) -> list[IncomingRecord]:
    """Kinesis-like records: 56-digit, increasing sequence numbers (gaps of 7, as on AWS).

    Record ``i`` of the call has key ``keys[(start + i) % len(keys)]``, data
    ``b"<key>:<start + i>"`` and arrival ``arrival_ms + i``. With ``start`` the sequence
    numbers are a pure function of the index (``start=10`` continues ``start=0, count=10``);
    without it, numbering continues from the previous such call (process-wide), so
    successive calls for one partition stay in Kinesis order. ``start`` defaults to 0 for
    keys and data.
    """
    if start is None:
        with _NEXT_INDEX_LOCK:
            first = next(_NEXT_INDEX)
            for _ in range(count - 1):
                next(_NEXT_INDEX)
        label = 0
    else:
        first = label = start
    out = []
    for offset in range(count):
        key = keys[(label + offset) % len(keys)]
        out.append(
            IncomingRecord(
                partition_key=key,
                data=f"{key}:{label + offset}".encode(),
                kinesis_sequence_number=str(SEQUENCE_BASE + 7 * (first + offset)),
                arrival_ms=arrival_ms + offset,
            )
        )
    return out


def kinesis_seqs(records: Sequence[IncomingRecord | LogRecord]) -> list[str]:
    return [r.kinesis_sequence_number for r in records]


def writer_for(aws: AwsEnv, clock: Clock | None = None, **settings: Any) -> LogWriter:
    """A writer with its own clients (another 'process'), on the test's resources (its
    stream too: the look-up of resent records lists its shards for unrecorded lineage)."""
    settings.setdefault("stream", aws.config.stream_name)
    return LogWriter(
        aws.fresh_clients(),
        WriterSettings(bucket=aws.config.bucket, tables=aws.config.tables, **settings),
        clock=clock,
    )


class ModelWriters:
    """The writers of a model-based test, on its clients (where its fault hooks sit) and
    clock: container 0 is a fresh writer every time (a cold Lambda container); container
    ``c`` > 0 is a warm one that keeps its writer between batches, cutting segments of
    ``c + 1`` records."""

    def __init__(self, aws: AwsEnv, clock: Clock, lease_duration_ms: int, **settings: Any):
        self.aws, self.clock = aws, clock
        self.settings = {"lease_duration_ms": lease_duration_ms, **settings}
        self.warm: dict[int, LogWriter] = {}

    def writer(self, container: int = 0, segment_max_records: int = 3) -> LogWriter:
        if container == 0:
            return self.new(segment_max_records)
        if container not in self.warm:
            self.warm[container] = self.new(container + 1)
        return self.warm[container]

    def new(self, segment_max_records: int) -> LogWriter:
        return LogWriter(
            self.aws.clients,
            WriterSettings(
                bucket=self.aws.config.bucket,
                tables=self.aws.config.tables,
                segment_max_records=segment_max_records,
                **self.settings,
            ),
            clock=self.clock,
        )


# --- partitions --------------------------------------------------------------------------
def register_partition(
    aws: AwsEnv, partition_id: str, parents: tuple[str, ...] | None = None
) -> None:
    """What shard sync writes for a shard it lists (docs/TABLES.md 1.1). ``parents=None``
    records a root partition unless lineage was recorded already."""
    keep = parents is None
    lineage = "if_not_exists(#parents, :parents)" if keep else ":parents"
    aws.clients.dynamodb.update_item(
        TableName=aws.config.partitions_table,
        Key=partition_key(partition_id),
        UpdateExpression=(
            f"SET #parents = {lineage}, #hstart = if_not_exists(#hstart, :hstart), "
            "#hend = if_not_exists(#hend, :hend), #next = if_not_exists(#next, :zero), "
            "#state = if_not_exists(#state, :open), #live = :live"
        ),
        ExpressionAttributeNames={
            "#live": C.ATTR_LIVE,
            "#parents": C.ATTR_PARENT_PARTITION_IDS,
            "#hstart": C.ATTR_STARTING_HASH_KEY,
            "#hend": C.ATTR_ENDING_HASH_KEY,
            "#next": C.ATTR_NEXT_SEQUENCE_NUMBER,
            "#state": C.ATTR_STATE,
        },
        ExpressionAttributeValues={
            ":parents": {"L": [{"S": p} for p in parents or ()]},
            ":hstart": {"S": "0"},
            ":hend": {"S": str(C.MAX_HASH_KEY)},
            ":zero": {"N": "0"},
            ":open": {"S": C.STATE_OPEN},
            ":live": {"S": C.LIVE_VALUE},
        },
    )


def end_partition(aws: AwsEnv, partition_id: str) -> None:
    """The shard is closed and fully ingested: its head will not move again."""
    aws.clients.dynamodb.update_item(
        TableName=aws.config.partitions_table,
        Key=partition_key(partition_id),
        UpdateExpression="SET #state = :ended",
        ExpressionAttributeNames={"#state": C.ATTR_STATE},
        ExpressionAttributeValues={":ended": {"S": C.STATE_ENDED}},
    )


def append(
    aws: AwsEnv,
    partition_id: str,
    records: list[IncomingRecord],
    segment_max_records: int = 3,
    clock: Clock | None = None,
) -> None:
    """Commit records to a partition's log (recording its lineage first, if shard sync has not)."""
    register_partition(aws, partition_id)
    LogWriter(
        aws.clients,
        WriterSettings(
            bucket=aws.config.bucket,
            tables=aws.config.tables,
            segment_max_records=segment_max_records,
        ),
        clock=clock,
    ).append(partition_id, records)


def ingest_with_handler(aws: AwsEnv, clock: ManualClock, polls: int = 30) -> RequestCounter:
    """The ingest handler on the stream's records through the local event source (parents
    read to their end first, no batching window), ``polls`` rounds, every invocation a
    success; the requests the handler made (the event source's own are not counted)."""
    settings = IngestSettings(
        bucket=aws.config.bucket,
        tables=aws.config.tables,
    )
    handler_clients = aws.fresh_clients()
    requests = RequestCounter().attach(handler_clients)
    poller = EventSourcePoller(
        aws.fresh_clients(),
        aws.config.stream_name,
        create_handler(settings, handler_clients, clock),
        settings=EventSourceSettings(batching_window_ms=0),
        clock=clock,
    )
    for _ in range(polls):
        poller.poll_once()
    assert poller.is_idle(), "records left undelivered"
    assert poller.stats.failures == 0, "an ingest invocation failed"
    return requests


# --- consumer workers --------------------------------------------------------------------
FAST = ConsumerSettings(
    lease_duration_ms=10_000,
    renew_interval_ms=3_000,
    take_interval_ms=1,
    idle_poll_interval_ms=0,
    records_per_call=4,
)


@dataclass
class Delivery:
    worker: str
    partition_id: str
    seq: int
    key: str
    data: bytes


@dataclass
class Journal:
    """Every record delivered to any worker's processor, in delivery order."""

    deliveries: list[Delivery] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, worker: str, records: list[LogRecord]) -> None:
        with self.lock:
            self.deliveries += [
                Delivery(worker, r.partition_id, r.seq, r.partition_key, r.data) for r in records
            ]

    def seqs(self, partition_id: str) -> list[int]:
        with self.lock:
            return [d.seq for d in self.deliveries if d.partition_id == partition_id]

    def by_partition(self) -> dict[str, set[int]]:
        seen: dict[str, set[int]] = defaultdict(set)
        with self.lock:
            for d in self.deliveries:
                seen[d.partition_id].add(d.seq)
        return seen


def recording_worker(
    aws: AwsEnv,
    journal: Journal,
    name: str,
    clock: Clock,
    group: str = "readers",
    settings: ConsumerSettings = FAST,
    checkpoint: bool = True,
) -> Worker:
    def handle(records: list[LogRecord], checkpointer: Checkpointer) -> None:
        journal.add(name, records)
        if checkpoint:
            checkpointer.checkpoint()

    return Worker(
        group,
        handle,
        aws.config,
        clients=aws.clients,
        settings=settings,
        clock=clock,
        worker_id=name,
        threads=4,
    )


def leases(aws: AwsEnv, group: str = "readers") -> dict[str, Lease]:
    """A group's lease items by partition, read now (as another process would)."""
    tables = Tables(aws.clients, aws.config.tables)
    return {lease.partition_id: lease for lease in tables.list_leases(group)}


def checkpoints(aws: AwsEnv, group: str = "readers") -> dict[str, str | None]:
    return {partition_id: lease.checkpoint for partition_id, lease in leases(aws, group).items()}


def owners(aws: AwsEnv, group: str = "readers") -> dict[str, str | None]:
    return {partition_id: lease.owner for partition_id, lease in leases(aws, group).items()}


def fill(aws: AwsEnv, partitions: int, records: int = 10, prefix: str = "p") -> list[str]:
    """Partitions ``<prefix>0`` .. (``partitions`` of them), ``records`` records each."""
    ids = [f"{prefix}{i}" for i in range(partitions)]
    for partition_id in ids:
        append(aws, partition_id, incoming_records(records))
    return ids


def run_until_idle(workers: list[Worker], clock: ManualClock, max_cycles: int = 300) -> int:
    """Cycle every worker (1 ms apart) until three rounds in a row deliver nothing and change
    no assignment; returns the records delivered."""
    total, quiet, last = 0, 0, None
    for _ in range(max_cycles):
        delivered = sum(worker.run_once().delivered for worker in workers)
        held = [worker.held for worker in workers]
        quiet = quiet + 1 if delivered == 0 and held == last else 0
        last = held
        total += delivered
        if quiet >= 3:
            return total
        clock.advance(1)
    raise AssertionError(f"still busy after {max_cycles} cycles")
