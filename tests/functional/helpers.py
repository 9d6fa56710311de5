"""Helpers for functional tests: Kinesis-like records and log read-back."""

from __future__ import annotations

from dataclasses import dataclass

from shardlog.format import IncomingRecord
from shardlog.local.kinesis_fidelity import SEQUENCE_BASE
from shardlog.reader import LogReader
from shardlog.shardsync import list_shards
from shardlog.writer import LogWriter, WriterSettings
from tests.conftest import AwsEnv


def kinesis_records(start: int, count: int, key: str = "k") -> list[IncomingRecord]:
    """Records with 56-digit, increasing Kinesis sequence numbers (gaps of 7, as on AWS)."""
    return [
        IncomingRecord(
            partition_key=f"{key}{i % 5}",
            data=f"record-{i}".encode(),
            kinesis_sequence_number=str(SEQUENCE_BASE + 7 * i),
            arrival_ms=1_700_000_000_000 + i,
        )
        for i in range(start, start + count)
    ]


def writer_for(aws: AwsEnv, clock: object = None, **settings: int) -> LogWriter:
    return LogWriter(
        aws.fresh_clients(),
        WriterSettings(bucket=aws.config.bucket, tables=aws.config.tables, **settings),
        clock=clock,  # type: ignore[arg-type]
    )


def log_kinesis_seqs(aws: AwsEnv, partition_id: str) -> list[str]:
    reader = LogReader(aws.clients, aws.config.bucket, aws.config.tables)
    return [r.kinesis_sequence_number for r in reader.records(partition_id)]


def seqs(records: list[IncomingRecord]) -> list[str]:
    return [r.kinesis_sequence_number for r in records]


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
