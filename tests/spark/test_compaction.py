"""Compaction end to end against the embedded AWS: the log in, exactly its records out, in
the lake table, whatever crashes or races in between.

The Spark session is the shared local one; S3, DynamoDB and the Glue catalog are the moto
server over HTTP.
"""

from __future__ import annotations

import re
import socket
from collections import Counter
from typing import Any

import pytest

import shardlog.lake.commit as lake_commit
from shardlog import constants as C
from shardlog.format import IncomingRecord
from shardlog.lake.catalog import open_table
from shardlog.lake.commit import snapshot_watermarks, table_watermarks
from shardlog.lake.exceptions import CatalogUnavailableError, LakeSchemaError
from shardlog.local.kinesis_fidelity import SEQUENCE_BASE
from shardlog.segments import segment_key
from shardlog.spark.compaction import (
    check_files,
    commit_batches,
    plan_batches,
    remove_files,
    write_chunks,
)
from shardlog.spark.jobs import JobArgs
from shardlog.spark.watermark import WatermarkStore
from shardlog.tables import Tables
from spark_jobs import compact as compact_job
from spark_jobs.compact import compact
from tests.spark.helpers import data_objects, lake_rows, log_rows
from tests.support.aws import AwsEnv
from tests.support.factories import incoming_records, writer_for
from tests.support.faults import LostAnswer

