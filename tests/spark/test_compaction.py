"""Compaction end to end against the embedded AWS: the log in, exactly its records out.

The Spark session is the shared local one; S3 and DynamoDB are the moto server over HTTP.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from shardlog import constants as C
from shardlog.format import IncomingRecord
from shardlog.local.kinesis_fidelity import SEQUENCE_BASE
from shardlog.segments import segment_key
from shardlog.spark.compaction import CompactionReport, begin_batches, plan_batches
from shardlog.spark.jobs import JobArgs
from shardlog.spark.watermark import WatermarkStore
from spark_jobs.compact import compact, write_batches
from tests.spark.helpers import compacted_objects, compacted_rows, log_rows
from tests.support.aws import AwsEnv
from tests.support.factories import incoming_records, writer_for

P0, P1 = "shardId-000000000000", "shardId-000000000001"
KEY_PATTERN = re.compile(
    r"^compacted/date=\d{4}-\d{2}-\d{2}/hour=\d{2}/(shardId-\d{12})-(\d{20})-(\d{20})\.parquet$"
)


def job_args(aws: AwsEnv, max_records: int = C.DEFAULT_COMPACTION_MAX_RECORDS) -> JobArgs:
    return JobArgs.from_config(aws.config, max_records=max_records)


def set_state(aws: AwsEnv, partition_id: str, state: str) -> None:
    aws.clients.dynamodb.update_item(
        TableName=aws.config.partitions_table,
        Key={C.ATTR_PARTITION_ID: {"S": partition_id}},
        UpdateExpression="SET #s = :s",
        ExpressionAttributeNames={"#s": C.ATTR_STATE},
        ExpressionAttributeValues={":s": {"S": state}},
    )


@pytest.fixture
def log(aws: AwsEnv, clock: Any) -> AwsEnv:
    writer = writer_for(aws, clock, segment_max_records=50)
    writer.append(P0, incoming_records(230, start=0))
    writer.append(P1, incoming_records(120, start=1000, keys=("q0", "q1", "q2", "q3", "q4")))
    return aws


def test_compaction_gives_exactly_the_log(spark: Any, log: AwsEnv) -> None:
    report = compact(spark, job_args(log))
    assert compacted_rows(log) == log_rows(log)
    assert report.records == 350 and report.files == len(compacted_objects(log))
    for key in compacted_objects(log):
        partition, first, last = KEY_PATTERN.match(key).groups()  # type: ignore[union-attr]
        assert partition in (P0, P1) and int(first) <= int(last)
    store = WatermarkStore(log.clients, log.config.consumers_table)
    assert (store.read(P0).next_seq, store.read(P1).next_seq) == (230, 120)
    # Where the run's time went, step by step (the executors' Spark job is "write").
    assert list(report.phase_seconds) == ["plan", "begin", "write", "check", "commit"]
    assert all(seconds >= 0 for seconds in report.phase_seconds.values())
    assert report.phase_seconds["write"] > 0


def test_one_file_per_hour_a_batch_touches(spark: Any, aws: AwsEnv, clock: Any) -> None:
    hour = 1_700_002_800_000  # 2023-11-14T23:00:00Z
    records = [  # two records in the last ms of 22h, two in the first ms of 23h
        IncomingRecord("k", b"v", str(SEQUENCE_BASE + i), hour - 2 + i) for i in range(4)
    ]
    writer_for(aws, clock).append(P0, records)
    compact(spark, job_args(aws))
    z = "0" * 19
    assert sorted(compacted_objects(aws)) == [
        f"compacted/date=2023-11-14/hour=22/{P0}-{z}0-{z}1.parquet",
        f"compacted/date=2023-11-14/hour=23/{P0}-{z}2-{z}3.parquet",
    ]


def test_crash_between_write_and_advance_then_rerun_leaves_no_duplicates(
    spark: Any, log: AwsEnv, clock: Any
) -> None:
    args = job_args(log, max_records=100)
    store = WatermarkStore(log.clients, log.config.consumers_table)
    # The run dies after its Parquet files are in S3, before the watermark advance.
    plans, _ = plan_batches(log.clients, args)
    begun = begin_batches(store, plans, CompactionReport())
    write_batches(spark, args, begun)
    crashed_files = compacted_objects(log)
    assert crashed_files and store.read(P0).next_seq == 0
    # Ingest goes on meanwhile: the head moves past the crashed batch.
    writer_for(log, clock, segment_max_records=50).append(P0, incoming_records(70, start=230))

    redo = compact(spark, args)
    assert [b["redo"] for b in redo.batches] == [True, True]
    assert set(crashed_files) <= set(compacted_objects(log))  # overwritten in place
    while compact(spark, args).records:
        pass
    rows = compacted_rows(log)
    assert len(rows) == len(set((r[0], r[1]) for r in rows))  # no duplicate (partition, seq)
    assert rows == log_rows(log)


def test_a_second_run_with_no_new_records_writes_nothing(spark: Any, log: AwsEnv) -> None:
    compact(spark, job_args(log))
    before = compacted_objects(log)
    counter_before = log.requests.snapshot()["s3.PutObject"]
    again = compact(spark, job_args(log))
    assert (again.records, again.files, again.batches) == (0, 0, [])
    assert compacted_objects(log) == before  # same keys, same ETags
    assert log.requests.snapshot()["s3.PutObject"] == counter_before


def test_batches_are_whole_segments_within_max_records(spark: Any, log: AwsEnv) -> None:
    args = job_args(log, max_records=120)
    first = compact(spark, args)
    assert {(b["partitionId"], b["start"], b["end"]) for b in first.batches} == {
        (P0, 0, 100),  # segments of 50: two fit in 120, a third would not
        (P1, 0, 120),  # 50 + 50 + 20 (the head): exactly 120
    }
    while compact(spark, args).records:
        pass
    assert compacted_rows(log) == log_rows(log)


def test_ended_partitions_reach_shard_end_closed_ones_keep_going(
    spark: Any, log: AwsEnv, clock: Any
) -> None:
    set_state(log, P0, C.STATE_ENDED)
    set_state(log, P1, C.STATE_CLOSED)
    report = compact(spark, job_args(log))
    store = WatermarkStore(log.clients, log.config.consumers_table)
    assert report.ended == [P0] and store.read(P0).ended
    assert store.read(P1).next_seq == 120 and not store.read(P1).ended
    writer_for(log, clock, segment_max_records=50).append(
        P1, incoming_records(10, start=1120, keys=("q0", "q1", "q2", "q3", "q4"))
    )
    set_state(log, P1, C.STATE_ENDED)
    compact(spark, job_args(log))
    assert store.read(P1).ended
    assert compacted_rows(log) == log_rows(log)
    assert compact(spark, job_args(log)).ended == []  # done partitions are not read again


def test_a_missing_segment_fails_the_run_and_keeps_the_watermark(spark: Any, log: AwsEnv) -> None:
    log.clients.s3.delete_object(Bucket=log.config.bucket, Key=segment_key(P0, 100))
    with pytest.raises(Exception, match="a committed segment is missing"):
        compact(spark, job_args(log))
    store = WatermarkStore(log.clients, log.config.consumers_table)
    assert store.read(P0).next_seq == 0  # never skipped
