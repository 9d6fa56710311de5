"""Where a typed table's chunk is read from (``shardlog.spark.typed``): the raw batch this
job committed holds it, or the log's segments do; and a chunk read from the raw table's files
is its seqs, each once, in order, or nothing (``chunk_rows``)."""

from __future__ import annotations

import pyarrow as pa
import pytest

from shardlog.spark.compaction import BatchPlan, SegmentRef
from shardlog.spark.exceptions import CompactionError
from shardlog.spark.typed import PARSE_INPUT, RawBatch, chunk_rows, typed_tasks

P, Q = "shardId-000000000000", "shardId-000000000001"
SEGMENTS = ((0, 25), (25, 50), (50, 60), (60, 85), (85, 100))
PLAN = BatchPlan(P, 0, 100, tuple(SegmentRef(P, a, b) for a, b in SEGMENTS))


def raw(start: int, end: int, *files: tuple[str, str, int, int]) -> RawBatch:
    return RawBatch(
        "bucket",
        {P: (start, end)},
        [{"file_key": k, "partition_id": p, "first_seq": a, "last_seq": b} for k, p, a, b in files],
    )


def test_without_a_raw_batch_every_chunk_reads_the_log() -> None:
    assert typed_tasks([PLAN], 10**6, None) == [(P, [0, 25, 50, 60, 85, 100], [])]
    assert typed_tasks([PLAN], 30, None) == [
        (P, [0, 25, 50], []), (P, [50, 60, 85], []), (P, [85, 100], [])
    ]  # fmt: skip


def test_a_chunk_is_cut_where_the_raw_batch_starts_and_ends() -> None:
    batch = raw(25, 60, ("a", P, 25, 40), ("b", P, 41, 59), ("c", Q, 25, 59))
    assert typed_tasks([PLAN], 10**6, batch) == [
        (P, [0, 25], []),
        (P, [25, 50, 60], ["a", "b"]),  # only this partition's files
        (P, [60, 85, 100], []),
    ]
    tail = raw(60, 100, ("a", P, 60, 99))
    assert typed_tasks([PLAN], 30, tail) == [
        (P, [0, 25, 50], []), (P, [50, 60], []), (P, [60, 85], ["a"]), (P, [85, 100], ["a"])
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("start", "end", "held"),
    [(0, 100, True), (10, 60, True), (0, 101, False), (-1, 50, False), (100, 100, False)],
)
def test_the_raw_batch_holds_a_range_only_inside_its_own(start: int, end: int, held: bool) -> None:
    batch = raw(0, 100, ("a", P, 0, 49), ("b", P, 50, 99))
    assert bool(batch.holding(P, start, end)) is held
    assert batch.holding(Q, 0, 10) == []


def rows(seqs: list[int], partition: str = P) -> pa.Table:
    n = len(seqs)
    return pa.table(
        {"partition_id": [partition] * n, "seq": seqs, "partition_key": ["k"] * n,
         "arrival_time": [0] * n, "record_id": [None] * n, "data": [b"{}"] * n},
    ).select(list(PARSE_INPUT.schema.names)).cast(PARSE_INPUT.schema.arrow())  # fmt: skip


def test_a_chunks_rows_are_its_seqs_in_order_whatever_else_the_files_hold() -> None:
    files = pa.concat_tables([rows([14, 12, 10, 13, 11, 15]), rows([10, 11, 12], Q)])
    assert chunk_rows(files, P, 11, 15).column("seq").to_pylist() == [11, 12, 13, 14]


@pytest.mark.parametrize(
    ("seqs", "found"),
    [([10, 11, 13], 2), ([10, 11, 12, 12], 4), ([12, 10, 12], 3), ([], 0)],
    ids=["missing", "doubled", "as many rows, one seq twice", "none"],
)
def test_a_chunk_missing_or_doubling_a_seq_is_refused(seqs: list[int], found: int) -> None:
    with pytest.raises(CompactionError, match=rf"{P}: the raw table's files hold {found} rows"):
        chunk_rows(rows(seqs), P, 10, 13)
