"""The embedded Kinesis behaves like Kinesis across resharding (plain boto3, over HTTP)."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from botocore.exceptions import ClientError

from shardlog.hashing import hash_key
from shardlog.shardsync import list_shards
from tests.support.aws import AwsEnv


def _put(aws: AwsEnv, key: str, data: bytes = b"x", hash_key: str | None = None) -> dict[str, Any]:
    kwargs: dict[str, Any] = {
        "StreamName": aws.config.stream_name,
        "PartitionKey": key,
        "Data": data,
    }
    if hash_key is not None:
        kwargs["ExplicitHashKey"] = hash_key
    return aws.clients.kinesis.put_record(**kwargs)


def _read_all(aws: AwsEnv, shard_id: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    kinesis = aws.clients.kinesis
    iterator = kinesis.get_shard_iterator(
        StreamName=aws.config.stream_name, ShardId=shard_id, ShardIteratorType="TRIM_HORIZON"
    )["ShardIterator"]
    records: list[dict[str, Any]] = []
    for _ in range(100):
        page = kinesis.get_records(ShardIterator=iterator, Limit=1000)
        records += page["Records"]
        if "NextShardIterator" not in page or not page["Records"]:
            return records, page
        iterator = page["NextShardIterator"]
    raise AssertionError("shard never ended")


def _shards(aws: AwsEnv) -> dict[str, dict[str, Any]]:
    return {s["ShardId"]: s for s in list_shards(aws.clients.kinesis, aws.config.stream_name)}


def test_split_keeps_parent_records_and_routes_new_ones_to_children(aws: AwsEnv) -> None:
    parent = "shardId-000000000000"
    before = [_put(aws, "k", f"{i}".encode(), hash_key="5") for i in range(3)]
    assert {r["ShardId"] for r in before} == {parent}
    aws.clients.kinesis.split_shard(
        StreamName=aws.config.stream_name, ShardToSplit=parent, NewStartingHashKey="10"
    )
    after_low = _put(aws, "k", b"low", hash_key="5")
    after_high = _put(aws, "k", b"high", hash_key="10")
    shards = _shards(aws)
    children = [sid for sid, s in shards.items() if s.get("ParentShardId") == parent]
    assert len(children) == 2
    assert after_low["ShardId"] in children and after_high["ShardId"] in children
    assert after_low["ShardId"] != after_high["ShardId"]
    records, last_page = _read_all(aws, parent)
    assert [r["Data"] for r in records] == [b"0", b"1", b"2"], "parent records stay, unrenumbered"
    assert [r["SequenceNumber"] for r in records] == [r["SequenceNumber"] for r in before]
    assert (
        shards[parent]["SequenceNumberRange"]["EndingSequenceNumber"]
        == before[-1]["SequenceNumber"]
    )
    assert "NextShardIterator" not in last_page
    assert sorted(c["ShardId"] for c in last_page["ChildShards"]) == sorted(children)
    assert all(c["ParentShards"] == [parent] for c in last_page["ChildShards"])


def test_merge_does_not_copy_records(aws: AwsEnv) -> None:
    first, second = sorted(_shards(aws))
    low = _put(aws, "a", b"low", hash_key="0")
    high = _put(aws, "b", b"high", hash_key=str(2**128 - 1))
    assert (low["ShardId"], high["ShardId"]) == (first, second)
    aws.clients.kinesis.merge_shards(
        StreamName=aws.config.stream_name, ShardToMerge=first, AdjacentShardToMerge=second
    )
    shards = _shards(aws)
    (child,) = [sid for sid, s in shards.items() if s.get("AdjacentParentShardId")]
    assert (shards[child]["ParentShardId"], shards[child]["AdjacentParentShardId"]) == (
        first,
        second,
    )
    assert _read_all(aws, child)[0] == [], "the child starts empty: no duplicated records"
    assert _put(aws, "c", b"new")["ShardId"] == child
    for parent in (first, second):
        records, page = _read_all(aws, parent)
        assert len(records) == 1 and page["ChildShards"][0]["ShardId"] == child


def test_hash_ranges_are_inclusive_at_both_ends(aws: AwsEnv) -> None:
    shards = sorted(_shards(aws).values(), key=lambda s: int(s["HashKeyRange"]["StartingHashKey"]))
    for shard in shards:
        for edge in ("StartingHashKey", "EndingHashKey"):
            put = _put(aws, "k", hash_key=shard["HashKeyRange"][edge])
            assert put["ShardId"] == shard["ShardId"]


def test_sequence_numbers_are_big_and_increase_across_the_stream(aws: AwsEnv) -> None:
    numbers = [int(_put(aws, f"key-{i}")["SequenceNumber"]) for i in range(20)]
    assert numbers == sorted(numbers) and len(set(numbers)) == 20
    assert all(len(str(n)) == 56 for n in numbers)


def test_records_route_by_md5_of_the_key(aws: AwsEnv) -> None:
    shards = list(_shards(aws).values())
    for i in range(30):
        key = f"user-{i}"
        expected = next(
            s["ShardId"]
            for s in shards
            if int(s["HashKeyRange"]["StartingHashKey"])
            <= hash_key(key)
            <= int(s["HashKeyRange"]["EndingHashKey"])
        )
        assert _put(aws, key)["ShardId"] == expected


def test_concurrent_producers_lose_nothing(aws: AwsEnv) -> None:
    def produce(worker: int) -> None:
        clients = aws.fresh_clients()
        for i in range(25):
            clients.kinesis.put_record(
                StreamName=aws.config.stream_name,
                PartitionKey="same",
                Data=f"{worker}-{i}".encode(),
            )

    threads = [threading.Thread(target=produce, args=(w,)) for w in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    shard_id = _put(aws, "same", b"last")["ShardId"]
    records, _ = _read_all(aws, shard_id)
    numbers = [int(r["SequenceNumber"]) for r in records]
    assert len(records) == 101 and len(set(numbers)) == 101 and numbers == sorted(numbers)


def test_resharding_a_closed_shard_is_refused(aws: AwsEnv) -> None:
    parent = "shardId-000000000000"
    aws.clients.kinesis.split_shard(
        StreamName=aws.config.stream_name, ShardToSplit=parent, NewStartingHashKey="10"
    )
    with pytest.raises(ClientError):
        aws.clients.kinesis.split_shard(
            StreamName=aws.config.stream_name, ShardToSplit=parent, NewStartingHashKey="20"
        )
