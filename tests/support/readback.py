"""Reading back what tests wrote: the committed log and the whole Kinesis stream."""

from __future__ import annotations

from dataclasses import dataclass

from shardlog.reader import LogReader
from shardlog.shardsync import list_shards
from tests.support.aws import AwsEnv


def log_kinesis_seqs(aws: AwsEnv, partition_id: str) -> list[str]:
    """The Kinesis sequence numbers of a partition's committed log, in log order."""
    reader = LogReader(aws.clients, aws.config.bucket, aws.config.tables)
    return [r.kinesis_sequence_number for r in reader.records(partition_id)]


@dataclass(frozen=True)
class StreamRecord:
    shard_id: str
    sequence_number: str
    partition_key: str
    data: bytes


def read_stream(aws: AwsEnv) -> list[StreamRecord]:
    """Every record in the stream, shard by shard, in sequence order."""
    kinesis = aws.clients.kinesis
    out: list[StreamRecord] = []
    for shard in list_shards(kinesis, aws.config.stream_name):
        iterator = kinesis.get_shard_iterator(
            StreamName=aws.config.stream_name,
            ShardId=shard["ShardId"],
            ShardIteratorType="TRIM_HORIZON",
        )["ShardIterator"]
        for _ in range(1000):  # bounded: a page per call until an empty page or the end
            response = kinesis.get_records(ShardIterator=iterator, Limit=10_000)
            out += [
                StreamRecord(shard["ShardId"], r["SequenceNumber"], r["PartitionKey"], r["Data"])
                for r in response["Records"]
            ]
            iterator = response.get("NextShardIterator")
            if not response["Records"] or not iterator:
                break
    return out
