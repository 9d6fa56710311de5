"""Shard sync: lineage from ListShards, OPEN -> CLOSED -> ENDED."""

from __future__ import annotations

from shardlog import constants as C
from shardlog.format import IncomingRecord
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
