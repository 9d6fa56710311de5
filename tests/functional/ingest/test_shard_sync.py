"""Shard sync: lineage from ListShards, OPEN -> CLOSED -> ENDED."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from lambdas.shard_sync import handler as shard_sync_handler
from shardlog import constants as C
from shardlog.exceptions import ConfigurationError
from shardlog.format import IncomingRecord
from shardlog.local.lambda_context import LambdaContext
from shardlog.shardsync import ShardSync
from shardlog.tables import Tables
from shardlog.writer import LogWriter, WriterSettings
from tests.support.aws import AwsEnv

FIRST, SECOND = "shardId-000000000000", "shardId-000000000001"


def _sync(aws: AwsEnv) -> ShardSync:
    return ShardSync(aws.clients, aws.config.stream_name, aws.config.tables)


def _states(aws: AwsEnv) -> dict[str, str]:
    return {
        p.partition_id: p.state for p in Tables(aws.clients, aws.config.tables).list_partitions()
    }


def _ingest_everything(aws: AwsEnv, shard_id: str) -> None:
    kinesis = aws.clients.kinesis
    iterator = kinesis.get_shard_iterator(
        StreamName=aws.config.stream_name, ShardId=shard_id, ShardIteratorType="TRIM_HORIZON"
    )["ShardIterator"]
    page = kinesis.get_records(ShardIterator=iterator)
    records = [
        IncomingRecord(r["PartitionKey"], r["Data"], r["SequenceNumber"], 0)
        for r in page["Records"]
    ]
    LogWriter(aws.clients, WriterSettings(aws.config.bucket, aws.config.tables)).append(
        shard_id, records
    )


def test_lineage_and_states_across_split_and_merge(aws: AwsEnv) -> None:
    stream = aws.config.stream_name
    first = _sync(aws).sync()
    assert sorted(first.created) == [FIRST, SECOND] and first.closed == []
    aws.clients.kinesis.put_record(
        StreamName=stream, PartitionKey="a", Data=b"1", ExplicitHashKey="5"
    )
    aws.clients.kinesis.split_shard(StreamName=stream, ShardToSplit=FIRST, NewStartingHashKey="100")
    low, high = "shardId-000000000002", "shardId-000000000003"
    aws.clients.kinesis.merge_shards(StreamName=stream, ShardToMerge=low, AdjacentShardToMerge=high)
    merged = "shardId-000000000004"

    result = _sync(aws).sync()
    assert set(result.created) == {low, high, merged}
    assert set(result.closed) == {FIRST, low, high}
    # The split children and the empty closed shards end at once: nothing to ingest.
    assert set(result.ended) == {low, high}
    assert _states(aws)[FIRST] == C.STATE_CLOSED, "its record is not ingested yet"

    partitions = {
        p.partition_id: p for p in Tables(aws.clients, aws.config.tables).list_partitions()
    }
    assert partitions[low].parents == (FIRST,)
    assert partitions[merged].parents == (low, high)
    assert partitions[low].ending_hash_key == "99" and partitions[high].starting_hash_key == "100"

    _ingest_everything(aws, FIRST)  # its commit reaches the end of a CLOSED partition...
    assert _states(aws)[FIRST] == C.STATE_ENDED
    assert _sync(aws).sync().ended == [], "...so the commit ended it, not the sync"
    assert _states(aws) == {
        FIRST: C.STATE_ENDED,
        SECOND: C.STATE_OPEN,
        low: C.STATE_ENDED,
        high: C.STATE_ENDED,
        merged: C.STATE_OPEN,
    }
    again = _sync(aws).sync()
    assert (again.created, again.closed, again.ended) == ([], [], []), "idempotent"


def test_sync_adds_lineage_to_a_partition_the_writer_created_first(aws: AwsEnv) -> None:
    LogWriter(aws.clients, WriterSettings(aws.config.bucket, aws.config.tables)).append(
        FIRST, [IncomingRecord("k", b"d", "7", 0)]
    )
    _sync(aws).sync()
    partition = Tables(aws.clients, aws.config.tables).get_partition(FIRST)
    assert partition is not None
    assert partition.next_seq == 1, "the committed head is kept"
    assert partition.starting_hash_key == "0" and partition.state == C.STATE_OPEN


@pytest.fixture
def fresh_sync_entry_point() -> Iterator[None]:
    shard_sync_handler.handler.reset()
    yield
    shard_sync_handler.handler.reset()


def _sync_env(aws: AwsEnv) -> dict[str, str]:
    return {
        C.ENV_STREAM_NAME: aws.config.stream_name,
        C.ENV_PARTITIONS_TABLE: aws.config.partitions_table,
        C.ENV_CONSUMERS_TABLE: aws.config.consumers_table,
        C.ENV_ENDPOINT_URL: aws.config.endpoint_url or "",
    }


def test_the_handler_builds_once_from_its_validated_settings(
    aws: AwsEnv, fresh_sync_entry_point: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in _sync_env(aws).items():
        monkeypatch.setenv(name, value)
    first = shard_sync_handler.handler({}, LambdaContext("shard-sync"))
    built = shard_sync_handler.handler.built
    assert sorted(first["created"]) == [FIRST, SECOND] and first["shards"] == 2
    again = shard_sync_handler.handler({}, LambdaContext("shard-sync"))
    assert again["created"] == [] and shard_sync_handler.handler.built is built is not None


@pytest.mark.parametrize(
    ("variable", "value"),
    [(C.ENV_STREAM_NAME, None), (C.ENV_CONSUMERS_TABLE, "ab"), (C.ENV_STREAM_NAME, "a b")],
)
def test_the_handler_refuses_bad_settings_before_any_request(
    aws: AwsEnv,
    fresh_sync_entry_point: None,
    monkeypatch: pytest.MonkeyPatch,
    variable: str,
    value: str | None,
) -> None:
    for name, setting in _sync_env(aws).items():
        monkeypatch.setenv(name, setting)
    if value is None:
        monkeypatch.delenv(variable)
    else:
        monkeypatch.setenv(variable, value)
    with pytest.raises(ConfigurationError, match=variable):
        shard_sync_handler.handler({}, LambdaContext("shard-sync"))
    assert shard_sync_handler.handler.built is None
    assert _states(aws) == {}, "no shard recorded"
