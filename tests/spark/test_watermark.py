"""The compaction watermark against the embedded AWS: fenced writes, redo record, SHARD_END."""

from __future__ import annotations

import pytest

from shardlog import constants as C
from shardlog.spark.exceptions import WatermarkConflictError
from shardlog.spark.watermark import Watermark, WatermarkStore
from shardlog.tables import Tables
from tests.support.aws import AwsEnv

P = "shardId-000000000000"


@pytest.fixture
def store(aws: AwsEnv) -> WatermarkStore:
    return WatermarkStore(aws.clients, aws.config.consumers_table)


def test_a_new_partition_starts_at_zero(store: WatermarkStore) -> None:
    assert store.read(P) == Watermark(P)


def test_begin_records_the_batch_then_advance_moves_the_checkpoint(
    store: WatermarkStore, aws: AwsEnv
) -> None:
    begun = store.begin(store.read(P), 100)
    assert store.read(P) == begun
    assert (begun.next_seq, begun.pending_end) == (0, 100)
    advanced = store.advance(begun)
    assert (advanced.next_seq, advanced.pending_end, advanced.ended) == (100, None, False)
    lease = Tables(aws.clients, aws.config.tables).get_lease(C.COMPACTION_GROUP, P)
    assert lease is not None and lease.checkpoint == "100"  # the consumers-table vocabulary


def test_a_stale_watermark_cannot_write(store: WatermarkStore) -> None:
    seen = store.read(P)
    store.begin(seen, 10)
    with pytest.raises(WatermarkConflictError) as caught:
        store.begin(seen, 20)  # another run read the same watermark: it loses
    assert caught.value.aws_error_code == "ConditionalCheckFailedException"
    assert store.read(P).pending_end == 10


def test_only_one_of_two_committers_advances(store: WatermarkStore) -> None:
    begun = store.begin(store.read(P), 10)
    store.advance(begun)
    with pytest.raises(WatermarkConflictError):
        store.advance(begun)
    assert store.read(P).next_seq == 10


def test_shard_end(store: WatermarkStore) -> None:
    done = store.advance(store.begin(store.read(P), 5), ended=True)
    assert done.ended and store.read(P).ended
    other = store.mark_ended(store.read("shardId-000000000001"))
    assert other.ended
    assert set(store.read_all()) == {P, "shardId-000000000001"}


def test_an_empty_batch_is_refused(store: WatermarkStore) -> None:
    with pytest.raises(ValueError, match="empty batch"):
        store.begin(store.read(P), 0)
