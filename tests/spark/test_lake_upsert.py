"""The upsert commit (``shardlog.lake.upsert``) with plain pyiceberg and pyarrow on the
embedded AWS (Glue and S3 of moto's server over HTTP): the newest record per key, one
snapshot per run, exactly once through lost answers and races."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.table import Table

import shardlog.lake.upsert as lake_upsert
from shardlog.lake.commit import RUN_PROPERTY, table_watermarks
from shardlog.lake.declared import LOG_CLOCK, LakeTableDeclaration, parse_lake_tables
from shardlog.lake.exceptions import LakeCommitUnknownError, LakeConflictError
from shardlog.lake.upsert import (
    CLOCKS_PROPERTY,
    LakeUpsert,
    UpsertResult,
    UpsertTarget,
    table_clocks,
    upsert,
)
from shardlog.spark.typed import TypedTables
from tests.spark.helpers import unique_lake
from tests.support.aws import AwsEnv
from tests.support.faults import LostAnswer

P0, P1, P2 = "shardId-000000000000", "shardId-000000000001", "shardId-000000000002"
DAY_MS = 86_400_000
T0 = 1_700_000_000_000


def declared(key: str = "orderId") -> LakeTableDeclaration:
    schema = {
        "type": "object",
        "required": ["orderId"],
        "properties": {"orderId": {"type": "string"}, "n": {"type": "integer"}},
    }
    table = {"name": "latest", "schema": schema, "mode": "upsert", "key": key}
    return parse_lake_tables([table], "test").tables[0]


Record = tuple[str, int, str, int, int]  # partition, seq, key, arrival ms, n


class Upserts:
    """One upsert table and the runs that fold batches into it."""

    def __init__(self, aws: AwsEnv, declaration: LakeTableDeclaration) -> None:
        self.declared = declaration
        self.tables = TypedTables.beside(unique_lake(aws), declaration)
        self.tables.open()  # created, as typed compaction creates it
        self.target = UpsertTarget(self.tables.typed, declaration.table_schema(), aws.clients.s3)

    def table(self) -> Table:
        return self.tables.open(create=False)[0]

    def batch(
        self,
        ranges: dict[str, tuple[int, int]],
        records: list[Record],
        parents: dict[str, tuple[str, ...]] | None = None,
    ) -> LakeUpsert:
        rows = [
            {"partition_id": p, "seq": s, "partition_key": k, "record_id": None,
             "arrival_time": datetime.fromtimestamp(ms / 1000, UTC), "order_id": k, "n": n}
            for p, s, k, ms, n in records
        ]  # fmt: skip
        table = pa.Table.from_pylist(rows, schema=self.declared.typed_schema().arrow())
        key = self.declared.key_column()
        return LakeUpsert(ranges, table, key, parents or {}, uuid.uuid4().hex[:16])

    def run(self, table: Table | None = None, **batch: Any) -> UpsertResult:
        return upsert(table or self.table(), self.target, self.batch(**batch))

    def newest(self) -> dict[str, tuple[str, int, int]]:
        """Per key: (partition, seq, n) of its row; each key once."""
        rows = self.table().scan().to_arrow().to_pylist()
        keys = [r["order_id"] for r in rows]
        assert len(keys) == len(set(keys)), "a key twice in the upsert table"
        return {r["order_id"]: (r["partition_id"], r["seq"], r["n"]) for r in rows}


@pytest.fixture
def lake(aws: AwsEnv) -> Upserts:
    return Upserts(aws, declared())


def test_the_newest_record_per_key_wins_across_runs_in_one_snapshot_each(lake: Upserts) -> None:
    first = lake.run(
        ranges={P0: (0, 3)},
        records=[(P0, 0, "a", T0, 1), (P0, 1, "b", T0 + 1, 2), (P0, 2, "a", T0 + 2, 3)],
    )
    assert lake.newest() == {"a": (P0, 2, 3), "b": (P0, 1, 2)}
    assert (first.keys, first.files_rewritten, first.rows) == (2, 0, 2)
    # The arrival time steps back at seq 3: within a partition the higher seq still wins.
    lake.run(ranges={P0: (3, 5)}, records=[(P0, 3, "a", T0 - 500, 4), (P0, 4, "c", T0, 5)])
    assert lake.newest() == {"a": (P0, 3, 4), "b": (P0, 1, 2), "c": (P0, 4, 5)}
    # Another partition (a JSON-field key may be in any): b's record there arrived before
    # P0's clock, so P0's stays; then a later one of P1 wins.
    lake.run(ranges={P1: (0, 1)}, records=[(P1, 0, "b", T0 - 1, 6)])
    assert lake.newest()["b"] == (P0, 1, 2)
    lake.run(ranges={P1: (1, 2)}, records=[(P1, 1, "b", T0 + 9, 7)])
    assert lake.newest()["b"] == (P1, 1, 7)
    table = lake.table()
    assert len(table.snapshots()) == 4
    assert [s.summary.operation.value for s in table.snapshots()] == ["append"] + 3 * [  # type: ignore[union-attr]
        "overwrite"
    ]
    assert table_watermarks(table) == {P0: 5, P1: 2}
    assert table_clocks(table) == {P0: T0 + 2, P1: T0 + 9}
    clocks = {r["order_id"]: r[LOG_CLOCK] for r in table.scan().to_arrow().to_pylist()}
    assert clocks == {"a": T0 + 2, "b": T0 + 9, "c": T0 + 2}


def test_a_batch_of_no_rows_moves_the_watermarks_alone(lake: Upserts) -> None:
    lake.run(ranges={P0: (0, 1)}, records=[(P0, 0, "a", T0, 1)])
    result = lake.run(ranges={P0: (1, 4)}, records=[])  # every record filtered or rejected
    assert result.files_written == 0 and table_watermarks(lake.table()) == {P0: 4}
    assert lake.newest() == {"a": (P0, 0, 1)}


def test_a_key_moves_to_the_child_of_a_split_and_the_child_wins(aws: AwsEnv) -> None:
    """Keyed by partition key: after a split the key's records go to the child, whose
    clock starts past its parent's, so the child's record wins even though Kinesis gave it
    an earlier arrival time."""
    lake = Upserts(aws, declared("partitionKey"))
    lake.run(ranges={P0: (0, 1)}, records=[(P0, 0, "k", T0 + 9000, 1)])
    lake.run(ranges={P2: (0, 1)}, records=[(P2, 0, "k", T0, 2)], parents={P2: (P0,)})
    assert lake.newest() == {"k": (P2, 0, 2)}
    assert table_clocks(lake.table()) == {P0: T0 + 9000, P2: T0 + 9001}


def test_files_without_a_key_of_the_batch_stay(lake: Upserts) -> None:
    lake.run(
        ranges={P0: (0, 2)}, records=[(P0, 0, "a", T0, 1), (P0, 1, "b", T0 + DAY_MS, 2)]
    )  # two arrival days: two files
    before = {t.file.file_path for t in lake.table().scan().plan_files()}
    result = lake.run(ranges={P0: (2, 3)}, records=[(P0, 2, "b", T0 + DAY_MS + 1, 3)])
    after = {t.file.file_path for t in lake.table().scan().plan_files()}
    assert (result.files_read, result.files_rewritten, result.files_written) == (2, 1, 1)
    assert len(before & after) == 1 and len(after) == 2  # a's file untouched
    assert lake.newest() == {"a": (P0, 0, 1), "b": (P0, 2, 3)}


def test_a_lost_answer_is_recognised_and_a_rerun_changes_nothing(lake: Upserts) -> None:
    lake.run(ranges={P0: (0, 2)}, records=[(P0, 0, "a", T0, 1), (P0, 1, "b", T0, 2)])
    table = lake.table()
    lost = LostAnswer(table.catalog.glue, "UpdateTable")  # type: ignore[attr-defined]
    lost.arm(1)
    batch = lake.batch(ranges={P0: (2, 3)}, records=[(P0, 2, "a", T0 + 1, 3)])
    result = upsert(table, lake.target, batch)
    assert (lost.lost, lost.resent, result.attempts) == (1, 1, 1)
    landed = lake.table().current_snapshot()
    assert landed is not None and landed.summary[RUN_PROPERTY] == batch.run_id  # type: ignore[index]
    assert lake.newest() == {"a": (P0, 2, 3), "b": (P0, 1, 2)}
    snapshots = len(lake.table().snapshots())
    with pytest.raises(LakeConflictError, match=f"{P0} is at 3, not 2"):  # the run again
        lake.run(ranges={P0: (2, 3)}, records=[(P0, 2, "a", T0 + 1, 3)])
    assert len(lake.table().snapshots()) == snapshots
    assert lake.newest() == {"a": (P0, 2, 3), "b": (P0, 1, 2)}
    # Its own retry (the same run id) finds its commit and does not apply it again.
    again = upsert(lake.table(), lake.target, batch)
    assert again.snapshot_id == result.snapshot_id and again.attempts == 0


def test_two_racing_runs_apply_each_update_once(
    lake: Upserts, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both runs fold the same batch from the same snapshot; the first commits between the
    second's read and its commit. Glue refuses the second's commit (a stale base), it reads
    again, finds the batch applied and commits nothing."""
    lake.run(ranges={P0: (0, 1)}, records=[(P0, 0, "a", T0, 1)])
    first, second = lake.table(), lake.table()
    records = [(P0, 1, "a", T0 + 1, 2), (P0, 2, "b", T0 + 2, 3)]
    batch_a = lake.batch(ranges={P0: (1, 3)}, records=records)
    batch_b = lake.batch(ranges={P0: (1, 3)}, records=records)
    original, calls = lake_upsert.table_clocks, []

    def racing(table: Table) -> dict[str, int]:
        calls.append(table)
        if len(calls) == 1:
            upsert(first, lake.target, batch_a)  # lands after b read the table
        return original(table)

    monkeypatch.setattr(lake_upsert, "table_clocks", racing)
    with pytest.raises(LakeConflictError, match=f"{P0} is at 3, not 1"):
        upsert(second, lake.target, batch_b)
    table = lake.table()
    runs = [s.summary[RUN_PROPERTY] for s in table.snapshots()]  # type: ignore[index]
    assert runs[1:] == [batch_a.run_id] and len(runs) == 2
    assert lake.newest() == {"a": (P0, 1, 2), "b": (P0, 2, 3)}
    current = table.current_snapshot()
    assert current is not None and current.summary is not None
    clocks = current.summary.additional_properties[CLOCKS_PROPERTY]
    assert json.loads(clocks) == {P0: T0 + 2}


