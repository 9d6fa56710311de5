"""The segment store against the embedded S3: conditional create, fetch checks, listing,
the look-back for a segment's start, density and the head as the only truth.

The listings need more than S3's page of 1,000 keys: those objects are put straight into the
embedded S3's store of this process (``seed``: 1,200 PUT requests cost about 7 s of CPU a
test); the store under test reads them back over HTTP as always."""

from __future__ import annotations

import pytest
from moto.core import DEFAULT_ACCOUNT_ID
from moto.s3.models import s3_backends

from shardlog.exceptions import CorruptLogError
from shardlog.format import encode_segment
from shardlog.segments import SegmentStore, segment_key
from tests.support.aws import AwsEnv
from tests.support.factories import incoming_records

P = "shardId-000000000000"


def segment(seq: int, size: int, partition_id: str = P) -> bytes:
    return encode_segment(partition_id, seq, incoming_records(size, start=seq), 0)


def put_segments(store: SegmentStore, sizes: list[int], partition_id: str = P) -> list[int]:
    """Consecutive segments of these sizes from seq 0; their first seqs."""
    starts, seq = [], 0
    for size in sizes:
        body = segment(seq, size, partition_id)
        assert store.create(partition_id, seq, body)
        starts.append(seq)
        seq += size
    return starts


def seed(aws: AwsEnv, objects: dict[str, bytes]) -> None:
    """Objects in the test's bucket without a request each (the embedded AWS runs in this
    process, on moto's default account): setup only, never what a test checks."""
    backend = s3_backends[DEFAULT_ACCOUNT_ID]["aws"]
    for key, body in objects.items():
        backend.put_object(aws.config.bucket, key, body)


@pytest.fixture
def store(aws: AwsEnv) -> SegmentStore:
    return SegmentStore(aws.clients, aws.config.bucket)


def test_create_is_conditional_and_never_overwrites(store: SegmentStore, aws: AwsEnv) -> None:
    first = encode_segment(P, 0, incoming_records(2, start=0), 0)
    other = encode_segment(P, 0, incoming_records(3, start=10), 0)
    assert store.create(P, 0, first) is True
    assert store.create(P, 0, other) is False
    assert len(store.fetch(P, 0).records) == 2


def test_fetch_refuses_an_object_that_is_not_the_segment_its_key_names(
    store: SegmentStore, aws: AwsEnv
) -> None:
    misplaced = encode_segment(P, 5, incoming_records(1, start=0), 0)
    aws.clients.s3.put_object(Bucket=aws.config.bucket, Key=segment_key(P, 4), Body=misplaced)
    with pytest.raises(CorruptLogError, match=f"holds {P}/5, not {P}/4"):
        store.fetch(P, 4)
    foreign = encode_segment("shardId-000000000009", 6, incoming_records(1, start=0), 0)
    aws.clients.s3.put_object(Bucket=aws.config.bucket, Key=segment_key(P, 6), Body=foreign)
    with pytest.raises(CorruptLogError, match="not shardId-000000000000/6"):
        store.fetch(P, 6)


def test_starts_list_from_any_seq_and_only_their_partition(store: SegmentStore) -> None:
    starts = put_segments(store, [3, 1, 4, 2])
    put_segments(store, [5], partition_id="shardId-000000000001")
    assert list(store.starts(P)) == starts == [0, 3, 4, 8]
    assert list(store.starts(P, 4)) == [4, 8]
    assert list(store.starts(P, 5)) == [8]
    assert list(store.starts(P, 10)) == []


def test_segment_start_looks_back_past_a_full_listing_page(
    store: SegmentStore, aws: AwsEnv
) -> None:
    # 1,300 one-record segments, then one of 1,000: seq 1,800 sits 500 records into the
    # last segment, and the first look-back window (1,024 seqs) lists a full page of
    # 1,000 keys below it before reaching that segment's start.
    sizes = {seq: 1 for seq in range(1_300)} | {1_300: 1_000}
    seed(aws, {segment_key(P, seq): segment(seq, size) for seq, size in sizes.items()})
    assert store.segment_start(P, 1_800) == 1_300
    assert store.segment_start(P, 1_299) == 1_299
    assert store.segment_start(P, 0) == 0


def test_segments_stop_at_the_head_and_hide_what_lies_past_it(store: SegmentStore) -> None:
    put_segments(store, [2, 2, 2])  # seqs 0-5, but the caller's committed head is 4
    assert [s.first_seq for s in store.segments(P, 0, head=4)] == [0, 2]
    assert [r.seq for r in store.records(P, 1, head=4)] == [1, 2, 3]
    assert list(store.records(P, 4, head=4)) == []


def test_a_missing_segment_below_the_head_is_corruption_never_a_skip(
    store: SegmentStore, aws: AwsEnv
) -> None:
    put_segments(store, [2, 2, 2])
    aws.clients.s3.delete_object(Bucket=aws.config.bucket, Key=segment_key(P, 2))
    with pytest.raises(CorruptLogError, match="expected the segment at seq 2"):
        list(store.records(P, 0, head=6))
    with pytest.raises(CorruptLogError, match="log ends at seq 2"):
        list(store.records(P, 0, head=3))


def test_reading_n_segments_costs_one_listing_and_n_gets(store: SegmentStore, aws: AwsEnv) -> None:
    put_segments(store, [10] * 6)
    aws.requests.reset()
    assert len(list(store.records(P, 0, head=60))) == 60
    counts = aws.requests.snapshot()
    assert counts["s3.GetObject"] == 6
    assert counts["s3.ListObjectsV2"] == 1


def put_keys(aws: AwsEnv, starts: list[int]) -> None:
    """Objects at these segment keys: the backward listing reads keys and sizes only."""
    seed(aws, {segment_key(P, start): b"x" * (start % 7 + 1) for start in starts})


@pytest.mark.parametrize(
    ("starts", "head", "max_lists"),
    [
        # big segments (10,000 seqs each): rounds grow from 1,000 seqs, 64-fold at most
        ([10_000 * i for i in range(100)], 1_000_000, 3),
        # one seq per segment: each round is one page of at most 1,000 keys
        (list(range(1_200)), 1_200, 2),
        # dense old segments under sparse new ones: a page that fills before its range's
        # end is listed again over its upper half, never paged through to the end
        ([*range(1_200), *range(2_000, 112_000, 10_000)], 112_000, 12),
    ],
    ids=["sparse", "dense", "denser-below"],
)
def test_the_backward_listing_lists_newest_first_in_pages(
    store: SegmentStore, aws: AwsEnv, starts: list[int], head: int, max_lists: int
) -> None:
    put_keys(aws, [*starts, head, head + 5])  # and two uncommitted leftovers at the head
    listing = store.listing_back(P, head, max_lists=50)
    listed = list(listing)
    assert [s.start for s in listed] == sorted(starts, reverse=True)
    assert [s.size for s in listed] == [s % 7 + 1 for s in sorted(starts, reverse=True)]
    assert 1 <= listing.lists <= max_lists and not listing.truncated


def test_the_backward_listing_stops_at_its_request_limit(store: SegmentStore, aws: AwsEnv) -> None:
    put_keys(aws, list(range(1_200)))
    listing = store.listing_back(P, 1_200, max_lists=1)
    assert [s.start for s in listing] == list(range(1_199, 199, -1))  # one page: 1,000 keys
    assert (listing.lists, listing.truncated) == (1, True)
    empty = store.listing_back(P, 0, max_lists=1)
    assert (list(empty), empty.lists, empty.truncated) == ([], 0, False)
