"""An upsert table through typed compaction (``shardlog.spark.typed`` + ``shardlog.lake.upsert``)
against the embedded AWS, Spark in local mode: the table holds, per key, the newest record
of the log that fits, by the documented order; refused records touch only the dead-letter
table; a race lost through the job applies nothing twice and leaves no staged file."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from shardlog.format import IncomingRecord
from shardlog.lake.commit import table_watermarks
from shardlog.lake.declared import parse_lake_tables
from shardlog.lake.files import DATA_DIR
from shardlog.local.kinesis_fidelity import SEQUENCE_BASE
from shardlog.spark.backfill import BackfillError, run_backfill
from shardlog.spark.jobs import JobArgs
from shardlog.spark.typed import TypedReport, TypedTables, compact_typed, run_typed, write_typed
from spark_jobs.compact import compact
from tests.spark.helpers import log_rows
from tests.support.aws import AwsEnv
from tests.support.factories import end_partition, register_partition, writer_for

P0, P1, P2 = "shardId-000000000000", "shardId-000000000001", "shardId-000000000002"
T0 = 1_700_000_000_000
DECLARED = parse_lake_tables(
    [
        {
            "name": "latest",
            "schema": {
                "type": "object",
                "required": ["orderId"],
                "properties": {"orderId": {"type": "string"}, "n": {"type": "integer"}},
            },
            "mode": "upsert",
            "key": "orderId",
        }
    ],
    "test",
)
KEYS = 5


def payload(i: int) -> bytes:
    """Record i of key o-(i % 5); every 7th is refused (its n is not an integer)."""
    n: object = "seven" if i % 7 == 3 else i
    return json.dumps({"orderId": f"o-{i % KEYS}", "n": n}).encode()


def append(aws: AwsEnv, clock: Any, partition: str, first: int, count: int, at: int) -> None:
    records = [
        IncomingRecord(f"k{i}", payload(i), str(SEQUENCE_BASE + i), at + i - first)
        for i in range(first, first + count)
    ]
    writer_for(aws, clock, segment_max_records=20).append(partition, records)


def job_args(aws: AwsEnv) -> JobArgs:
    return replace(JobArgs.from_config(aws.config), lake_tables=json.dumps(DECLARED.to_json()))


def tables(args: JobArgs) -> TypedTables:
    return TypedTables.beside(args.lake(), DECLARED.tables[0])


def expected(aws: AwsEnv) -> dict[str, tuple[str, int]]:
    """The oracle, from the log alone: per key, the (partition, seq) of the highest
    (clock, partition, seq) among the records that fit; clock = running max of arrival."""
    best: dict[str, tuple[int, str, int]] = {}
    clocks: dict[str, int] = {}
    for partition, seq, _key, data, _kseq, ms in sorted(log_rows(aws)):
        body = json.loads(data)
        clocks[partition] = max(clocks.get(partition, 0), ms)
        if isinstance(body["n"], int):
            best[body["orderId"]] = max(
                best.get(body["orderId"], (0, "", -1)), (clocks[partition], partition, seq)
            )
    return {k: (p, s) for k, (_, p, s) in best.items()}


def held(args: JobArgs) -> dict[str, tuple[str, int]]:
    typed, _ = tables(args).open(create=False)
    rows = typed.scan().to_arrow().to_pylist()
    assert len({r["order_id"] for r in rows}) == len(rows), "a key twice"
    for row in rows:
        assert row["n"] == row["seq"] or row["partition_id"] == P1  # the payload's value
    return {r["order_id"]: (r["partition_id"], r["seq"]) for r in rows}


def data_keys(aws: AwsEnv, args: JobArgs) -> set[str]:
    settings = tables(args).typed
    pages = aws.clients.s3.get_paginator("list_objects_v2").paginate(
        Bucket=settings.bucket, Prefix=f"{settings.key_prefix}{DATA_DIR}"
    )
    return {o["Key"] for page in pages for o in page.get("Contents", [])}


def staged_keys(aws: AwsEnv, args: JobArgs) -> set[str]:
    """The executors' typed files left over (the fold's own are named ``upsert-...``)."""
    return {k for k in data_keys(aws, args) if "/upsert-" not in k}


def committed_keys(args: JobArgs) -> set[str]:
    typed, _ = tables(args).open(create=False)
    bucket = tables(args).typed.bucket
    return {t.file.file_path.removeprefix(f"s3://{bucket}/") for t in typed.scan().plan_files()}


def test_the_table_holds_the_newest_record_per_key_that_fits(
    spark: Any, aws: AwsEnv, clock: Any
) -> None:
    args = job_args(aws)
    append(aws, clock, P0, 0, 40, T0)
    report = compact(spark, args)
    (run,) = report.tables
    assert held(args) == expected(aws) and len(held(args)) == KEYS
    assert run["rejected"] == sum(1 for i in range(40) if i % 7 == 3)
    assert run["upsert"]["keys"] == KEYS and run["upsert"]["files_rewritten"] == 0
    # Later records, their arrival times before the earlier ones': the higher seq wins.
    append(aws, clock, P0, 40, 12, T0 - 60_000)
    # Another partition with the same JSON keys, later in time: its records win.
    append(aws, clock, P1, 100, 3, T0 + 60_000)
    second = compact(spark, args).tables[0]
    assert second["records"] == 15 and second["upsert"]["files_rewritten"] == 1
    assert held(args) == expected(aws)
    assert {held(args)[f"o-{i % KEYS}"][0] for i in (100, 102)} == {P1}  # 101 is refused:
    assert held(args)["o-1"][0] == P0  # its key keeps its newest record that fits
    typed, rejected = tables(args).open(create=False)
    assert table_watermarks(typed) == {P0: 52, P1: 3}
    refused = {(r["partition_id"], r["seq"]) for r in rejected.scan().to_arrow().to_pylist()}
    assert refused == {(P0, i) for i in range(52) if i % 7 == 3} | {(P1, 1)}  # record 101
    assert staged_keys(aws, args) == set() and committed_keys(args) <= data_keys(aws, args)
    # Nothing new: no snapshot.
    assert compact(spark, args).tables[0]["snapshot_id"] is None


def test_a_race_lost_through_the_job_applies_nothing_twice(
    spark: Any, aws: AwsEnv, clock: Any
) -> None:
    """Run A writes its staged files; run B runs whole meanwhile; A's upsert finds its
    batch applied, commits nothing and removes its staged files."""
    args = job_args(aws)
    append(aws, clock, P0, 0, 30, T0)
    where = tables(args)
    reports: list[TypedReport] = []

    def write_then_race(plans: Any, marks: Any) -> Any:
        written = write_typed(spark, args, where, plans, marks, "a" * 16)
        reports.append(compact_typed(spark, aws.clients, args, where.declared, "b" * 16))
        return written

    lost = run_typed(aws.clients, args, where, "a" * 16, write_then_race)
    (won,) = reports
    assert lost.conflicts and lost.snapshot_id is None and won.snapshot_id is not None
    typed, _ = where.open(create=False)
    assert len(typed.snapshots()) == 1
    assert held(args) == expected(aws)
    assert staged_keys(aws, args) == set()  # the loser's and the winner's


@pytest.mark.parametrize("mode", ["append", "upsert"])
def test_the_declared_mode_shows_in_the_tables_columns(spark: Any, aws: AwsEnv, mode: str) -> None:
    declared = DECLARED.tables[0]
    if mode == "append":
        declared = declared.model_copy(update={"mode": "append", "key": None})
    typed, _ = TypedTables.beside(job_args(aws).lake(), declared).open()
    assert ("log_clock" in typed.schema().column_names) == (mode == "upsert")


def test_backfill_refuses_an_upsert_table(aws: AwsEnv) -> None:
    args = job_args(aws)
    with pytest.raises(BackfillError, match="is an upsert table: backfill re-derives append"):
        run_backfill(aws.clients, args, tables(args), "r" * 16, lambda plans, marks: [])


def test_keyed_by_partition_key_a_child_waits_for_its_parent_then_wins(
    spark: Any, aws: AwsEnv, clock: Any
) -> None:
    """A split: the key's last records in the parent arrived (by Kinesis' clock) after its
    first in the child. The child is read only once the parent is ENDED and wholly in the
    table, and its record wins: the order in which the key's records were produced."""
    by_key = DECLARED.tables[0].model_copy(update={"name": "by_key", "key": "partitionKey"})
    args = job_args(aws)

    def produce(partition: str, first: int, count: int, at: int) -> None:
        records = [
            IncomingRecord("k", json.dumps({"orderId": "o", "n": i}).encode(),
                           str(SEQUENCE_BASE + i), at + i - first)
            for i in range(first, first + count)
        ]  # fmt: skip
        writer_for(aws, clock).append(partition, records)

    produce(P0, 0, 3, T0 + 9_000)
    produce(P2, 10, 2, T0)
    register_partition(aws, P2, (P0,))
    first = compact_typed(spark, aws.clients, args, by_key, "h" * 16)
    assert first.waiting == [P2] and first.records == 3  # P0 is still open
    typed, _ = TypedTables.beside(args.lake(), by_key).open(create=False)
    assert [(r["partition_id"], r["n"]) for r in typed.scan().to_arrow().to_pylist()] == [(P0, 2)]
    end_partition(aws, P0)
    second = compact_typed(spark, aws.clients, args, by_key, "i" * 16)
    assert second.waiting == [] and second.records == 2
    rows = typed.refresh().scan().to_arrow().to_pylist()
    assert [(r["partition_id"], r["n"], r["log_clock"]) for r in rows] == [(P2, 11, T0 + 9_003)]