P0, P1 = "shardId-000000000000", "shardId-000000000001"
KEY_PATTERN = re.compile(
    r"^lake/shardlog_[0-9a-f]{10}/events/data/arrival_day=\d{4}-\d{2}-\d{2}/"
    r"(shardId-\d{12})-(\d{20})-(\d{20})-([0-9a-f]{16})\.parquet$"
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


def assert_exactly_the_log(aws: AwsEnv, args: JobArgs) -> None:
    """The table holds every committed record once, and its watermark is what it holds."""
    rows = lake_rows(args.lake())
    assert len(rows) == len({(r[0], r[1]) for r in rows})  # no duplicate (partition, seq)
    assert rows == log_rows(aws)
    held = Counter(r[0] for r in rows)
    assert table_watermarks(open_table(args.lake())) == dict(held)
    assert all(max(r[1] for r in rows if r[0] == p) == n - 1 for p, n in held.items())


@pytest.fixture
def log(aws: AwsEnv, clock: Any) -> AwsEnv:
    writer = writer_for(aws, clock, segment_max_records=50)
    writer.append(P0, incoming_records(230, start=0))
    writer.append(P1, incoming_records(120, start=1000, keys=("q0", "q1", "q2", "q3", "q4")))
    return aws


def test_compaction_gives_exactly_the_log(spark: Any, log: AwsEnv) -> None:
    args = job_args(log)
    report = compact(spark, args)
    assert_exactly_the_log(log, args)
    assert report.records == 350 and report.files == len(data_objects(log, args.lake()))
    for key in data_objects(log, args.lake()):
        partition, first, last, run = KEY_PATTERN.match(key).groups()  # type: ignore[union-attr]
        assert partition in (P0, P1) and int(first) <= int(last) and run == report.run_id
    table = open_table(args.lake())
    (snapshot,) = table.snapshots()
    assert report.snapshot_id == snapshot.snapshot_id
    assert snapshot_watermarks(snapshot) == {P0: 230, P1: 120}
    store = WatermarkStore(log.clients, log.config.consumers_table)  # the status mirror
    assert (store.read(P0).next_seq, store.read(P1).next_seq) == (230, 120)
    # Where the run's time went, step by step (the executors' Spark job is "write").
    assert list(report.phase_seconds) == ["plan", "write", "check", "commit", "mirror"]
    assert all(seconds >= 0 for seconds in report.phase_seconds.values())
    assert report.phase_seconds["write"] > 0


def test_one_file_per_arrival_day_a_batch_touches(spark: Any, aws: AwsEnv, clock: Any) -> None:
    midnight = 1_700_006_400_000  # 2023-11-15T00:00:00Z
    records = [  # two records in the last ms of the 14th, two in the first ms of the 15th
        IncomingRecord("k", b"v", str(SEQUENCE_BASE + i), midnight - 2 + i) for i in range(4)
    ]
    writer_for(aws, clock).append(P0, records)
    args = job_args(aws)
    report = compact(spark, args)
    z, prefix = "0" * 19, f"{args.lake().key_prefix}data"
    assert sorted(data_objects(aws, args.lake())) == [
        f"{prefix}/arrival_day=2023-11-14/{P0}-{z}0-{z}1-{report.run_id}.parquet",
        f"{prefix}/arrival_day=2023-11-15/{P0}-{z}2-{z}3-{report.run_id}.parquet",
    ]


def test_crash_after_the_files_before_the_commit_then_rerun_converges(
    spark: Any, log: AwsEnv, clock: Any
) -> None:
    args = job_args(log, max_records=100)
    table = open_table(args.lake(), create=True)
    partitions = Tables(log.clients, args.config().tables).list_partitions()
    # The run dies after its data files are in S3, before its commit.
    plans = plan_batches(log.clients, args, table_watermarks(table), partitions)
    crashed = write_chunks(spark, args, plans, "c" * 16)
    check_files(plans, crashed)
    orphans = set(data_objects(log, args.lake()))
    assert orphans and table.refresh().current_snapshot() is None
    # Ingest goes on meanwhile: the head moves past the crashed batch.
    writer_for(log, clock, segment_max_records=50).append(P0, incoming_records(70, start=230))

    while compact(spark, args).records:
        pass
    assert_exactly_the_log(log, args)  # the orphans are in no snapshot: never read
    committed = {t.file.file_path for t in open_table(args.lake()).scan().plan_files()}
    assert not committed & {f"s3://{log.config.bucket}/{k}" for k in orphans}


def test_crash_after_the_commit_before_the_mirror_then_rerun_appends_nothing(
    spark: Any, log: AwsEnv
) -> None:
    args = job_args(log)
    table = open_table(args.lake(), create=True)
    partitions = Tables(log.clients, args.config().tables).list_partitions()
    plans = plan_batches(log.clients, args, {}, partitions)
    files = write_chunks(spark, args, plans, "d" * 16)
    commit_batches(table, args.lake(), plans, files, "d" * 16)  # then the run dies
    store = WatermarkStore(log.clients, log.config.consumers_table)
    assert store.read(P0).next_seq == 0  # the mirror lags: it is never the truth

    rerun = compact(spark, args)
    assert (rerun.records, rerun.files, rerun.snapshot_id) == (0, 0, None)
    assert len(open_table(args.lake()).snapshots()) == 1
    assert_exactly_the_log(log, args)
    assert (store.read(P0).next_seq, store.read(P1).next_seq) == (230, 120)  # caught up


def test_two_racing_runs_land_exactly_once(
    spark: Any, log: AwsEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Run A has read the table's watermarks and is about to commit when run B starts,
    runs to the end and commits the same records: A's commit is refused (its base moved),
    A re-reads the table, finds its batch stale, commits nothing and removes its files."""
    args = job_args(log)
    original = lake_commit.stale_partitions
    other: list[Any] = []

    def racing(marks: Any, batch: Any) -> list[str]:
        if not other:
            other.append(None)
            other[0] = compact(spark, args)  # run B, start to finish, inside run A
        return original(marks, batch)

    monkeypatch.setattr(lake_commit, "stale_partitions", racing)
    first = compact(spark, args)
    winner = other[0]
    assert winner.records == 350 and winner.snapshot_id is not None
    assert (first.records, first.files, first.snapshot_id) == (0, 0, None)
    assert first.conflicts and "another run appended" in first.conflicts[0]
    assert len(open_table(args.lake()).snapshots()) == 1
    assert_exactly_the_log(log, args)
    # The loser's files are gone; the winner's are the table's.
    assert all(winner.run_id in key for key in data_objects(log, args.lake()))


def test_a_lost_commit_answer_removes_no_file_and_the_next_run_progresses(
    spark: Any, log: AwsEnv, clock: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Glue applies the run's UpdateTable, the answer is lost, botocore resends it and Glue
    refuses the resend: pyiceberg reports the commit refused. The run finds its own
    snapshot by its run id, reports it committed and removes no file; the table is
    readable, its watermark is what it holds, and the next run appends what came since."""
    args = job_args(log, max_records=100)
    compact(spark, args)  # a first run: the table and a first snapshot
    lost: list[LostAnswer] = []

    def opened_with_a_lost_answer(*a: Any, **k: Any) -> Any:
        table = open_table(*a, **k)
        lost.append(LostAnswer(table.catalog.glue, "UpdateTable"))
        lost[-1].arm(1)
        return table

    monkeypatch.setattr(compact_job, "open_table", opened_with_a_lost_answer)
    before = data_objects(log, args.lake())
    report = compact(spark, args)
    (fault,) = lost
    assert (fault.lost, fault.resent) == (1, 1)
    assert report.conflicts == [] and report.records == 120 and report.snapshot_id is not None
    assert open_table(args.lake()).current_snapshot().snapshot_id == report.snapshot_id  # type: ignore[union-attr]
    after = data_objects(log, args.lake())
    assert before.items() <= after.items()  # no file removed
    assert sum(report.run_id in key for key in after) == report.files
    monkeypatch.undo()
    writer_for(log, clock, segment_max_records=50).append(P0, incoming_records(20, start=230))
    while compact(spark, args).records:  # later runs make progress, to the head
        pass
    assert_exactly_the_log(log, args)


def test_a_stale_run_removes_only_files_no_snapshot_references(spark: Any, log: AwsEnv) -> None:
    """A run whose commit is refused as stale deletes its files, each only if the table
    read afresh references it from no snapshot."""
    args = job_args(log)
    compact(spark, args)
    table = open_table(args.lake())
    committed = sorted(data_objects(log, args.lake()))
    files = [{"file_key": k} for k in committed] + [{"file_key": f"{committed[0]}.stray"}]
    log.clients.s3.put_object(Bucket=log.config.bucket, Key=files[-1]["file_key"], Body=b"x")
    assert remove_files(log.clients, args.lake(), table, files) == [files[-1]["file_key"]]
    assert sorted(data_objects(log, args.lake())) == committed
    assert_exactly_the_log(log, args)


def test_a_second_run_with_no_new_records_writes_nothing(spark: Any, log: AwsEnv) -> None:
    args = job_args(log)
    compact(spark, args)
    before = data_objects(log, args.lake())
    snapshots = len(open_table(args.lake()).snapshots())
    counter_before = log.requests.snapshot()["s3.PutObject"]
    again = compact(spark, args)
    assert (again.records, again.files, again.batches, again.snapshot_id) == (0, 0, [], None)
    assert data_objects(log, args.lake()) == before  # same keys, same ETags
    assert log.requests.snapshot()["s3.PutObject"] == counter_before  # no data file
    assert len(open_table(args.lake()).snapshots()) == snapshots  # no empty snapshot


def test_batches_are_whole_segments_within_max_records(spark: Any, log: AwsEnv) -> None:
    args = job_args(log, max_records=120)
    first = compact(spark, args)
    assert {(b["partitionId"], b["start"], b["end"]) for b in first.batches} == {
        (P0, 0, 100),  # segments of 50: two fit in 120, a third would not
        (P1, 0, 120),  # 50 + 50 + 20 (the head): exactly 120
    }
    while compact(spark, args).records:
        pass
    assert_exactly_the_log(log, args)


def test_ended_partitions_reach_shard_end_closed_ones_keep_going(
    spark: Any, log: AwsEnv, clock: Any
) -> None:
    set_state(log, P0, C.STATE_ENDED)
    set_state(log, P1, C.STATE_CLOSED)
    args = job_args(log)
    report = compact(spark, args)
    store = WatermarkStore(log.clients, log.config.consumers_table)
    assert report.ended == [P0] and store.read(P0).ended
    assert store.read(P1).next_seq == 120 and not store.read(P1).ended
    writer_for(log, clock, segment_max_records=50).append(
        P1, incoming_records(10, start=1120, keys=("q0", "q1", "q2", "q3", "q4"))
    )
    set_state(log, P1, C.STATE_ENDED)
    compact(spark, args)
    assert store.read(P1).ended
    assert_exactly_the_log(log, args)
    assert compact(spark, args).ended == []  # done partitions are not mirrored again


def test_a_missing_segment_fails_the_run_and_commits_nothing(spark: Any, log: AwsEnv) -> None:
    log.clients.s3.delete_object(Bucket=log.config.bucket, Key=segment_key(P0, 100))
    args = job_args(log)
    with pytest.raises(Exception, match="a committed segment is missing"):
        compact(spark, args)
    assert open_table(args.lake()).current_snapshot() is None  # never skipped
    store = WatermarkStore(log.clients, log.config.consumers_table)
    assert store.read(P0).next_seq == 0


@pytest.mark.usefixtures("glue_answers_at_once")
def test_an_unreachable_catalog_fails_before_anything_is_written(
    spark: Any, log: AwsEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{probe.getsockname()[1]}"
    args = job_args(log)
    lake = args.lake()
    nowhere = type(lake)(
        lake.table, lake.location, lake.catalog_name, {**lake.properties, "glue.endpoint": closed}
    )
    monkeypatch.setattr(JobArgs, "lake", lambda self: nowhere)
    puts = log.requests.snapshot()["s3.PutObject"]
    with pytest.raises(CatalogUnavailableError, match=f"lake catalog shardlog \\({closed}\\)"):
        compact(spark, args)
    assert log.requests.snapshot()["s3.PutObject"] == puts
    assert WatermarkStore(log.clients, log.config.consumers_table).read_all() == {}


def test_a_table_of_another_schema_fails_the_run_clearly(spark: Any, log: AwsEnv) -> None:
    from pyiceberg.catalog import load_catalog
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField

    lake = job_args(log).lake()
    catalog = load_catalog(lake.catalog_name, **lake.properties)
    catalog.create_namespace_if_not_exists(lake.database)
    catalog.create_table(
        lake.table, Schema(NestedField(1, "seq", LongType(), required=True)), location=lake.location
    )
    with pytest.raises(
        LakeSchemaError, match="is not a shardlog lake table: missing column arrival_time"
    ):
        compact(spark, job_args(log))
    assert not data_objects(log, lake)
