"""The write path under faults: crashes, concurrency, zombies, redelivery, corruption."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

from shardlog import constants as C
from shardlog.clock import ManualClock
from shardlog.exceptions import CorruptLogError, LeaseHeldError, LeaseLostError
from shardlog.format import encode_segment
from shardlog.reader import LogReader
from shardlog.segments import segment_key
from shardlog.tables import Tables
from shardlog.writer import LogWriter
from tests.support.aws import AwsEnv, make_env
from tests.support.factories import incoming_records, kinesis_seqs, writer_for
from tests.support.faults import StallBefore
from tests.support.readback import log_kinesis_seqs

NewWriter = Callable[..., LogWriter]

P = "shardId-000000000000"
LEASE_MS = C.DEFAULT_LEASE_DURATION_MS


def test_append_commits_dense_seqs_and_checkpoint(
    aws: AwsEnv, clock: ManualClock, new_writer: NewWriter
) -> None:
    writer = new_writer()
    first = writer.append(P, incoming_records(10, start=0))
    second = writer.append(P, incoming_records(5, start=10))
    assert (first.first_seq, first.next_seq, second.first_seq, second.next_seq) == (0, 10, 10, 15)
    assert log_kinesis_seqs(aws, P) == kinesis_seqs(incoming_records(15, start=0))
    lease = Tables(aws.clients, aws.config.tables).get_lease(C.INGEST_GROUP, P)
    assert (
        lease is not None
        and lease.checkpoint == incoming_records(1, start=14)[0].kinesis_sequence_number
    )
    assert lease.owner is None, "the ingest lease is released by the commit"


def test_crash_after_s3_write_is_adopted_by_the_retry(
    aws: AwsEnv, clock: ManualClock, new_writer: NewWriter
) -> None:
    batch = incoming_records(10, start=0)
    crashed = new_writer().prepare(P, batch, owner="crashed")  # S3 written, no commit
    assert crashed.written == 1
    assert log_kinesis_seqs(aws, P) == [], "an uncommitted segment is invisible"
    with pytest.raises(LeaseHeldError):
        new_writer().append(P, batch, owner="retry")  # the crashed lease is live
    clock.advance(LEASE_MS)
    result = new_writer().append(P, batch, owner="retry")
    assert (result.segments_adopted, result.segments_written, result.committed) == (1, 0, 10)
    assert log_kinesis_seqs(aws, P) == kinesis_seqs(batch)


def test_adoption_when_the_retry_batch_is_smaller_or_larger(
    aws: AwsEnv, clock: ManualClock, new_writer: NewWriter
) -> None:
    new_writer().prepare(P, incoming_records(10, start=0), owner="crashed")
    clock.advance(LEASE_MS)
    # Lambda bisected the failed batch: the retry holds only the first half.
    half = new_writer().append(P, incoming_records(5, start=0), owner="bisected")
    assert half.committed == 10, "the leftover holds exactly the next 10 records: adopt all"
    # Next delivery overlaps what was adopted: the overlap is dropped, the rest appended.
    rest = new_writer().append(P, incoming_records(15, start=5))
    assert (rest.redelivered, rest.committed) == (5, 10)
    assert log_kinesis_seqs(aws, P) == kinesis_seqs(incoming_records(20, start=0))


def test_larger_retry_adopts_then_writes_the_rest(
    aws: AwsEnv, clock: ManualClock, new_writer: NewWriter
) -> None:
    new_writer().prepare(P, incoming_records(4, start=0), owner="crashed")
    clock.advance(LEASE_MS)
    result = new_writer().append(P, incoming_records(9, start=0))
    assert (result.segments_adopted, result.segments_written, result.committed) == (1, 1, 9)
    assert log_kinesis_seqs(aws, P) == kinesis_seqs(incoming_records(9, start=0))


def test_redelivery_of_committed_records_is_dropped(
    aws: AwsEnv, clock: ManualClock, new_writer: NewWriter
) -> None:
    batch = incoming_records(8, start=0)
    new_writer().append(P, batch)
    aws.requests.reset()
    again = new_writer()
    aws.requests.attach(again.clients)
    result = again.append(P, batch)
    assert (result.redelivered, result.committed) == (8, 0)
    assert aws.requests.total == 3, "acquire, read head, release: nothing written"
    assert log_kinesis_seqs(aws, P) == kinesis_seqs(batch)


def test_zombie_with_expired_lease_is_fenced(
    aws: AwsEnv, clock: ManualClock, new_writer: NewWriter
) -> None:
    batch = incoming_records(6, start=0)
    zombie_writer = new_writer()
    zombie = zombie_writer.prepare(P, batch, owner="zombie")
    clock.advance(LEASE_MS)  # the zombie stalls past its lease
    successor = new_writer().append(P, incoming_records(12, start=0), owner="successor")
    assert successor.committed == 12
    with pytest.raises(LeaseLostError):
        zombie_writer.commit(zombie)
    assert log_kinesis_seqs(aws, P) == kinesis_seqs(incoming_records(12, start=0))
    assert Tables(aws.clients, aws.config.tables).get_partition(P).next_seq == 12  # type: ignore[union-attr]


def test_zombie_that_wakes_up_after_a_commit_cannot_write_over_it(
    aws: AwsEnv, clock: ManualClock, new_writer: NewWriter
) -> None:
    """A stalled invocation whose prepare runs after the successor's commit adopts
    the committed segment (same records) and is then fenced at commit."""
    first = new_writer()
    stale_lease_holder = first.leases.acquire(C.INGEST_GROUP, P, "stale")
    clock.advance(LEASE_MS)
    new_writer().append(P, incoming_records(5, start=0))
    with pytest.raises(LeaseLostError):
        first.leases.renew(stale_lease_holder)
    assert log_kinesis_seqs(aws, P) == kinesis_seqs(incoming_records(5, start=0))


def test_two_concurrent_invocations_commit_each_range_once(aws: AwsEnv) -> None:
    """Threads deliver overlapping batches of one shard at once, retrying on lease
    conflicts as Lambda would. Every record lands exactly once, in order."""
    records = incoming_records(60, start=0)
    batches = [records[i : i + 15] for i in range(0, 60, 10)]  # overlapping windows
    errors: list[BaseException] = []

    def deliver(batch: list) -> None:  # type: ignore[type-arg]
        writer = writer_for(aws, lease_duration_ms=60_000)
        for _ in range(500):
            try:
                writer.append(P, batch)
                return
            except (LeaseHeldError, LeaseLostError):
                continue
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)
                return
        errors.append(AssertionError("never got the lease"))

    for _ in range(2):
        threads = [threading.Thread(target=deliver, args=(b,)) for b in batches]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
    assert not errors
    committed = log_kinesis_seqs(aws, P)
    assert len(committed) == len(set(committed)), "no record twice"
    assert committed == sorted(committed, key=int), "Kinesis order kept"
    assert set(committed) <= set(kinesis_seqs(records))


def test_foreign_leftover_fails_loudly_and_is_not_overwritten(
    aws: AwsEnv, clock: ManualClock, new_writer: NewWriter
) -> None:
    foreign = encode_segment(P, 0, incoming_records(2, start=100), 1)
    aws.clients.s3.put_object(Bucket=aws.config.bucket, Key=segment_key(P, 0), Body=foreign)
    with pytest.raises(CorruptLogError, match="refusing to overwrite or skip"):
        new_writer().append(P, incoming_records(3, start=0))
    body = aws.clients.s3.get_object(Bucket=aws.config.bucket, Key=segment_key(P, 0))["Body"]
    assert body.read() == foreign
    assert Tables(aws.clients, aws.config.tables).get_partition(P) is None


@pytest.mark.parametrize("batch_size", [1, 500, 5000])
def test_request_budget_is_four_per_batch(aws: AwsEnv, batch_size: int) -> None:
    writer = writer_for(aws)
    aws.requests.attach(writer.clients)
    aws.requests.reset()
    writer.append(P, incoming_records(batch_size, start=0))
    assert aws.requests.total == 4, aws.requests.snapshot()


def test_request_budget_adds_one_per_extra_segment(aws: AwsEnv) -> None:
    writer = writer_for(aws, segment_max_records=100)
    aws.requests.attach(writer.clients)
    aws.requests.reset()
    result = writer.append(P, incoming_records(950, start=0))
    assert result.segments_written == 10
    assert aws.requests.total == 4 + 9, aws.requests.snapshot()


def test_segments_respect_the_byte_bound(aws: AwsEnv) -> None:
    writer = writer_for(aws, segment_max_bytes=1024)
    result = writer.append(P, incoming_records(100, start=0))
    reader = LogReader(aws.clients, aws.config.bucket, aws.config.tables)
    segments = list(reader.segments(P))
    assert len(segments) == result.segments_written > 1
    assert sum(len(s.records) for s in segments) == 100


def test_commit_marks_a_closed_partition_ended(
    aws: AwsEnv, clock: ManualClock, new_writer: NewWriter
) -> None:
    records = incoming_records(4, start=0)
    aws.clients.dynamodb.put_item(
        TableName=aws.config.partitions_table,
        Item={
            C.ATTR_PARTITION_ID: {"S": P},
            C.ATTR_NEXT_SEQUENCE_NUMBER: {"N": "0"},
            C.ATTR_STATE: {"S": C.STATE_CLOSED},
            C.ATTR_ENDING_KINESIS_SEQ: {"S": records[-1].kinesis_sequence_number},
        },
    )
    partial = new_writer().append(P, records[:2])
    assert not partial.ended
    final = new_writer().append(P, records)
    assert final.ended
    assert Tables(aws.clients, aws.config.tables).get_partition(P).state == C.STATE_ENDED  # type: ignore[union-attr]


def test_out_of_order_batch_is_rejected(aws: AwsEnv) -> None:
    records = incoming_records(3, start=0)
    with pytest.raises(ValueError, match="not in Kinesis order"):
        writer_for(aws).append(P, [records[1], records[0]])


def test_kinesis_sequence_numbers_compare_as_integers(
    aws: AwsEnv, clock: ManualClock, new_writer: NewWriter
) -> None:
    """'9' < '10' as integers but not as strings: the checkpoint must not drop '10'."""
    from shardlog.format import IncomingRecord

    small = [IncomingRecord("k", b"a", "9", 1)]
    large = [IncomingRecord("k", b"b", "10", 2)]
    new_writer().append(P, small)
    result = new_writer().append(P, large)
    assert result.committed == 1
    assert log_kinesis_seqs(aws, P) == ["9", "10"]


def test_reader_refuses_a_gap_below_the_head(aws: AwsEnv) -> None:
    writer = writer_for(aws, segment_max_records=2)
    writer.append(P, incoming_records(6, start=0))
    aws.clients.s3.delete_object(Bucket=aws.config.bucket, Key=segment_key(P, 2))
    reader = LogReader(aws.clients, aws.config.bucket, aws.config.tables)
    with pytest.raises(CorruptLogError, match="missing"):
        list(reader.records(P))


def test_reader_hides_objects_at_or_past_the_head(
    aws: AwsEnv, clock: ManualClock, new_writer: NewWriter
) -> None:
    new_writer().append(P, incoming_records(3, start=0))
    new_writer().prepare(P, incoming_records(3, start=3), owner="crashed")
    assert log_kinesis_seqs(aws, P) == kinesis_seqs(incoming_records(3, start=0))


@pytest.fixture(scope="module")
def long_log(endpoint_url: str) -> AwsEnv:
    """Two partitions of 3,000 records: 10 segments of 300, and one segment of 3,000."""
    env = make_env(endpoint_url)
    writer_for(env, segment_max_records=300).append("many", incoming_records(3000, start=0))
    writer_for(env, segment_max_records=3000).append("one", incoming_records(3000, start=0))
    return env


@pytest.mark.parametrize("partition", ["many", "one"])
@pytest.mark.parametrize("from_seq", [0, 1, 299, 300, 301, 2047, 2048, 2999, 3000])
def test_reader_starts_inside_a_segment(long_log: AwsEnv, partition: str, from_seq: int) -> None:
    """The segment holding from_seq is found by looking back (doubling windows)."""
    reader = LogReader(long_log.clients, long_log.config.bucket, long_log.config.tables)
    got = [r.seq for r in reader.records(partition, from_seq, from_seq + 6)]
    assert got == list(range(from_seq, min(from_seq + 6, 3000)))


def test_a_writer_stalled_between_its_lease_and_its_head_read_does_not_wedge_the_shard(
    aws: AwsEnv, clock: ManualClock, new_writer: NewWriter
) -> None:
    """Regression: a writer that stalls after taking the lease (which returned the
    checkpoint) and before reading the head, while its lease expires and a successor
    commits, must not pair the old checkpoint with the new head: that wrote a segment of
    already-committed records at the head and wedged the shard (every later writer got
    a 412 and CorruptLogError)."""
    batch = incoming_records(10, start=0)
    stalled = new_writer()

    def successor_commits() -> None:
        clock.advance(LEASE_MS + 1)
        new_writer().append(P, batch, owner="successor")

    stall = StallBefore(stalled.clients, "dynamodb", 2, successor_commits)
    with pytest.raises(LeaseLostError):
        stalled.append(P, batch, owner="stalled")
    assert stall.fired and stall.calls[0] == "UpdateItem"  # the stall followed the acquire

    redelivered = incoming_records(15, start=0)  # Kinesis resends from the checkpoint
    result = new_writer().append(P, redelivered, owner="next")
    assert (result.first_seq, result.next_seq, result.redelivered) == (10, 15, 10)
    assert log_kinesis_seqs(aws, P) == kinesis_seqs(redelivered)
