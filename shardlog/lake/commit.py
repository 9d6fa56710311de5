"""The lake commit: data files and watermarks in one Iceberg snapshot, exactly once.

The **watermark** of a partition is the next seq the table does not hold yet: every record
of the partition below it is in the table, none at or above it. The watermarks of all
partitions travel, as one JSON object, in the summary of the snapshot that appended their
records (``shardlog.watermarks``), so data and watermark are one atomic catalog commit and
can never disagree. A writer resumes from the table, never from a side table.

One append, for a batch ``[start, end)`` per partition and the files holding exactly it:

1. **read**: refresh the table; its watermarks are those of the newest snapshot carrying
   ``shardlog.watermarks`` (the current one, as only this module appends);
2. **check**: every partition of the batch must start exactly at the table's watermark;
   otherwise another run appended first and this batch is stale: ``LakeConflictError``,
   nothing is committed (the caller removes its files; maintenance would too);
3. **commit**: ``add_files`` + the merged watermarks in one transaction, based on the
   snapshot read in 1 (pyiceberg asserts it: the catalog refuses a commit whose base moved);
4. a refused commit (``CommitFailedException``: something committed between 1 and 3) goes
   back to 1, a bounded number of times: a concurrent append then fails the check in 2,
   any other commit (maintenance) leaves the watermarks alone and the append goes through.

pyiceberg's own retry would re-apply the append onto the concurrent snapshot without
step 2, so both racing runs would land: the table must have ``commit.retry.num-retries``
= 0 (``shardlog.lake.catalog`` sets it) and ``append`` refuses a table without it.

Files a crashed run wrote but never committed are in no manifest, so no reader ever sees
them; ``shardlog.lake.maintenance`` removes them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from shardlog.lake.catalog import COMMIT_RETRIES_PROPERTY
from shardlog.lake.exceptions import LakeConflictError, LakeError, LakeSchemaError

if TYPE_CHECKING:  # pragma: no cover
    from pyiceberg.table import Table
    from pyiceberg.table.snapshots import Snapshot

WATERMARKS_PROPERTY = "shardlog.watermarks"
RUN_PROPERTY = "shardlog.run-id"
DEFAULT_COMMIT_ATTEMPTS = 5


@dataclass(frozen=True)
class LakeAppend:
    """What one run appends: per partition the seq range ``[start, end)``, and the files
    (``s3://`` URIs) holding exactly those records."""

    ranges: Mapping[str, tuple[int, int]]
    files: Sequence[str]
    run_id: str

    @property
    def records(self) -> int:
        return sum(end - start for start, end in self.ranges.values())


@dataclass(frozen=True)
class CommitResult:
    snapshot_id: int
    watermarks: Mapping[str, int]
    attempts: int


def snapshot_watermarks(snapshot: Snapshot | None) -> dict[str, int] | None:
    """The watermarks a snapshot carries, or None if it carries none."""
    if snapshot is None or snapshot.summary is None:
        return None
    raw = snapshot.summary.additional_properties.get(WATERMARKS_PROPERTY)
    if raw is None:
        return None
    try:
        return {str(k): int(v) for k, v in json.loads(raw).items()}
    except (ValueError, AttributeError) as exc:
        raise LakeSchemaError(
            f"snapshot {snapshot.snapshot_id}: unreadable {WATERMARKS_PROPERTY}: {raw!r}"
        ) from exc


def table_watermarks(table: Table) -> dict[str, int]:
    """The table's watermarks: from the newest ancestor snapshot carrying them; {} for a
    table no compaction has appended to yet."""
    snapshot = table.current_snapshot()
    while snapshot is not None:
        marks = snapshot_watermarks(snapshot)
        if marks is not None:
            return marks
        parent = snapshot.parent_snapshot_id
        snapshot = table.snapshot_by_id(parent) if parent is not None else None
    if table.current_snapshot() is not None:
        raise LakeSchemaError(
            f"{table.name()}: no snapshot of the table carries {WATERMARKS_PROPERTY}: "
            "not appended to by shardlog compaction, so where to resume is unknown"
        )
    return {}


def stale_partitions(marks: Mapping[str, int], append: LakeAppend) -> list[str]:
    """Partitions whose batch does not start exactly at the table's watermark."""
    return sorted(p for p, (start, _) in append.ranges.items() if marks.get(p, 0) != start)


def append(
    table: Table, batch: LakeAppend, *, max_attempts: int = DEFAULT_COMMIT_ATTEMPTS
) -> CommitResult:
    """Commit ``batch`` beyond the table's watermarks, or raise ``LakeConflictError``."""
    from pyiceberg.exceptions import CommitFailedException

    if not batch.files:
        raise ValueError("an append without files: nothing to commit (no empty snapshot)")
    for attempt in range(1, max_attempts + 1):
        table.refresh()
        _require_no_auto_retry(table)
        marks = table_watermarks(table)
        stale = stale_partitions(marks, batch)
        if stale:
            raise LakeConflictError(
                f"another run appended to {table.name()} first: "
                + ", ".join(f"{p} is at {marks.get(p, 0)}, not {batch.ranges[p][0]}" for p in stale)
                + "; this run commits nothing",
                tuple(stale),
            )
        merged = {**marks, **{p: end for p, (_, end) in batch.ranges.items()}}
        transaction = table.transaction()
        transaction.add_files(
            list(batch.files),
            snapshot_properties={
                WATERMARKS_PROPERTY: json.dumps(merged, sort_keys=True),
                RUN_PROPERTY: batch.run_id,
            },
            check_duplicate_files=False,  # names carry the run id: never in the table yet
        )
        try:
            committed = transaction.commit_transaction()
        except CommitFailedException:
            continue  # someone committed since step 1: re-read the watermarks
        snapshot = committed.current_snapshot()
        assert snapshot is not None
        return CommitResult(snapshot.snapshot_id, merged, attempt)
    raise LakeConflictError(
        f"{table.name()} kept changing: {max_attempts} commit attempts refused; "
        "this run commits nothing"
    )


def _require_no_auto_retry(table: Table) -> None:
    if table.properties.get(COMMIT_RETRIES_PROPERTY) != "0":
        raise LakeError(
            f"{table.name()} has {COMMIT_RETRIES_PROPERTY}="
            f"{table.properties.get(COMMIT_RETRIES_PROPERTY, 'unset (4)')}: pyiceberg would "
            "re-apply an append onto a concurrent one; open it with shardlog.lake.catalog"
        )
