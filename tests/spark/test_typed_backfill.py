"""Schema evolution and backfill of a declared table against the embedded AWS
(``shardlog.lake.evolution``, ``shardlog.lake.replace``, ``shardlog.spark.backfill``).

A table compacted under declaration V1 is redeclared as V2 (a property added, a decimal
widened): compaction evolves the schema, and a backfill re-derives every row below the
watermark from the log, so each record is once in the typed table or its dead-letter
table, with V2's values and fate, even when a compaction commits in the middle.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import replace
from typing import Any

import pytest

import shardlog.spark.backfill as backfill_module
from shardlog import constants as C
from shardlog.dal.partitions import PartitionsTable
from shardlog.format import IncomingRecord
from shardlog.lake.commit import table_watermarks
from shardlog.lake.declared import LakeTableDeclaration, parse_lake_tables
from shardlog.lake.evolution import LakeEvolutionError
from shardlog.local.kinesis_fidelity import SEQUENCE_BASE
from shardlog.spark.backfill import BackfillReport, run_backfill
from shardlog.spark.jobs import JobArgs
from shardlog.spark.typed import TypedTables, compact_typed, write_typed
from tests.spark.helpers import dying_between_the_typed_commits, typed_rows_once
from tests.support.aws import AwsEnv
from tests.support.cli import run_cli
from tests.support.factories import writer_for

P0, P1 = "shardId-000000000000", "shardId-000000000001"
V1_PROPERTIES: dict[str, Any] = {
    "orderId": {"type": "string"},
    "amount": {"type": "number", "format": "decimal", "precision": 4, "scale": 2},
    "n": {"type": "integer"},
}
V2_PROPERTIES: dict[str, Any] = {
    **V1_PROPERTIES,
    "amount": {"type": "number", "format": "decimal", "precision": 10, "scale": 2},  # widened
    "couponPct": {"type": "integer"},  # added, optional
}


def declaration(properties: dict[str, Any]) -> LakeTableDeclaration:
    schema = {"type": "object", "required": ["orderId"], "properties": properties}
    return parse_lake_tables([{"name": "orders", "schema": schema}], "test").tables[0]


V1, V2 = declaration(V1_PROPERTIES), declaration(V2_PROPERTIES)


def payload(i: int) -> bytes:
    """i % 10: 3 refused by both; 5 refused by V1 only (amount past decimal(4,2)); 7 refused
    by V2 only (couponPct not an integer); else typed by both, couponPct on even i."""
    if i % 10 == 3:
        return b"not json"
    body: dict[str, Any] = {"orderId": f"o-{i}", "amount": 1.25, "n": i}
    if i % 10 == 5:
        body["amount"] = 123.45
    elif i % 10 == 7:
        body["couponPct"] = "ten"
    elif i % 2 == 0:
        body["couponPct"] = i % 50
    return json.dumps(body).encode()


def v2_fate(i: int) -> str | None:
    """The field V2 refuses record i for; None: typed."""
    return {3: "(payload)", 7: "couponPct"}.get(i % 10)


def append(aws: AwsEnv, clock: Any, partition: str, first: int, count: int) -> None:
    records = [
        IncomingRecord(f"k{i % 3}", payload(i), str(SEQUENCE_BASE + i), 1_700_000_000_000 + i)
        for i in range(first, first + count)
    ]
    writer_for(aws, clock, segment_max_records=20).append(partition, records)


def job_args(aws: AwsEnv, declared: LakeTableDeclaration) -> JobArgs:
    tables = json.dumps([declared.model_dump(by_alias=True, exclude_defaults=True)])
    return replace(JobArgs.from_config(aws.config), lake_tables=tables)


def tables(aws: AwsEnv, declared: LakeTableDeclaration) -> TypedTables:
    return TypedTables.beside(job_args(aws, declared).lake(), declared)


def compact(spark: Any, aws: AwsEnv, declared: LakeTableDeclaration, run_id: str) -> Any:
    return compact_typed(spark, aws.clients, job_args(aws, declared), declared, run_id)


def backfill(spark: Any, aws: AwsEnv, run_id: str, write: Any = None) -> BackfillReport:
    args, where = job_args(aws, V2), tables(aws, V2)

    def derive(plans: Any, marks: Any) -> Any:
        return write_typed(spark, args, where, plans, marks, run_id)

    return run_backfill(aws.clients, args, where, run_id, write or derive)


def assert_v2_exactly_once(aws: AwsEnv) -> None:
    """Every committed record once, typed or refused as V2 says, V2's values in each typed
    row (couponPct from its payload, null where the payload has none)."""
    typed_table, rejected_table = tables(aws, V2).open(create=False)
    typed, rejected, log = typed_rows_once(aws, typed_table, rejected_table)
    for row in typed:
        assert v2_fate(row["seq"]) is None, row
        body = json.loads(log[(row["partition_id"], row["seq"])][3])
        assert (row["n"], row["coupon_pct"]) == (body["n"], body.get("couponPct")), row
    assert {(r["seq"], r["error_field"]) for r in rejected} == {
        (r["seq"], v2_fate(r["seq"])) for r in rejected
    }
    assert all(v2_fate(r["seq"]) for r in rejected)
    assert table_watermarks(typed_table) == dict(Counter(k[0] for k in log))


@pytest.fixture
def compacted_under_v1(spark: Any, aws: AwsEnv, clock: Any) -> AwsEnv:
    append(aws, clock, P0, 0, 60)
    append(aws, clock, P1, 0, 40)
    report = compact(spark, aws, V1, "a" * 16)
    assert (report.typed, report.rejected) == (80, 20)  # i % 10 in (3, 5) refused
    return aws


@pytest.mark.parametrize("race", ["while deriving", "between the two swaps"])
def test_a_compaction_racing_the_backfill_lands_every_row_once(
    spark: Any,
    compacted_under_v1: AwsEnv,
    clock: Any,
    monkeypatch: pytest.MonkeyPatch,
    race: str,
) -> None:
    """A compaction commits both tables after the backfill read the watermarks (or after
    its dead-letter swap): the backfill's next attempt derives the delta and swaps again."""
    aws = compacted_under_v1
    args, where = job_args(aws, V2), tables(aws, V2)
    raced: list[Any] = []

    def compaction_once() -> None:
        if not raced:
            append(aws, clock, P0, 60, 30)
            raced.append(compact(spark, aws, V2, "e" * 16))

    def derive_then_race(plans: Any, marks: Any) -> Any:
        written = write_typed(spark, args, where, plans, marks, "f" * 16)
        if race == "while deriving":
            compaction_once()
        return written

    real_replace = backfill_module.replace

    def race_before_the_typed_swap(table: Any, batch: Any) -> Any:
        if race == "between the two swaps" and table.name()[-1] == "orders":
            compaction_once()
        return real_replace(table, batch)

    monkeypatch.setattr(backfill_module, "replace", race_before_the_typed_swap)
    report = run_backfill(aws.clients, args, where, "f" * 16, derive_then_race)
    assert raced and raced[0].records == 30 and raced[0].snapshot_id is not None
    again = compact(spark, aws, V2, "k" * 16)  # from the watermarks the backfill left
    assert_v2_exactly_once(aws)
    assert again.records == 0
    assert report.attempts == 2 and len(report.conflicts) == 1, report
    assert report.records == 100 + 30  # the delta derived once more, not the whole table


