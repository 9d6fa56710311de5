"""Idempotent produce across resharding, end to end: the original of a resend went to a
parent shard, the resend hashes to a child, and shard sync (every few minutes) may not have
recorded the child's lineage yet. Lambda ingests the child at once; the copy must still be
dropped. Records go through the embedded Kinesis (routed to children after a reshard) and
the ingest handler through the local event source (parents read to their end first)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from shardlog.aws import RequestCounter
from shardlog.clock import ManualClock
from shardlog.dedupe import LOOKUP_ACTIONS
from shardlog.idempotence import wrap
from shardlog.reader import LogReader
from shardlog.shardsync import ShardSync, list_shards
from shardlog.tables import Tables
from tests.support.aws import AwsEnv, make_env
from tests.support.factories import ingest_with_handler

Reshard = Callable[[AwsEnv], None]
# The IAM action of each operation the handler sends (the ingest role grants them).
_ACTIONS = {
    "s3.ListObjectsV2": "s3:ListBucket",
    "s3.GetObject": "s3:GetObject",
    "dynamodb.GetItem": "dynamodb:GetItem",
    "kinesis.ListShards": "kinesis:ListShards",
}
_WRITE_PATH = {
    "dynamodb.UpdateItem",
    "dynamodb.TransactGetItems",
    "dynamodb.TransactWriteItems",
    "s3.PutObject",
}


@pytest.fixture
def one_shard(endpoint_url: str) -> AwsEnv:
    return make_env(endpoint_url, shard_count=1)


def put(aws: AwsEnv, record_id: str, *, resent: bool = False, key: str = "k") -> str:
    """One record of an idempotent producer; the shard Kinesis put it in."""
    answer = aws.clients.kinesis.put_record(
        StreamName=aws.config.stream_name,
        PartitionKey=key,
        Data=wrap(record_id, f"payload-{record_id}".encode(), resent=resent),
    )
    return str(answer["ShardId"])


def open_shards(aws: AwsEnv) -> list[dict[str, object]]:
    shards = list_shards(aws.clients.kinesis, aws.config.stream_name)
    return [s for s in shards if "EndingSequenceNumber" not in s["SequenceNumberRange"]]


def split_all(aws: AwsEnv) -> None:
    """Every open shard split in two halves of its hash range (as UpdateShardCount does)."""
    for shard in open_shards(aws):
        hash_range: dict[str, str] = shard["HashKeyRange"]  # type: ignore[assignment]
        low, high = int(hash_range["StartingHashKey"]), int(hash_range["EndingHashKey"])
        aws.clients.kinesis.split_shard(
            StreamName=aws.config.stream_name,
            ShardToSplit=shard["ShardId"],
            NewStartingHashKey=str((low + high) // 2 + 1),
        )


def merge_all(aws: AwsEnv) -> None:
    first, second = (str(s["ShardId"]) for s in open_shards(aws)[:2])
    aws.clients.kinesis.merge_shards(
        StreamName=aws.config.stream_name, ShardToMerge=first, AdjacentShardToMerge=second
    )


def split_twice(aws: AwsEnv) -> None:
    """1 -> 2 -> 4 shards before any record reached the middle ones (so none has an item)."""
    split_all(aws)
    split_all(aws)


def ingest(aws: AwsEnv, clock: ManualClock) -> RequestCounter:
    """The ingest handler on every record of the stream, parents first, to the end."""
    return ingest_with_handler(aws, clock)


def logged_ids(aws: AwsEnv) -> dict[str, list[str | None]]:
    reader = LogReader(aws.clients, aws.config.bucket, aws.config.tables)
    return {
        p.partition_id: [r.record_id for r in reader.records(p.partition_id)]
        for p in Tables(aws.clients, aws.config.tables).list_partitions()
    }


def lineage_recorded(aws: AwsEnv, partition_id: str) -> bool:
    partition = Tables(aws.clients, aws.config.tables).get_partition(partition_id)
    return partition is not None and partition.starting_hash_key is not None


@pytest.mark.parametrize("reshard", [split_all, merge_all, split_twice])
@pytest.mark.parametrize("child_batch_first", [False, True], ids=["no-item", "item-no-lineage"])
def test_a_resend_into_a_child_before_shard_sync_is_dropped(
    endpoint_url: str, clock: ManualClock, reshard: Reshard, child_batch_first: bool
) -> None:
    """The original reached the parent; the resend hashes to a child that shard sync has not
    seen (no item at all, or one the ingest commit of an earlier batch created): dropped."""
    aws = make_env(endpoint_url, shard_count=2 if reshard is merge_all else 1)
    ShardSync(aws.clients, aws.config.stream_name, aws.config.tables).sync()  # before: roots
    parent = put(aws, "a")
    ingest(aws, clock)
    reshard(aws)
    if child_batch_first:
        put(aws, "b")
        ingest(aws, clock)
    child = put(aws, "a", resent=True)
    requests = ingest(aws, clock)
    assert child != parent and not lineage_recorded(aws, child)
    assert {_ACTIONS.get(o, o) for o in requests.by_operation} <= _WRITE_PATH | set(LOOKUP_ACTIONS)
    logged = logged_ids(aws)
    assert [i for ids in logged.values() for i in ids if i == "a"] == ["a"], logged
    assert logged[parent] == ["a"]


def test_a_resend_after_shard_sync_and_an_unflagged_one_across_a_split(
    one_shard: AwsEnv, clock: ManualClock
) -> None:
    """After shard sync the lineage comes from the partitions table (no ListShards); an
    unflagged copy is a new record as far as ingest knows: kept."""
    aws = one_shard
    put(aws, "a")
    put(aws, "b")
    ingest(aws, clock)
    split_all(aws)
    ShardSync(aws.clients, aws.config.stream_name, aws.config.tables).sync()
    child = put(aws, "a", resent=True)
    put(aws, "b")  # unflagged: kept
    requests = ingest(aws, clock)
    assert lineage_recorded(aws, child)
    assert requests.by_operation["kinesis.ListShards"] == 0
    logged = logged_ids(aws)
    assert sorted(i for ids in logged.values() for i in ids if i is not None) == ["a", "b", "b"]
