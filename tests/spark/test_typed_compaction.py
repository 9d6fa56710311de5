"""Typed compaction end to end against the embedded AWS (``shardlog.spark.typed``): every
record of the log is in the declared table, typed as its payload, or in its dead-letter
table, exactly once, whatever crashes or races in between.

The Spark session is the shared local one; S3, DynamoDB and the Glue catalog are the moto
server over HTTP.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import shardlog.spark.typed as typed_module
from shardlog import constants as C
from shardlog.dal.partitions import PartitionsTable
from shardlog.format import IncomingRecord
from shardlog.lake.catalog import open_table
from shardlog.lake.commit import table_watermarks
from shardlog.lake.declared import parse_lake_tables
from shardlog.lake.files import DATA_DIR, parquet_bytes
from shardlog.lake.schema import EVENTS
from shardlog.local.kinesis_fidelity import SEQUENCE_BASE
from shardlog.segments import segment_key
from shardlog.spark.compaction import CompactionReport, plan_batches
from shardlog.spark.exceptions import CompactionError
from shardlog.spark.jobs import JobArgs
from shardlog.spark.typed import TypedReport, TypedTables, compact_typed, run_typed, write_typed
from shardlog.tables import Tables
from spark_jobs.compact import compact, compact_raw
from spark_jobs.maintain import run_declared_maintenance
from tests.spark.helpers import typed_rows_once
from tests.support.aws import AwsEnv
from tests.support.cli import run_cli
from tests.support.factories import writer_for

P0, P1 = "shardId-000000000000", "shardId-000000000001"
DECLARED = parse_lake_tables(
    [
        {
            "name": "orders",
            "schema": {
                "type": "object",
                "required": ["orderId"],
                "properties": {
                    "orderId": {"type": "string"},
                    "amount": {"type": "number", "format": "decimal", "precision": 10, "scale": 2},
                    "n": {"type": "integer", "maximum": 1000},
                },
            },
        }
    ],
    "test",
)
# What each malformed payload is refused for (record i, i % 7 == 3, takes them in turn).
MALFORMED = (
    (b"not json", "(payload)"),
    (json.dumps({"amount": 1}).encode(), "orderId"),
    (json.dumps({"orderId": "x", "n": "seven"}).encode(), "n"),
    (json.dumps({"orderId": "x", "n": 5000}).encode(), "n"),
    (json.dumps({"orderId": "x", "amount": 1.234}).encode(), "amount"),
)


def payload(i: int) -> bytes:
    if i % 7 == 3:
        return MALFORMED[(i // 7) % len(MALFORMED)][0]
    return json.dumps({"orderId": f"o-{i}", "amount": i + 0.25, "n": i % 1000}).encode()


def append(aws: AwsEnv, clock: Any, partition: str, first: int, count: int) -> None:
    records = [
        IncomingRecord(f"k{i % 3}", payload(i), str(SEQUENCE_BASE + i), 1_700_000_000_000 + i)
        for i in range(first, first + count)
    ]
    writer_for(aws, clock, segment_max_records=25).append(partition, records)


@pytest.fixture
def log(aws: AwsEnv, clock: Any) -> AwsEnv:
    append(aws, clock, P0, 0, 120)
    append(aws, clock, P1, 0, 60)
    return aws


def list_partitions(aws: AwsEnv) -> Any:
    return Tables(aws.clients, aws.config.tables).list_partitions()


def job_args(aws: AwsEnv) -> JobArgs:
    return replace(JobArgs.from_config(aws.config), lake_tables=json.dumps(DECLARED.to_json()))


def tables(args: JobArgs) -> TypedTables:
    return TypedTables.beside(args.lake(), DECLARED.tables[0])


def assert_each_record_once(aws: AwsEnv, args: JobArgs) -> tuple[int, int]:
    """Every committed record is typed (its values the payload's) or rejected (its bytes
    and the field refused), once; the typed table's watermarks are the heads. Returns the
    counts (typed, rejected)."""
    where = tables(args)
    typed_table, rejected_table = where.open(create=False)
    typed, rejected, log = typed_rows_once(aws, typed_table, rejected_table)
    for row in typed:
        body = json.loads(log[(row["partition_id"], row["seq"])][3])
        assert row["partition_key"] == log[(row["partition_id"], row["seq"])][2]
        assert (row["order_id"], row["amount"], row["n"]) == (
            body["orderId"],
            Decimal(str(body["amount"])).quantize(Decimal("0.01")),
            body["n"],
        )
    fields = dict(MALFORMED)
    for row in rejected:
        data = log[(row["partition_id"], row["seq"])][3]
        assert row["data"] == data and row["error_field"] == fields[data], row
    heads = Counter(k[0] for k in log)
    assert table_watermarks(typed_table) == dict(heads)
    return len(typed), len(rejected)


def data_keys(aws: AwsEnv, args: JobArgs) -> set[str]:
    """Every data object of both tables, committed or not."""
    keys: set[str] = set()
    for settings in (tables(args).typed, tables(args).rejected):
        pages = aws.clients.s3.get_paginator("list_objects_v2").paginate(
            Bucket=settings.bucket, Prefix=f"{settings.key_prefix}{DATA_DIR}"
        )
        keys |= {o["Key"] for page in pages for o in page.get("Contents", [])}
    return keys


def committed_keys(args: JobArgs) -> set[str]:
    bucket = tables(args).typed.bucket
    return {
        task.file.file_path.removeprefix(f"s3://{bucket}/")
        for table in tables(args).open(create=False)
        for task in table.scan().plan_files()
    }


def rejects(count: int) -> int:
    return sum(1 for i in range(count) if i % 7 == 3)


def test_every_record_is_typed_or_dead_lettered_once(spark: Any, log: AwsEnv, clock: Any) -> None:
    args = job_args(log)
    report = compact(spark, args)
    (run,) = report.tables
    typed, rejected = assert_each_record_once(log, args)
    assert (run["typed"], run["rejected"], run["filtered"]) == (typed, rejected, 0)
    assert rejected == rejects(120) + rejects(60)
    assert report.records == 180 == run["records"]  # the raw table too, in the same job
    assert run["from_raw"] == 180  # read from the raw run's files, not the log again
    # Nothing new: no snapshot; more records: appended from each table's watermark.
    again = compact(spark, args)
    assert again.tables[0]["snapshot_id"] is None and again.tables[0]["records"] == 0
    append(log, clock, P1, 60, 40)
    (more,) = compact(spark, args).tables
    assert (more["records"], more["from_raw"]) == (40, 40)
    assert assert_each_record_once(log, args)[1] == rejects(120) + rejects(100)
    assert data_keys(log, args) == committed_keys(args)


def test_a_table_behind_the_raw_table_reads_the_log_below_the_raw_batch(
    spark: Any, log: AwsEnv, clock: Any
) -> None:
    """The raw table compacted without the declared table, then more records: the typed
    table's first batch reads what the job's raw commit holds (P1's 40 new records) from
    its files and everything below from the log's segments, each record once."""
    compact(spark, JobArgs.from_config(log.config))  # no declared table yet
    append(log, clock, P1, 60, 40)
    args = job_args(log)
    (run,) = compact(spark, args).tables
    assert (run["records"], run["from_raw"]) == (220, 40)
    typed, rejected = assert_each_record_once(log, args)
    assert (typed, rejected) == (220 - rejects(120) - rejects(100), rejects(120) + rejects(100))


def test_raw_files_short_of_the_chunk_commit_nothing(spark: Any, log: AwsEnv) -> None:
    """A raw file this job committed lacks a record of the chunk it is read for: the typed
    run fails naming the partition and commits neither table (never a watermark past a
    record it did not read)."""
    args = job_args(log)
    report = CompactionReport(run_id="r" * 16)
    raw = compact_raw(spark, log.clients, args, open_table(args.lake(), create=True), report)
    assert raw is not None and raw.ranges == {P0: (0, 120), P1: (0, 60)}
    (damaged,) = [f["file_key"] for f in raw.files if f["partition_id"] == P0]
    body = log.clients.s3.get_object(Bucket=raw.bucket, Key=damaged)["Body"].read()
    rows = pq.read_table(pa.BufferReader(body))
    short = rows.filter(pc.not_equal(rows.column("seq"), 77))
    log.clients.s3.put_object(Bucket=raw.bucket, Key=damaged, Body=parquet_bytes(short, EVENTS))
    with pytest.raises(Exception, match=f"{P0}: the raw table's files hold 119 rows"):
        compact_typed(spark, log.clients, args, DECLARED.tables[0], "r" * 16, raw)
    assert [t.current_snapshot() for t in tables(args).open(create=False)] == [None, None]


def test_a_race_lost_on_the_dead_letter_table_commits_nothing(spark: Any, log: AwsEnv) -> None:
    """Run A writes its files; run B runs whole meanwhile; A's dead-letter commit is stale:
    A commits nothing and removes its files."""
    args = job_args(log)
    where = tables(args)
    reports: list[TypedReport] = []

    def write_then_race(plans: Any, marks: Any) -> Any:
        written = write_typed(spark, args, where, plans, marks, "a" * 16)
        reports.append(compact_typed(spark, log.clients, args, where.declared, "b" * 16))
        return written

    lost = run_typed(log.clients, args, where, "a" * 16, write_then_race)
    (won,) = reports
    assert lost.conflicts and lost.snapshot_id is None and lost.rejected_snapshot_id is None
    assert won.snapshot_id is not None and won.rejected > 0
    assert_each_record_once(log, args)
    assert data_keys(log, args) == committed_keys(args)  # the loser's files are gone


def test_a_race_lost_on_the_typed_table_keeps_the_dead_letter_commit(
    spark: Any, log: AwsEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Run B runs whole between A's dead-letter commit and A's typed commit: B skips the
    rejects A committed, A's typed commit is stale; each record still lands once."""
    args = job_args(log)
    where = tables(args)
    real_append = typed_module.append
    reports: list[TypedReport] = []

    def race_before_the_typed_commit(table: Any, batch: Any) -> Any:
        if batch.run_id == "a" * 16 and table.name()[-1] == "orders" and not reports:
            reports.append(compact_typed(spark, log.clients, args, where.declared, "b" * 16))
        return real_append(table, batch)

    monkeypatch.setattr(typed_module, "append", race_before_the_typed_commit)
    lost = compact_typed(spark, log.clients, args, where.declared, "a" * 16)
    (won,) = reports
    assert lost.rejected_snapshot_id is not None and lost.snapshot_id is None and lost.conflicts
    assert won.rejected == 0 and won.snapshot_id is not None  # A's rejects were skipped
    assert_each_record_once(log, args)
    assert data_keys(log, args) == committed_keys(args)


def test_a_crash_between_the_two_commits_then_rerun_lands_each_record_once(
    spark: Any, log: AwsEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    args = job_args(log)
    where = tables(args)
    real_append = typed_module.append

    def crash_before_the_typed_commit(table: Any, batch: Any) -> Any:
        if table.name()[-1] == "orders":
            raise SystemExit("the run dies after its dead-letter commit")
        return real_append(table, batch)

    monkeypatch.setattr(typed_module, "append", crash_before_the_typed_commit)
    with pytest.raises(SystemExit):
        compact_typed(spark, log.clients, args, where.declared, "c" * 16)
    typed, rejected = where.open(create=False)
    assert typed.current_snapshot() is None
    assert table_watermarks(rejected)  # the rejects are in
    monkeypatch.setattr(typed_module, "append", real_append)

    rerun = compact_typed(spark, log.clients, args, where.declared, "d" * 16)
    assert rerun.rejected == 0 and rerun.typed > 0  # the rejects already in were skipped
    assert_each_record_once(log, args)


def test_a_batch_with_nothing_typed_still_moves_the_watermark(
    spark: Any, aws: AwsEnv, clock: Any
) -> None:
    records = [
        IncomingRecord("k", b"oops", str(SEQUENCE_BASE + i), 1_700_000_000_000) for i in range(3)
    ]
    writer_for(aws, clock).append(P0, records)
    args = job_args(aws)
    report = compact_typed(spark, aws.clients, args, DECLARED.tables[0], "e" * 16)
    assert (report.typed, report.rejected) == (0, 3)
    typed, _ = tables(args).open(create=False)
    assert table_watermarks(typed) == {P0: 3}
    assert typed.scan().to_arrow().num_rows == 0
    assert compact_typed(spark, aws.clients, args, DECLARED.tables[0], "f" * 16).records == 0


def test_a_batch_seen_short_commits_nothing(spark: Any, log: AwsEnv) -> None:
    """A task's output lost (its records seen by no stats row): the run refuses to commit
    either table, rather than move a watermark past records it never wrote."""
    args = job_args(log)
    where = tables(args)

    def lose_a_task(plans: Any, marks: Any) -> list[dict[str, Any]]:
        stats = write_typed(spark, args, where, plans, marks, "g" * 16)
        lost = max(s["first_seq"] for s in stats if s["kind"] == "seen" and s["partition_id"] == P0)
        return [s for s in stats if s["partition_id"] != P0 or s["first_seq"] < lost]

    with pytest.raises(CompactionError, match=f"{P0}: batch"):
        run_typed(log.clients, args, where, "g" * 16, lose_a_task)
    assert [t.current_snapshot() for t in where.open(create=False)] == [None, None]


def test_lake_query_reads_a_typed_table_and_its_dead_letter_table(
    spark: Any, log: AwsEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    args = job_args(log)
    compact_typed(spark, log.clients, args, DECLARED.tables[0], "h" * 16)
    monkeypatch.setenv(C.ENV_LAKE_TABLES, args.lake_tables)  # as the trigger's environment

    def rows(*options: str) -> list[dict[str, Any]]:
        result = run_cli(log, "lake", "query", "--json", *options)
        assert result.exit_code == 0, result.output
        return [json.loads(line) for line in result.output.splitlines()]

    found = rows("--table", "orders", "--where", "n=12", "--partition", P0)
    assert [(r["seq"], r["orderId"], r["amount"], r["n"]) for r in found] == [
        (12, "o-12", "12.25", 12)
    ]
    refused = rows("--table", "orders_rejected", "--limit", "1000")
    assert {r["errorField"] for r in refused} == {f for _, f in MALFORMED}
    assert len(refused) == rejects(120) + rejects(60)
    text = run_cli(log, "lake", "query", "--table", "orders_rejected", "--limit", "2")
    assert text.exit_code == 0 and "errorReason" in text.output and "(2 rows)" in text.output
    for options, message in (
        (("--table", "nowhere"), "no declared lake table nowhere (orders)"),
        (("--table", "orders", "--where", "n=x"), "not a long"),
        (("--table", "orders", "--fresh"), "not with --table"),
    ):
        result = run_cli(log, "lake", "query", *options)
        assert result.exit_code != 0 and message in result.output, result.output


def test_maintenance_removes_a_crashed_runs_files_from_both_tables(
    spark: Any, log: AwsEnv, clock: Any
) -> None:
    args = job_args(log)
    where = tables(args)
    compact_typed(spark, log.clients, args, where.declared, "i" * 16)
    append(log, clock, P1, 60, 40)
    typed, rejected = where.open(create=False)
    plans = plan_batches(log.clients, args, table_watermarks(typed), list_partitions(log))
    write_typed(spark, args, where, plans, table_watermarks(rejected), "j" * 16)  # then dies
    assert data_keys(log, args) > committed_keys(args)

    later = datetime.now(UTC) + timedelta(hours=args.orphan_grace_hours + 1)
    reports = run_declared_maintenance(args, later)
    assert set(reports) == {where.typed.table, where.rejected.table}
    assert all(r.removed_files for r in reports.values())
    assert data_keys(log, args) == committed_keys(args)
    compact_typed(spark, log.clients, args, where.declared, "k" * 16)
    assert_each_record_once(log, args)


def test_a_table_declared_after_the_log_was_trimmed_starts_at_the_trim_horizon(
    spark: Any, log: AwsEnv
) -> None:
    """Retention trimmed a partition before the table was declared: the table starts at
    the horizon (its report counts the records it never saw), holds every record above it
    once, and its watermark reaches the head, so it is caught up like any other."""
    compact(spark, JobArgs.from_config(log.config))  # the raw table holds everything
    PartitionsTable(log.clients, log.config.tables).advance_horizon(P0, 50)
    for start in (0, 25):  # the bucket's lifecycle expired the trimmed segments
        log.clients.s3.delete_object(Bucket=log.config.bucket, Key=segment_key(P0, start))
    args = job_args(log)

    (run,) = compact(spark, args).tables

    assert (run["trimmed"], run["records"]) == ({P0: 50}, 70 + 60)
    typed_table, rejected_table = tables(args).open(create=False)
    rows = typed_table.scan().to_arrow().to_pylist()
    rows += rejected_table.scan().to_arrow().to_pylist()
    seen = Counter((r["partition_id"], r["seq"]) for r in rows)
    expected = [(P0, seq) for seq in range(50, 120)] + [(P1, seq) for seq in range(60)]
    assert sorted(seen) == sorted(expected) and set(seen.values()) == {1}
    assert table_watermarks(typed_table) == {P0: 120, P1: 60}
    again = compact(spark, args).tables[0]
    assert (again["records"], again["trimmed"], again["snapshot_id"]) == (0, {}, None)
