"""Compaction advances nothing unless each batch's files hold exactly its records."""

from __future__ import annotations

from typing import Any

import pytest

from shardlog.spark.compaction import BatchPlan, check_files
from shardlog.spark.exceptions import CompactionError

P0, P1 = "shardId-000000000000", "shardId-000000000001"


def plan(partition: str, start: int, end: int) -> BatchPlan:
    return BatchPlan(partition, start, end, ())


def stats(partition: str, first: int, last: int, records: int | None = None) -> dict[str, Any]:
    count = last - first + 1 if records is None else records
    return {"partition_id": partition, "first_seq": first, "last_seq": last, "records": count}


PLANS = [plan(P0, 100, 300), plan(P1, 0, 50)]
EXACT = [stats(P0, 100, 199), stats(P0, 200, 299), stats(P1, 0, 49)]


def test_files_that_hold_exactly_each_batch_pass() -> None:
    check_files(PLANS, EXACT)


@pytest.mark.parametrize(
    ("files", "what"),
    [
        ([stats(P0, 100, 199), stats(P1, 0, 49)], r"wrote 100 records over seqs \[100, 199\]"),
        ([*EXACT, stats(P0, 200, 299)], "wrote 300 records"),  # a file twice
        ([stats(P0, 100, 199), stats(P0, 201, 300), stats(P1, 0, 49)], r"\[100, 300\]"),
        ([stats(P0, 100, 299, records=199), stats(P1, 0, 49)], "wrote 199 records"),
        (EXACT[:2], r"\[None, None\]"),  # a batch with no file at all
    ],
    ids=["file-missing", "file-twice", "shifted-by-one", "record-short", "no-file"],
)
def test_files_that_do_not_hold_their_batch_advance_nothing(
    files: list[dict[str, Any]], what: str
) -> None:
    with pytest.raises(CompactionError, match=what):
        check_files(PLANS, files)
