"""Idempotent produce, the ingest side: a record sent again after an unknown outcome is
committed once; the log keeps the payload and the record id, never the envelope."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace

import pytest

from lambdas.ingest.handler import create_handler
from lambdas.ingest.settings import IngestSettings
from shardlog.aws import Clients
from shardlog.clock import ManualClock
from shardlog.format import IncomingRecord
from shardlog.idempotence import wrap
from shardlog.local.kinesis_fidelity import SEQUENCE_BASE
from shardlog.local.poller import EventSourcePoller, EventSourceSettings
from shardlog.producer import Producer
from shardlog.reader import LogReader
from shardlog.tables import Tables
from shardlog.writer import LogWriter
from tests.support.aws import AwsEnv
from tests.support.factories import register_partition
from tests.support.proxy import LossyProxy

P = "shardId-000000000000"
WINDOW_MS = 600_000
NewWriter = Callable[..., LogWriter]


def record(
    n: int, record_id: str | None, *, resent: bool = False, arrival_ms: int = 0
) -> IncomingRecord:
    """Kinesis record n (its own sequence number), optionally with an id, as ingest sees it."""
    return IncomingRecord(
        "k", f"payload-{record_id or n}".encode(), str(SEQUENCE_BASE + 7 * n),
        1_700_000_000_000 + arrival_ms, record_id, resent,
    )  # fmt: skip


def log_of(aws: AwsEnv, partition_id: str = P) -> list[tuple[str | None, bytes]]:
    reader = LogReader(aws.clients, aws.config.bucket, aws.config.tables)
    return [(r.record_id, r.data) for r in reader.records(partition_id)]


def test_a_resent_copy_in_the_same_batch_is_dropped(new_writer: NewWriter, aws: AwsEnv) -> None:
    result = new_writer().append(
        P, [record(0, "a"), record(1, "b"), record(2, "a", resent=True), record(3, None)]
    )
    assert (result.committed, result.deduplicated) == (3, 1)
    assert log_of(aws) == [("a", b"payload-a"), ("b", b"payload-b"), (None, b"payload-3")]


def test_a_resent_copy_in_a_later_batch_is_dropped_and_the_checkpoint_passes_it(
    new_writer: NewWriter, aws: AwsEnv
) -> None:
    new_writer().append(P, [record(0, "a"), record(1, "b")])
    result = new_writer().append(P, [record(2, "a", resent=True, arrival_ms=5_000)])
    assert (result.committed, result.deduplicated) == (0, 1)
    assert result.checkpoint == record(2, None).kinesis_sequence_number  # passed, not re-read
    lease = Tables(aws.clients, aws.config.tables).get_lease("$ingest", P)
    assert lease is not None and lease.checkpoint == result.checkpoint and lease.owner is None
    assert [i for i, _ in log_of(aws)] == ["a", "b"]


def test_only_resent_records_are_looked_up(new_writer: NewWriter, aws: AwsEnv) -> None:
    new_writer().append(P, [record(0, "a")])
    # The same id sent again *without* the flag: a new record as far as ingest knows.
    new_writer().append(P, [record(1, "a")])
    assert [i for i, _ in log_of(aws)] == ["a", "a"]


def test_a_resend_past_the_window_is_committed_again(new_writer: NewWriter, aws: AwsEnv) -> None:
    new_writer().append(P, [record(0, "a", arrival_ms=0)])
    edge = record(1, "a", resent=True, arrival_ms=WINDOW_MS)
    late = record(2, "a", resent=True, arrival_ms=WINDOW_MS + 1)
    assert new_writer().append(P, [edge]).deduplicated == 1  # exactly at the window: dropped
    assert new_writer().append(P, [late]).deduplicated == 0  # one ms past it: committed
    assert [i for i, _ in log_of(aws)] == ["a", "a"]


def test_the_look_up_reads_back_through_many_segments_and_into_the_parent(
    new_writer: NewWriter, aws: AwsEnv
) -> None:
    register_partition(aws, "parent", ())
    register_partition(aws, "child", ("parent",))
    new_writer(segment_max_records=2).append("parent", [record(i, f"id-{i}") for i in range(9)])
    copies = [record(20 + i, f"id-{i}", resent=True, arrival_ms=1_000) for i in (0, 5, 8)]
    result = new_writer(segment_max_records=2).append("child", [*copies, record(30, "new")])
    assert (result.committed, result.deduplicated) == (1, 3)
    assert log_of(aws, "child") == [("new", b"payload-new")]


def test_a_batch_without_resent_records_keeps_the_request_budget(
    new_writer: NewWriter, aws: AwsEnv
) -> None:
    writer = new_writer()
    aws.requests.attach(writer.clients)
    aws.requests.reset()
    writer.append(P, [record(i, f"id-{i}") for i in range(50)])
    assert aws.requests.total == 4


@pytest.fixture
def proxy(aws: AwsEnv) -> Iterator[LossyProxy]:
    assert aws.config.endpoint_url is not None
    with LossyProxy(aws.config.endpoint_url) as running:
        yield running


def test_an_idempotent_produce_whose_answer_was_lost_is_committed_once(
    aws: AwsEnv, proxy: LossyProxy, clock: ManualClock
) -> None:
    """End to end: the producer's answer is lost, it sends the record again (same id,
    flagged resent); Kinesis holds both copies; the ingest handler commits one."""
    through_proxy = replace(aws.config, endpoint_url=proxy.url).clients()
    producer = Producer(aws.config.stream_name, through_proxy, idempotent=True, clock=clock)
    proxy.lose_answers(1)
    producer.put_records([("k", b"p0"), ("k", b"p1")])
    settings = IngestSettings(
        bucket=aws.config.bucket,
        partitions_table=aws.config.partitions_table,
        consumers_table=aws.config.consumers_table,
    )
    clients: Clients = aws.fresh_clients()
    poller = EventSourcePoller(
        clients,
        aws.config.stream_name,
        create_handler(settings, clients, clock),
        settings=EventSourceSettings(batching_window_ms=0),
        clock=clock,
    )
    for _ in range(20):
        poller.poll_once()
    committed = [
        (record_id is not None, data)
        for partition in Tables(aws.clients, aws.config.tables).list_partitions()
        for record_id, data in log_of(aws, partition.partition_id)
    ]
    assert committed == [(True, b"p0"), (True, b"p1")]  # once each, the envelope gone


def test_the_envelope_is_opened_when_a_kinesis_record_comes_in() -> None:
    incoming = IncomingRecord.from_kinesis("k", wrap("id-1", b"payload", resent=True), "42", 7)
    assert (incoming.data, incoming.record_id, incoming.resent) == (b"payload", "id-1", True)
    plain = IncomingRecord.from_kinesis("k", b"payload", "42", 7)
    assert (plain.data, plain.record_id, plain.resent) == (b"payload", None, False)
