"""Latest by key without a catalog: the declaration's ``mode`` and ``key`` at and past their
edges, and the pure parts of ``shardlog.lake.upsert`` (the log clock, the newest row per key,
the fold, which partitions an upsert table may read)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
import pytest

from shardlog import constants as C
from shardlog.lake.declared import LOG_CLOCK, LakeDeclarationError, parse_lake_tables
from shardlog.lake.upsert import clocked, first_clock, fold, newest, ready
from shardlog.tables import PartitionInfo

SOURCE = "shardlog:lakeTables"
P0, P1, P2 = "shardId-000000000000", "shardId-000000000001", "shardId-000000000002"
SCHEMA = {
    "type": "object",
    "required": ["orderId", "customer"],
    "properties": {
        "orderId": {"type": "string"},
        "n": {"type": "integer"},
        "at": {"type": "string", "format": "date-time"},
        "customer": {
            "type": "object",
            "required": ["id"],
            "properties": {"id": {"type": "integer"}, "name": {"type": "string"}},
        },
    },
}


def declare(**extra: Any) -> Any:
    return parse_lake_tables([{"name": "orders", "schema": SCHEMA, **extra}], SOURCE).tables[0]


def refused(message: str, **extra: Any) -> None:
    with pytest.raises(LakeDeclarationError, match=message):
        declare(**extra)


def test_append_is_the_default_and_has_no_key() -> None:
    declared = declare()
    assert declared.mode == "append" and not declared.upsert and declared.key is None
    assert LOG_CLOCK not in declared.table_schema().names
    refused(r"\[0\]: key: only a table of mode upsert has a key", key="orderId")


@pytest.mark.parametrize(
    ("key", "column"),
    [("partitionKey", ("partition_key",)), ("orderId", ("order_id",)),
     ("customer.id", ("customer", "id"))],
)  # fmt: skip
def test_an_upsert_table_is_keyed_by_the_partition_key_or_a_required_property(
    key: str, column: tuple[str, ...]
) -> None:
    declared = declare(mode="upsert", key=key)
    assert declared.upsert and declared.key_column() == column
    schema = declared.table_schema()
    assert schema.names[-1] == LOG_CLOCK and schema.column(LOG_CLOCK).required
    assert schema.names[:-1] == declared.typed_schema().names  # the typed columns, as append
    assert declare(mode="upsert", key=key).model_dump(by_alias=True)["key"] == key


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"mode": "upsert"}, "key: mode upsert needs a key: partitionKey or a property path"),
        ({"mode": "merge", "key": "orderId"}, r"\[0\]\.mode: Input should be 'append' or 'upsert'"),
        ({"mode": "upsert", "key": "n"}, "key: n: n is not required"),
        (
            {"mode": "upsert", "key": "customer.name"},
            "key: customer.name: customer.name is not req",
        ),
        ({"mode": "upsert", "key": "nope"}, r"key: nope is not in the schema \(the payload has no"),
        ({"mode": "upsert", "key": "customer.x"}, r"\(customer has no property x\)"),
        ({"mode": "upsert", "key": "orderId.x"}, r"\(orderId has no property x\)"),
        (
            {"mode": "upsert", "key": "customer"},
            "key: customer is of type object: a key is a string or",
        ),
        ({"mode": "upsert", "key": "1x"}, "key: '1x' is neither partitionKey nor a property path"),
        ({"mode": "upsert", "key": ""}, r"\[0\]\.key: String should have at least 1 character"),
    ],
)
def test_a_bad_key_is_refused_naming_the_key(extra: dict[str, Any], message: str) -> None:
    refused(message, **extra)


def test_a_key_of_a_formatted_string_is_refused() -> None:
    schema = {**SCHEMA, "required": ["orderId", "customer", "at"]}
    with pytest.raises(LakeDeclarationError, match=r"key: at is of type string \(date-time\)"):
        parse_lake_tables([{"name": "o", "schema": schema, "mode": "upsert", "key": "at"}], SOURCE)


def test_the_key_path_length_at_and_past_its_limit() -> None:
    long_name = "k" * 64  # a property name's own limit
    schema = {
        "type": "object",
        "required": [long_name],
        "properties": {long_name: {"type": "string"}},
    }
    parse_lake_tables([{"name": "o", "schema": schema, "mode": "upsert", "key": long_name}], SOURCE)
    with pytest.raises(LakeDeclarationError, match=r"\.key: String should have at most 256"):
        declare(mode="upsert", key="a." * 128 + "b")  # 258 characters


def test_an_upsert_table_reserves_its_log_clock_column() -> None:
    schema = {
        "type": "object",
        "required": ["logClock"],
        "properties": {"logClock": {"type": "string"}},
    }
    declared = {"name": "o", "schema": schema}
    parse_lake_tables([declared], SOURCE)  # an append table may have such a property
    with pytest.raises(LakeDeclarationError, match=r"properties \['logClock'\] are an upsert"):
        parse_lake_tables([{**declared, "mode": "upsert", "key": "logClock"}], SOURCE)


# --- the order -------------------------------------------------------------------------------
def rows(*records: tuple[str, int, str, int, int]) -> pa.Table:
    """Typed rows: (partition, seq, key, arrival ms, value)."""
    return pa.table(
        {
            "partition_id": [r[0] for r in records],
            "seq": pa.array([r[1] for r in records], pa.int64()),
            "order_id": [r[2] for r in records],
            "arrival_time": pa.array(
                [datetime.fromtimestamp(r[3] / 1000, UTC) for r in records],
                pa.timestamp("us", tz="UTC"),
            ),
            "n": pa.array([r[4] for r in records], pa.int64()),
        }
    )


def values(table: pa.Table) -> dict[str, int]:
    return dict(
        zip(table.column("order_id").to_pylist(), table.column("n").to_pylist(), strict=True)
    )


def test_the_clock_never_goes_back_within_a_partition_so_the_higher_seq_wins() -> None:
    """Kinesis' approximate arrival time steps back at seq 2: the clock holds, and the later
    record of key a (seq 2) is the newest, not the one with the later arrival time."""
    batch, ends = clocked(
        rows((P0, 2, "a", 900, 3), (P0, 0, "a", 1000, 1), (P0, 1, "b", 950, 2)), {}
    )
    assert batch.column(LOG_CLOCK).to_pylist() == [1000, 1000, 1000]
    assert ends == {P0: 1000}
    assert values(newest(batch, ("order_id",))) == {"a": 3, "b": 2}


def test_a_partition_continues_from_its_clock_and_a_child_starts_past_its_parents() -> None:
    clocks = {P0: 5000, P1: 7000}
    assert first_clock(P0, clocks, ()) == 5000
    assert first_clock(P2, clocks, (P0, P1)) == 7001  # a merge: past both parents
    assert first_clock(P2, {}, (P0,)) == 0  # parents the table never read
    batch, ends = clocked(rows((P2, 0, "a", 10, 1)), {P2: 7001})
    assert batch.column(LOG_CLOCK).to_pylist() == [7001] and ends == {P2: 7001}


def test_across_unrelated_partitions_the_later_clock_wins_then_the_partition_then_the_seq() -> None:
    batch, _ = clocked(
        rows((P0, 0, "a", 2000, 1), (P1, 0, "a", 1000, 2), (P0, 1, "b", 2000, 3),
             (P1, 5, "b", 2000, 4)),
        {},
    )  # fmt: skip
    assert values(newest(batch, ("order_id",))) == {"a": 1, "b": 4}


def test_a_nested_key_groups_rows() -> None:
    table = pa.table(
        {
            "partition_id": [P0, P0, P0],
            "seq": pa.array([0, 1, 2], pa.int64()),
            LOG_CLOCK: pa.array([1, 2, 3], pa.int64()),
            "customer": [{"id": 7}, {"id": 8}, {"id": 7}],
        }
    )
    assert sorted(newest(table, ("customer", "id")).column("seq").to_pylist()) == [1, 2]


def test_the_fold_rewrites_only_files_holding_a_key_of_the_batch_and_keeps_a_newer_stored_row() -> (
    None
):
    stored_a, _ = clocked(rows((P1, 0, "a", 9000, 10), (P1, 1, "c", 9000, 30)), {})
    stored_b, _ = clocked(rows((P0, 0, "x", 100, 40)), {})
    batch, _ = clocked(
        rows((P0, 1, "a", 500, 11), (P0, 2, "d", 600, 12), (P0, 3, "c", 9500, 31)), {P0: 100}
    )
    result = fold([("file-a", stored_a), ("file-b", stored_b)], batch, ("order_id",))
    assert result.replaced == ["file-a"] and result.files_read == 2
    # a: the stored row (P1, clock 9000) is newer than the batch's (P0, clock 500): kept;
    # c: the batch's (clock 9500) wins; d is new; x's file is untouched.
    assert values(result.rows) == {"a": 10, "c": 31, "d": 12}


# --- which partitions an upsert table reads ----------------------------------------------------
def info(pid: str, state: str = C.STATE_OPEN, head: int = 10, parents: tuple[str, ...] = (),
         retired: bool = False) -> PartitionInfo:  # fmt: skip
    return PartitionInfo(pid, next_seq=head, state=state, parents=parents, retired=retired)


@pytest.mark.parametrize(
    ("parent", "mark", "reads_child"),
    [
        (info(P0), 10, False),  # open: more records of the key may come
        (info(P0, C.STATE_CLOSED), 10, False),  # closed, its end not in the log yet
        (info(P0, C.STATE_ENDED), 9, False),  # ended, one record short of the table
        (info(P0, C.STATE_ENDED), 10, True),  # ended and wholly in
        (info(P0, C.STATE_ENDED, retired=True), 0, True),  # retired: in every lake table
        (None, 0, True),  # out of the live set: retired
    ],
)
def test_a_child_is_read_only_once_each_parent_is_wholly_in_the_table(
    parent: PartitionInfo | None, mark: int, reads_child: bool
) -> None:
    child = info(P2, parents=(P0,))
    partitions = [p for p in (parent, child) if p is not None]
    readable, waiting = ready(partitions, {P0: mark})
    assert (P2 in readable, P2 in waiting) == (reads_child, not reads_child)
    if parent is not None:
        assert P0 in readable
