"""The lake commit: data files and watermarks in one Iceberg snapshot, exactly once.

The **watermark** of a partition is the next seq the table does not hold yet: every record
of the partition below it is in the table, none at or above it. The watermarks of all
partitions travel, as one JSON object, in the summary of the snapshot that appended their
records (``shardlog.watermarks``), so data and watermark are one atomic catalog commit and
can never disagree. A writer resumes from the table, never from a side table.

One append, for a batch ``[start, end)`` per partition and the files holding exactly it,
under the run's id (``shardlog.run-id``, in the same summary):

1. **read**: refresh the table; its watermarks are those of the newest snapshot carrying
   ``shardlog.watermarks`` (the current one, or an ancestor when another engine committed
   since: ``table_watermarks``);
2. **recognise**: a snapshot of the table carrying this run's id is this run's commit,
   landed: the append is done (``own_snapshot``). After a failed commit, a table whose
   snapshots reference this run's files holds it too (its snapshot expired under later
   ones: a run that stalled past the snapshot retention after its answer was lost);
3. **check**: every partition of the batch must start exactly at the table's watermark;
   otherwise another run appended first and this batch is stale: ``LakeConflictError``,
   nothing is committed, and the table provably holds none of this run's files;
4. **commit**: ``add_files`` + the merged watermarks + the run id in one transaction, based
   on the snapshot read in 1 (pyiceberg asserts it, and Glue's ``VersionId`` refuses an
   ``UpdateTable`` whose table changed since pyiceberg read it);
5. a commit that fails, whatever the failure, is an **unknown outcome**, never "nothing
   landed": back to 1, a bounded number of times. The lost answer is the case that needs
   this: Glue applies the ``UpdateTable``, the answer is lost, botocore resends it, and Glue
   refuses the resend (its ``VersionId`` is no longer current), so pyiceberg reports a
   refused commit (``CommitFailedException``) for a commit that landed; step 2 finds it.
   A commit truly refused (another commit landed in between) is not in the table: step 3
   then finds a concurrent append, and any other commit (maintenance, another engine)
   leaves the watermarks alone so the append goes through. If the table cannot be read
   after a failed commit, the outcome stays unknown: ``LakeCommitUnknownError``, on which
   the caller must delete nothing.

Why a failed commit that a later read does not show never lands afterwards: its
``UpdateTable`` names the Glue version pyiceberg read (V). While the table is still at V,
the next attempt commits from V again under the same run id, and Glue applies at most one
of the two. Once the table moved past V, Glue refuses that request whenever it arrives. So
step 3's ``LakeConflictError`` (the table moved: another run appended) proves that no
snapshot references this run's files, now or later.

**The commit deletes nothing.** pyiceberg deletes the manifests of a commit it believes
refused; after a refused resend of an applied commit those are the manifests of the
table's current snapshot, and the table could no longer be read. The commit hands pyiceberg
a view of the table's FileIO that cannot delete (``shardlog.lake.keeping_io``): the manifests of a
commit that truly did not land are orphans, which ``shardlog.lake.maintenance`` removes
once it can prove no snapshot references them.

pyiceberg's own retry would re-apply the append onto the concurrent snapshot without
step 3, so both racing runs would land: the table must have ``commit.retry.num-retries``
= 0 (``shardlog.lake.catalog`` sets it) and ``append`` refuses a table without it.

Files a crashed run wrote but never committed are in no manifest, so no reader ever sees
them; ``shardlog.lake.maintenance`` removes them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from botocore.exceptions import BotoCoreError, ClientError

from shardlog.lake.catalog import COMMIT_RETRIES_PROPERTY
from shardlog.lake.exceptions import (
    LakeCommitUnknownError,
    LakeConflictError,
    LakeError,
    LakeSchemaError,
)
from shardlog.lake.references import referenced_files

if TYPE_CHECKING:  # pragma: no cover
    from pyiceberg.table import Table
    from pyiceberg.table.snapshots import Snapshot

WATERMARKS_PROPERTY = "shardlog.watermarks"
RUN_PROPERTY = "shardlog.run-id"
DEFAULT_COMMIT_ATTEMPTS = 5
# What a failed catalog read raises (Glue through botocore; the SQL catalog's database).
_CATALOG_UNREACHABLE: tuple[type[BaseException], ...] = (BotoCoreError, ClientError, OSError)


@dataclass(frozen=True)
class LakeAppend:
    """What one run appends: per partition the seq range ``[start, end)``, and the files
    (``s3://`` URIs) holding exactly those records. A typed table holds only the records
    of a range that are its and fit its schema (``shardlog.spark.typed``): its range may
    hold none, and its append moves the watermarks with no file (``watermarks_only``)."""

    ranges: Mapping[str, tuple[int, int]]
    files: Sequence[str]
    run_id: str
    watermarks_only: bool = False

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


def watermark_chain(table: Table) -> list[Snapshot]:
    """The current snapshot and its ancestors, newest first, down to the newest one carrying
    watermarks (the current one itself unless another engine committed since). Expiring a
    snapshot of this chain would cut it: ``shardlog.lake.maintenance`` keeps them all."""
    chain: list[Snapshot] = []
    snapshot = table.current_snapshot()
    while snapshot is not None:
        chain.append(snapshot)
        if snapshot_watermarks(snapshot) is not None:
            break
        parent = snapshot.parent_snapshot_id
        snapshot = table.snapshot_by_id(parent) if parent is not None else None
    return chain


def table_watermarks(table: Table) -> dict[str, int]:
    """The table's watermarks: from the newest ancestor snapshot carrying them; {} for a
    table no compaction has appended to yet."""
    chain = watermark_chain(table)
    marks = snapshot_watermarks(chain[-1]) if chain else None
    if marks is not None:
        return marks
    if chain:
        raise LakeSchemaError(
            f"{table.name()}: no snapshot of the table carries {WATERMARKS_PROPERTY}: "
            "not appended to by shardlog compaction, so where to resume is unknown"
        )
    return {}


def stale_partitions(marks: Mapping[str, int], append: LakeAppend) -> list[str]:
    """Partitions whose batch does not start exactly at the table's watermark."""
    return sorted(p for p, (start, _) in append.ranges.items() if marks.get(p, 0) != start)


def stale_batch(
    table: Table,
    verb: str,
    marks: Mapping[str, int],
    ranges: Mapping[str, tuple[int, int]],
    stale: Sequence[str],
) -> LakeConflictError:
    """The refusal of a batch whose partitions another run already moved past its start."""
    return LakeConflictError(
        f"another run {verb} {table.name()} first: "
        + ", ".join(f"{p} is at {marks.get(p, 0)}, not {ranges[p][0]}" for p in stale)
        + "; this run commits nothing",
        tuple(stale),
    )


def commit_failures() -> tuple[type[BaseException], ...]:
    """What a catalog commit that may or may not have landed raises: refused (also for a
    refused resend of an applied UpdateTable), unknown, or a transport failure botocore
    gave up on. None of them says that nothing landed."""
    from pyiceberg.exceptions import CommitFailedException, CommitStateUnknownException

    return (CommitFailedException, CommitStateUnknownException, *_CATALOG_UNREACHABLE)


def own_snapshot(table: Table, run_id: str) -> Snapshot | None:
    """The snapshot of the table that run ``run_id`` committed, if the table has it."""
    for snapshot in table.snapshots():
        summary = snapshot.summary
        if summary is not None and summary.additional_properties.get(RUN_PROPERTY) == run_id:
            return snapshot
    return None


def append(
    table: Table, batch: LakeAppend, *, max_attempts: int = DEFAULT_COMMIT_ATTEMPTS
) -> CommitResult:
    """Commit ``batch`` beyond the table's watermarks, exactly once. ``LakeConflictError``:
    the batch is stale and provably in no snapshot (its files may go);
    ``LakeCommitUnknownError``: the outcome could not be found out (delete nothing)."""
    if not batch.files and not (batch.watermarks_only and batch.ranges):
        raise ValueError("an append without files: nothing to commit (no empty snapshot)")
    outcome_unknown = commit_failures()
    sent, failure = 0, ""
    while True:
        _read(table, failure)
        marks = table_watermarks(table)
        stale = stale_partitions(marks, batch)
        landed = _landed(table, batch, marks, stale, sent)
        if landed is not None:  # this run's commit is in: its answer was lost, or refused
            return landed
        if stale:
            raise stale_batch(table, "appended to", marks, batch.ranges, stale)
        if sent == max_attempts:  # an attempt may still be in flight: not proof of anything
            raise LakeCommitUnknownError(
                f"{table.name()} kept changing: {max_attempts} commit attempts failed "
                f"(the last: {failure}) and the table does not show this run's commit yet; "
                "delete nothing: the next run reads the table and finds out"
            )
        merged = {**marks, **{p: end for p, (_, end) in batch.ranges.items()}}
        sent += 1
        try:
            snapshot = _commit(table, batch, merged)
        except outcome_unknown as exc:  # refused, or applied and its answer lost
            failure = f"{type(exc).__name__}: {exc}"
            continue
        return CommitResult(snapshot.snapshot_id, merged, sent)


def _landed(
    table: Table, batch: LakeAppend, marks: Mapping[str, int], stale: list[str], sent: int
) -> CommitResult | None:
    """This run's commit, if the table has it: the snapshot carrying the run id; or, after
    a failed commit whose batch now looks stale, a snapshot referencing its files (its own
    snapshot expired under later ones)."""
    own = own_snapshot(table, batch.run_id)
    if own is not None:
        return CommitResult(own.snapshot_id, snapshot_watermarks(own) or {}, sent)
    if stale and sent and _references_any(table, batch.files):
        current = table.current_snapshot()
        return CommitResult(current.snapshot_id if current else 0, marks, sent)
    return None


def _references_any(table: Table, files: Sequence[str]) -> bool:
    """Whether any snapshot of the table references one of ``files`` (reads manifests)."""
    return not referenced_files(table).isdisjoint(files)


def _read(table: Table, failure: str) -> None:
    """Refresh the table; after a failed commit, a read that fails leaves its outcome
    unknown."""
    try:
        table.refresh()
    except _CATALOG_UNREACHABLE as exc:
        if not failure:
            raise
        raise LakeCommitUnknownError(
            f"the outcome of the commit to {'.'.join(table.name())} is unknown: "
            f"it failed ({failure}) "
            f"and the table could not be read to find out ({type(exc).__name__}: {exc}); "
            "delete nothing: the next run reads the table and finds out"
        ) from exc
    _require_no_auto_retry(table)


def _commit(table: Table, batch: LakeAppend, watermarks: Mapping[str, int]) -> Snapshot:
    """One commit of the batch from the snapshot read, through a view of the table whose
    FileIO cannot delete (see the module docstring)."""
    from shardlog.lake.keeping_io import keeping_view

    view = keeping_view(table)
    transaction = view.transaction()
    transaction.add_files(
        list(batch.files),
        snapshot_properties={
            WATERMARKS_PROPERTY: json.dumps(dict(watermarks), sort_keys=True),
            RUN_PROPERTY: batch.run_id,
        },
        check_duplicate_files=False,  # names carry the run id: never in the table yet
    )
    committed = transaction.commit_transaction().current_snapshot()
    if committed is None or own_snapshot(view, batch.run_id) is None:
        raise LakeError(f"{table.name()}: the commit answered without this run's snapshot")
    table.metadata, table.metadata_location = view.metadata, view.metadata_location
    return committed


def _require_no_auto_retry(table: Table) -> None:
    if table.properties.get(COMMIT_RETRIES_PROPERTY) != "0":
        raise LakeError(
            f"{table.name()} has {COMMIT_RETRIES_PROPERTY}="
            f"{table.properties.get(COMMIT_RETRIES_PROPERTY, 'unset (4)')}: pyiceberg would "
            "re-apply an append onto a concurrent one; open it with shardlog.lake.catalog"
        )
