"""The compaction mirror against the embedded AWS: fenced writes and SHARD_END."""

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


def test_mirror_sets_the_checkpoint_in_the_consumers_table_vocabulary(
    store: WatermarkStore, aws: AwsEnv
) -> None:
    mirrored = store.mirror(store.read(P), 100)
    assert store.read(P) == mirrored
    assert (mirrored.next_seq, mirrored.pending_end, mirrored.ended) == (100, None, False)
    lease = Tables(aws.clients, aws.config.tables).get_lease(C.COMPACTION_GROUP, P)
    assert lease is not None and lease.checkpoint == "100"


def test_a_stale_item_cannot_write(store: WatermarkStore) -> None:
    seen = store.read(P)
    store.mirror(seen, 10)
    with pytest.raises(WatermarkConflictError) as caught:
        store.mirror(seen, 20)  # another run read the same item: it loses
    assert caught.value.aws_error_code == "ConditionalCheckFailedException"
    assert store.read(P).next_seq == 10


def test_shard_end(store: WatermarkStore) -> None:
    done = store.mirror(store.read(P), 5, ended=True)
    assert done.ended and store.read(P).ended
    store.mirror(store.read("shardId-000000000001"), 0, ended=True)
    assert set(store.read_all()) == {P, "shardId-000000000001"}
