"""Typed compaction commits nothing unless each batch was seen whole and every record of it
is accounted for once: typed, rejected, already rejected (skipped) or not the table's."""

from __future__ import annotations

from typing import Any

import pytest

from shardlog.spark.compaction import BatchPlan
from shardlog.spark.exceptions import CompactionError
from shardlog.spark.typed import FILTERED, REJECTS, SEEN, SKIPPED, TYPED, check_typed

P0, P1 = "shardId-000000000000", "shardId-000000000001"
PLANS = [BatchPlan(P0, 100, 200, ()), BatchPlan(P1, 0, 10, ())]


def row(
    kind: str, partition: str, first: int, last: int, records: int, key: str = ""
) -> dict[str, Any]:
    key = key or (f"{kind}-{partition}-{first}" if kind in (TYPED, REJECTS) else "")
    return {"kind": kind, "file_key": key, "partition_id": partition, "records": records,
            "bytes": 1, "first_seq": first, "last_seq": last}  # fmt: skip


# Two tasks for P0 ([100, 150), [150, 200)), one for P1; some typed, rejected, filtered,
# skipped (refused, already in the dead-letter table).
WHOLE = [
    row(SEEN, P0, 100, 149, 50),
    row(TYPED, P0, 100, 149, 45),
    row(REJECTS, P0, 103, 140, 3),
    row(SKIPPED, P0, 101, 102, 2),
    row(SEEN, P0, 150, 199, 50),
    row(TYPED, P0, 150, 199, 40),
    row(FILTERED, P0, 151, 190, 10),
    row(SEEN, P1, 0, 9, 10),
    row(REJECTS, P1, 0, 9, 10),  # every record refused: no typed file
]


def test_a_batch_seen_whole_and_accounted_for_passes() -> None:
    check_typed(PLANS, WHOLE)


@pytest.mark.parametrize(
    ("stats", "what"),
    [
        (WHOLE[4:], f"{P0}: batch \\[100, 200\\) saw 50 records"),  # a task's output lost
        ([r for r in WHOLE if r["kind"] != REJECTS or r["partition_id"] != P0], "accounted for 97"),
        ([*WHOLE, row(TYPED, P0, 150, 199, 5, "again")], "accounted for 105"),  # counted twice
        ([*WHOLE, row(SKIPPED, P1, 3, 3, 1)], f"{P1}: .* accounted for 11"),
        ([*WHOLE[:-1], row(REJECTS, P1, 0, 10, 10)], "files outside the batch"),  # past the end
        ([r for r in WHOLE if r["partition_id"] != P1], f"{P1}: batch \\[0, 10\\) saw 0"),
    ],
)
def test_a_batch_not_seen_whole_or_not_accounted_for_commits_nothing(
    stats: list[dict[str, Any]], what: str
) -> None:
    with pytest.raises(CompactionError, match=what):
        check_typed(PLANS, stats)