def test_an_incompatible_change_is_refused_then_an_added_column_is_backfilled_from_seq_0(
    spark: Any, compacted_under_v1: AwsEnv, clock: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    aws = compacted_under_v1
    narrowed = declaration(
        {
            **V1_PROPERTIES,
            "n": {"type": "string"},
            "amount": {**V1_PROPERTIES["amount"], "precision": 3},
        }
    )
    with pytest.raises(LakeEvolutionError, match="amount: decimal\\(4, 2\\) cannot become"):
        compact(spark, aws, narrowed, "g" * 16)
    monkeypatch.setenv(C.ENV_LAKE_TABLES, job_args(aws, narrowed).lake_tables)
    refused = run_cli(aws, "lake", "backfill", "--table", "orders")
    assert refused.exit_code == 2, refused.output
    (line,) = [x for x in refused.output.splitlines() if x.startswith("Error:")]
    assert "schema change refused: amount" in line and "n: long cannot become string" in line
    typed, _ = tables(aws, V1).open(create=False)
    assert str(typed.schema().find_field("n").field_type) == "long"  # nothing changed

    # V2: compaction evolves the schema and appends under V2; the old rows lack the column.
    append(aws, clock, P1, 40, 20)
    assert compact(spark, aws, V2, "b" * 16).records == 20
    typed.refresh()
    assert "coupon_pct" in typed.schema().column_names
    assert str(typed.schema().find_field("amount").field_type) == "decimal(10, 2)"
    old = [r for r in typed.scan().to_arrow().to_pylist() if r["partition_id"] == P0]
    assert old and all(r["coupon_pct"] is None for r in old)  # derived under V1

    monkeypatch.setenv(C.ENV_LAKE_TABLES, job_args(aws, V2).lake_tables)
    dry = run_cli(aws, "lake", "backfill", "--table", "orders", "--dry-run", "--json")
    assert dry.exit_code == 0, dry.output
    assert (json.loads(dry.output)["changes"], json.loads(dry.output)["records"]) == ([], 120)
    done = run_cli(aws, "lake", "backfill", "--table", "orders", "--json")
    assert done.exit_code == 0, done.output
    report = json.loads(done.output)
    assert (report["records"], report["attempts"], report["conflicts"]) == (120, 1, [])
    assert report["typed"] + report["rejected"] == 120
    assert_v2_exactly_once(aws)
    append(aws, clock, P0, 60, 20)  # compaction goes on from the same watermarks
    assert compact(spark, aws, V2, "d" * 16).records == 20
    assert_v2_exactly_once(aws)


def test_refusals_of_a_compaction_between_its_two_commits_survive_the_backfill(
    spark: Any, compacted_under_v1: AwsEnv, clock: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A compaction dies after its dead-letter commit (``W_R`` > ``W_T``): the backfill keeps
    those refusals (at or above ``W_T``), so the rerun skips them and each lands once."""
    aws = compacted_under_v1
    append(aws, clock, P0, 60, 30)
    with dying_between_the_typed_commits(monkeypatch), pytest.raises(SystemExit):
        compact(spark, aws, V2, "h" * 16)
    typed, rejected = tables(aws, V2).open(create=False)
    assert table_watermarks(rejected)[P0] == 90 > table_watermarks(typed)[P0] == 60

    report = backfill(spark, aws, "i" * 16)
    assert report.records == 100 and table_watermarks(rejected.refresh())[P0] == 90
    rerun = compact(spark, aws, V2, "j" * 16)
    assert rerun.records == 30 and rerun.rejected == 0  # the refusals kept were skipped
    assert_v2_exactly_once(aws)


def test_a_backfill_over_a_trimmed_log_is_refused_naming_the_partition(
    compacted_under_v1: AwsEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Retention trimmed P0 below rows the table holds: re-deriving from seq 0 would drop
    them in the swap, so the backfill (and its dry run) is one line, exit 2, and the table
    is unchanged."""
    aws = compacted_under_v1
    typed, _ = tables(aws, V1).open(create=False)
    before = typed.current_snapshot()
    PartitionsTable(aws.clients, aws.config.tables).advance_horizon(P0, 20)
    monkeypatch.setenv(C.ENV_LAKE_TABLES, job_args(aws, V2).lake_tables)
    for dry in ([], ["--dry-run"]):
        refused = run_cli(aws, "lake", "backfill", "--table", "orders", *dry)
        assert refused.exit_code == 2, refused.output
        (line,) = [x for x in refused.output.splitlines() if x.startswith("Error:")]
        assert f"retention trimmed the log ({P0} below seq 20)" in line, line
    typed.refresh()
    assert typed.current_snapshot() == before
