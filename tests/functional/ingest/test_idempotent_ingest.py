"""Idempotent produce, the ingest side: a record sent again after an unknown outcome is
committed once; the log keeps the payload and the record id, never the envelope."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace

import pytest

from shardlog.aws import RequestCounter
from shardlog.clock import ManualClock
from shardlog.dal.partitions import close
from shardlog.dedupe import LookupLimits
from shardlog.exceptions import ConfigurationError, CorruptLogError
from shardlog.format import IncomingRecord
from shardlog.idempotence import wrap
from shardlog.local.kinesis_fidelity import SEQUENCE_BASE
from shardlog.producer import Producer
from shardlog.reader import LogReader
from shardlog.records import ProducerRecord
from shardlog.segments import segment_key
from shardlog.tables import Tables
from shardlog.writer import LogWriter
from tests.support.aws import AwsEnv, make_env
from tests.support.factories import ingest_with_handler, register_partition, writer_for
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
def one_shard(endpoint_url: str) -> AwsEnv:
    return make_env(endpoint_url, shard_count=1)


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
    ingest_with_handler(aws, clock)
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


def test_a_resend_is_measured_from_the_latest_copy_that_reached_the_log(
    new_writer: NewWriter, aws: AwsEnv
) -> None:
    """An id can reach the log twice (an unflagged copy, or a resend past the window): a
    later resend's window counts from the latest copy, whichever copy the look-up meets
    last (it reads newest first)."""
    new_writer().append(P, [record(0, "a", arrival_ms=0), record(1, "x", arrival_ms=0)])
    new_writer().append(P, [record(2, "a", arrival_ms=200_000)])  # unflagged: kept
    resends = [
        record(3, "x", resent=True, arrival_ms=500_000),  # x at 0: inside its window
        record(4, "a", resent=True, arrival_ms=700_000),  # a at 200,000: inside its window
    ]
    result = new_writer().append(P, resends)
    assert (result.committed, result.deduplicated) == (0, 2)
    assert [i for i, _ in log_of(aws)] == ["a", "x", "a"]


def test_a_resend_in_the_batch_of_its_original_is_judged_by_the_same_window(
    new_writer: NewWriter, aws: AwsEnv
) -> None:
    """How Lambda cut the batches does not decide: past the window a resend is kept, inside
    it dropped, whether its original came in an earlier batch or earlier in the same one
    (a backlog puts records far apart in arrival into one batch)."""
    batch = [
        record(0, "a", arrival_ms=0),
        record(1, "b", arrival_ms=1_000),
        record(2, "a", resent=True, arrival_ms=WINDOW_MS + 1),  # 1 ms past: kept
        record(3, "b", resent=True, arrival_ms=WINDOW_MS + 1_000),  # at the edge: dropped
    ]
    result = new_writer().append(P, batch)
    assert (result.committed, result.deduplicated) == (3, 1)
    assert [i for i, _ in log_of(aws)] == ["a", "b", "a"]


@pytest.mark.parametrize("last_batch", ["a dropped copy", "a redelivery"])
def test_a_closed_shard_whose_last_batch_holds_nothing_new_is_ended_by_it(
    new_writer: NewWriter, aws: AwsEnv, last_batch: str
) -> None:
    """The batch that reaches a CLOSED shard's end ends the partition, even when it commits
    nothing: its children need not wait for shard sync. A dropped copy as the shard's last
    record; or a commit that reached the end while the partition read OPEN, shard sync
    closing it just after (its look at the checkpoint came first), then Lambda's retry of
    that batch (the commit's answer was lost)."""
    register_partition(aws, P)
    original, copy = record(0, "a"), record(1, "a", resent=True)
    new_writer().append(P, [original])
    if last_batch == "a dropped copy":
        close(aws.clients, aws.config.partitions_table, P, copy.kinesis_sequence_number)
        result = new_writer().append(P, [copy])
        assert result.deduplicated == 1
    else:
        close(aws.clients, aws.config.partitions_table, P, original.kinesis_sequence_number)
        result = new_writer().append(P, [original])
        assert result.redelivered == 1
    tables = Tables(aws.clients, aws.config.tables)
    partition, lease = tables.get_partition(P), tables.get_lease("$ingest", P)
    assert result.ended and partition is not None and partition.state == "ENDED"
    assert partition.next_seq == 1 and lease is not None and lease.owner is None
    assert lease.checkpoint == result.checkpoint


def test_the_look_up_lists_once_and_stops_at_the_windows_start(
    new_writer: NewWriter, aws: AwsEnv
) -> None:
    """200 segments older than the window, 20 inside it: the look-up lists the tail in one
    request and fetches the 20, the one that crosses the window's start, and at most as many
    again in flight (one GET at first, one more per segment read). It used to send a LIST
    and a GET per segment, one after the other."""
    register_partition(aws, P)
    writer = new_writer(segment_max_records=1)
    writer.append(P, [record(i, f"old-{i}", arrival_ms=0) for i in range(200)])
    recent = [record(200 + i, f"new-{i}", arrival_ms=2 * WINDOW_MS) for i in range(20)]
    writer.append(P, recent)
    writer = new_writer(segment_max_records=1)
    aws.requests.attach(writer.clients)
    aws.requests.reset()
    result = writer.append(P, [record(300, "new-0", resent=True, arrival_ms=2 * WINDOW_MS + 5)])
    assert result.deduplicated == 1
    counted = aws.requests.snapshot()
    assert counted["s3.ListObjectsV2"] == 1, counted
    assert 21 <= counted["s3.GetObject"] <= 2 * 21, counted


@pytest.mark.parametrize(
    ("limits", "gets"),
    [
        (LookupLimits(max_segments=5), 5),
        (LookupLimits(max_bytes=1), 0),  # not even one segment fits
        (LookupLimits(max_lists=1, parallel=2), 20),  # the one page holds all 20
    ],
    ids=["segments", "bytes", "lists"],
)
def test_the_look_up_stops_at_its_limits_and_keeps_what_it_did_not_find(
    new_writer: NewWriter, aws: AwsEnv, limits: LookupLimits, gets: int
) -> None:
    """20 segments inside the window. Within the limits, a resend of the newest record is
    found and dropped; one the limits kept the look-up from is kept and counted unchecked.
    Never more GETs than the limits allow, whatever is in flight."""
    register_partition(aws, P)
    new_writer(segment_max_records=1).append(P, [record(i, f"id-{i}") for i in range(20)])
    writer = new_writer(segment_max_records=1, dedupe_limits=limits)
    aws.requests.attach(writer.clients)
    aws.requests.reset()
    resends = [record(30, "id-19", resent=True), record(31, "id-0", resent=True)]
    result = writer.append(P, resends)
    assert aws.requests.by_operation["s3.GetObject"] == gets
    if gets == 20:  # the whole window was read after all
        assert (result.deduplicated, result.resent_unchecked) == (2, 0)
    else:
        found = 1 if gets else 0
        assert (result.deduplicated, result.resent_unchecked) == (found, 2 - found)


def test_a_missing_segment_below_the_head_fails_the_look_up_loudly(
    new_writer: NewWriter, aws: AwsEnv
) -> None:
    register_partition(aws, P)
    new_writer(segment_max_records=1).append(P, [record(i, f"id-{i}") for i in range(5)])
    aws.clients.s3.delete_object(Bucket=aws.config.bucket, Key=segment_key(P, 2))
    with pytest.raises(CorruptLogError, match="a committed segment is missing"):
        new_writer().append(P, [record(9, "id-0", resent=True)])


def test_lineage_is_listed_only_for_a_resend_and_once_per_writer(
    new_writer: NewWriter, one_shard: AwsEnv
) -> None:
    """A split child shard sync has not seen: a batch without a resent record keeps the
    budget of 4 requests; the first batch with one lists the stream's shards once (1
    ListShards) and finds the parent; the same writer's next one lists nothing."""
    aws = one_shard
    parent = "shardId-000000000000"
    writer_for(aws).append(parent, [record(0, "a")])
    aws.clients.kinesis.split_shard(
        StreamName=aws.config.stream_name, ShardToSplit=parent, NewStartingHashKey=str(2**127)
    )
    child = "shardId-000000000001"
    writer = writer_for(aws)
    requests = RequestCounter().attach(writer.clients)
    writer.append(child, [record(10, "b")])
    assert requests.total == 4
    requests.reset()
    assert writer.append(child, [record(11, "a", resent=True)]).deduplicated == 1
    assert requests.by_operation["kinesis.ListShards"] == 1
    requests.reset()
    assert writer.append(child, [record(12, "a", resent=True)]).deduplicated == 1
    assert requests.by_operation["kinesis.ListShards"] == 0


def test_without_a_stream_a_resend_on_unrecorded_lineage_is_refused(
    new_writer: NewWriter, aws: AwsEnv
) -> None:
    """Nothing to list the shards of: the batch fails (and is retried) rather than commit a
    copy the parents may hold; nothing is committed."""
    writer = new_writer(stream=None)
    writer.append(P, [record(0, "a")])  # no resent record: no lineage needed
    with pytest.raises(ConfigurationError, match="no lineage recorded yet"):
        writer.append(P, [record(1, "a", resent=True)])
    assert [i for i, _ in log_of(aws)] == ["a"]


def test_a_stable_id_resent_after_a_restart_is_dropped_when_flagged(
    aws: AwsEnv, clock: ManualClock
) -> None:
    """A restarted producer does not know what its predecessor's last put did: sending the
    record again with its stable id flagged resent is safe; unflagged it is a new record."""
    first = Producer(aws.config.stream_name, aws.clients, clock=clock)
    first.put_records([ProducerRecord("k", b"order-1", record_id="order-1")])
    restarted = Producer(aws.config.stream_name, aws.clients, clock=clock)
    restarted.put_records(
        [
            ProducerRecord("k", b"order-1", record_id="order-1", resent=True),  # dropped
            ProducerRecord("k", b"order-2", record_id="order-2"),
            ProducerRecord("k", b"order-2", record_id="order-2"),  # unflagged: kept
        ]
    )
    ingest_with_handler(aws, clock)
    logged = [
        data
        for partition in Tables(aws.clients, aws.config.tables).list_partitions()
        for _, data in log_of(aws, partition.partition_id)
    ]
    assert logged == [b"order-1", b"order-2", b"order-2"]