def test_an_append_table_refuses_an_upsert_declaration_and_back(aws: AwsEnv) -> None:
    """Switching a table's mode is refused at open (its rows mean something else): declare a
    new table under another name."""
    upserting = declared()
    appending = parse_lake_tables(
        [{"name": "latest", "schema": upserting.model_dump(by_alias=True)["schema"]}], "test"
    ).tables[0]
    lake = unique_lake(aws)
    TypedTables.beside(lake, appending).open()
    with pytest.raises(Exception, match="missing column log_clock"):
        TypedTables.beside(lake, upserting).open()
    other = unique_lake(aws)
    TypedTables.beside(other, upserting).open()
    with pytest.raises(Exception, match="unexpected required column log_clock"):
        TypedTables.beside(other, appending).open()


def test_an_outcome_that_cannot_be_found_out_is_unknown(lake: Upserts) -> None:
    """The commit's answers are lost and then the catalog cannot be read: the upsert says
    the outcome is unknown (not a lost race: the caller must keep its files); the next
    read finds the commit landed, once."""
    lake.run(ranges={P0: (0, 1)}, records=[(P0, 0, "a", T0, 1)])
    table = lake.table()
    glue = table.catalog.glue  # type: ignore[attr-defined]
    lost_reads, lost = LostAnswer(glue, "GetTable"), LostAnswer(glue, "UpdateTable")
    lost.arm(100, between=lambda: lost_reads.arm(1000))
    batch = lake.batch(ranges={P0: (1, 2)}, records=[(P0, 1, "a", T0 + 1, 2)])
    with pytest.raises(LakeCommitUnknownError, match="is unknown") as unknown:
        upsert(table, lake.target, batch)
    assert not isinstance(unknown.value, LakeConflictError)
    lost_reads.disarm()
    assert lake.newest() == {"a": (P0, 1, 2)}
    assert upsert(lake.table(), lake.target, batch).attempts == 0  # found: its own snapshot
