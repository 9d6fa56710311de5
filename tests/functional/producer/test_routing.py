"""Routing (tests/unit/test_hashing.py) checked against Kinesis: the embedded moto server
puts every record where shardlog.hashing says it goes."""

from __future__ import annotations

from shardlog import constants as C
from shardlog.hashing import hash_key, shard_for_key
from shardlog.shardsync import list_shards
from tests.support.aws import make_env


def test_routing_matches_kinesis_for_many_keys(endpoint_url: str) -> None:
    env = make_env(endpoint_url, 4)
    kinesis, stream = env.clients.kinesis, env.config.stream_name
    shards = list_shards(kinesis, stream)
    assert len(shards) == 4
    keys = [f"key-{i}" for i in range(40)] + [
        "\u00e9",
        "\u65e5\u672c\u8a9e",
        "emoji-\U0001f600",
        "x" * 256,
        "a",
        "hello",
        " ",
        "user-42",
        "/",
        "0",
    ]
    routed = {}
    for key in keys:
        response = kinesis.put_record(StreamName=stream, PartitionKey=key, Data=b"x")
        assert response["ShardId"] == shard_for_key(shards, key), key
        routed[key] = response["ShardId"]
    assert len(set(routed.values())) == 4  # the keys exercised every shard


def test_range_boundaries_match_kinesis(endpoint_url: str) -> None:
    env = make_env(endpoint_url, 4)
    kinesis, stream = env.clients.kinesis, env.config.stream_name
    shards = list_shards(kinesis, stream)
    assert int(shards[0]["HashKeyRange"]["StartingHashKey"]) == 0
    assert int(shards[-1]["HashKeyRange"]["EndingHashKey"]) == C.MAX_HASH_KEY
    for s in shards:
        for bound in ("StartingHashKey", "EndingHashKey"):
            value = s["HashKeyRange"][bound]
            response = kinesis.put_record(
                StreamName=stream, PartitionKey="k", Data=b"x", ExplicitHashKey=value
            )
            assert response["ShardId"] == s["ShardId"] == shard_for_key(shards, "k", value)


def test_closed_parent_is_skipped_after_a_split(endpoint_url: str) -> None:
    env = make_env(endpoint_url, 4)
    kinesis, stream = env.clients.kinesis, env.config.stream_name
    parent = list_shards(kinesis, stream)[0]
    parent_end = int(parent["HashKeyRange"]["EndingHashKey"])
    split_at = parent_end // 2
    kinesis.split_shard(
        StreamName=stream, ShardToSplit=parent["ShardId"], NewStartingHashKey=str(split_at)
    )
    shards = list_shards(kinesis, stream)
    closed = [s for s in shards if "EndingSequenceNumber" in s["SequenceNumberRange"]]
    assert [s["ShardId"] for s in closed] == [parent["ShardId"]]
    children = {s["ShardId"] for s in shards if s.get("ParentShardId") == parent["ShardId"]}
    assert len(children) == 2
    for value in ("0", str(split_at - 1), str(split_at)):
        expected = shard_for_key(shards, "k", value)
        assert expected in children
        response = kinesis.put_record(
            StreamName=stream, PartitionKey="k", Data=b"x", ExplicitHashKey=value
        )
        assert response["ShardId"] == expected
    assert shard_for_key(shards, "k", str(split_at - 1)) != shard_for_key(
        shards, "k", str(split_at)
    )
    parent_keys = [k for k in (f"key-{i}" for i in range(200)) if hash_key(k) <= parent_end]
    assert len(parent_keys) >= 10
    for key in parent_keys[:10]:
        response = kinesis.put_record(StreamName=stream, PartitionKey=key, Data=b"x")
        assert response["ShardId"] == shard_for_key(shards, key) != parent["ShardId"]
