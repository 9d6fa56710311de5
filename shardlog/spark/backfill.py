"""Backfill: a declared table and its dead-letter table re-derived from the log from seq 0,
exactly once, while compaction keeps appending.

After a declaration changes (a property added, a type widened: ``shardlog.lake.evolution``),
the rows already in the typed table ``T`` were derived under the old one: an added column
is null in them, and a record's fate may differ (a widened decimal now fits; a value of
the new property's wrong type is now refused). A backfill derives the whole table again,
not only the new columns: the typed and refused rows of every record below T's
watermark ``W_T``, from the raw log (the source of truth), and swaps them in.

Per attempt (at most ``MAX_BACKFILL_ATTEMPTS``, each with its own run id):

1. **read** ``W_T`` and the dead-letter table's ``W_R`` (``table_watermarks``);
2. **derive** (executors, the typed compaction's own write step ``write_typed``, nothing
   skipped) the rows of ``[covered, W_T)`` per partition, where ``covered`` is what earlier
   attempts derived (0 at first): a retry derives only the delta a compaction appended;
3. **check** each slice was seen whole and every record accounted for (``check_typed``);
4. **swap T_rejected**: its files wholly below ``W_T`` for every refusal derived, its
   watermarks ``max(W_R, W_T)``, conditioned on ``W_R`` not having moved
   (``shardlog.lake.replace``). Refusals at or above ``W_T`` (a compaction's batch whose
   typed commit is still to come) stay, so a compaction's skip rule (refusals below
   ``W_R`` are in T_rejected, none at or above) still holds;
5. **swap T**: every file for every typed row derived, watermarks ``W_T`` unchanged,
   conditioned on ``W_T`` not having moved.

A ``LakeConflictError`` at 4 or 5 (a compaction committed meanwhile) is a new attempt from
1. Each table's swap is exactly once (``shardlog.lake.replace``); between the two swaps
(a crash, a race lost at 5) a record whose fate changed is in both tables or in neither
until the next backfill swaps T: ``shardlog lake backfill`` again finishes it. A crash
before 4 changes nothing (the derived files are orphans for maintenance).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from shardlog.aws import Clients
from shardlog.lake.catalog import load_lake_catalog
from shardlog.lake.commit import table_watermarks
from shardlog.lake.evolution import plan_changes
from shardlog.lake.exceptions import LakeConflictError, LakeError
from shardlog.lake.files import s3_uri
from shardlog.lake.replace import LakeReplace, replace
from shardlog.segments import SegmentStore
from shardlog.spark.compaction import BatchPlan, SegmentRef, batch_bounds
from shardlog.spark.jobs import JobArgs
from shardlog.spark.typed import REJECTS, TYPED, TypedTables, WriteTyped, check_typed, write_typed
from shardlog.tables import Tables

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import SparkSession

MAX_BACKFILL_ATTEMPTS = 5


class BackfillError(LakeError):
    """The backfill could not swap its rows in (compactions kept moving the table)."""


@dataclass
class BackfillReport:
    """What one backfill did (or, with ``dry_run``, would do) to a declared table."""

    table: str
    run_id: str
    dry_run: bool = False
    changes: list[str] = field(default_factory=list)  # schema changes applied first
    records: int = 0  # log records re-read
    typed: int = 0
    rejected: int = 0
    attempts: int = 0
    watermarks: dict[str, int] = field(default_factory=dict)
    snapshot_id: int | None = None
    rejected_snapshot_id: int | None = None
    conflicts: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


Progress = Callable[[int], None]  # records derived since the last call


def plan_ranges(
    clients: Clients, args: JobArgs, starts: Mapping[str, int], ends: Mapping[str, int]
) -> list[BatchPlan]:
    """Per partition the whole committed segments of ``[starts[p], ends[p])``."""
    store = SegmentStore(clients, args.bucket)
    plans = []
    for partition_id, end in sorted(ends.items()):
        start = starts.get(partition_id, 0)
        if start >= end:
            continue
        bounds = batch_bounds(store.starts(partition_id, start), start, end, end - start)
        segments = tuple(SegmentRef(partition_id, a, b) for a, b in itertools.pairwise(bounds))
        plans.append(BatchPlan(partition_id, bounds[0], bounds[-1], segments))
    return plans


def run_backfill(
    clients: Clients,
    args: JobArgs,
    tables: TypedTables,
    run_id: str,
    write: WriteTyped,
    *,
    dry_run: bool = False,
    progress: Progress | None = None,
    max_attempts: int = MAX_BACKFILL_ATTEMPTS,
) -> BackfillReport:
    """Steps 1 to 5, retried on a racing compaction; ``write`` is ``write_typed``."""
    if tables.declared.upsert:  # the swap keeps rows by seq range; an upsert table's are by key
        raise BackfillError(
            f"lake table {tables.typed.table} is an upsert table: backfill re-derives "
            "append tables only (declare a new upsert table to re-derive it from the log)"
        )
    report = BackfillReport(table=tables.typed.table, run_id=run_id, dry_run=dry_run)
    current = load_lake_catalog(tables.typed).load_table(tables.typed.table)
    report.changes = [
        c.describe()
        for c in plan_changes(
            current.schema(),
            tables.declared,
            tables.typed.table,
            has_rows=current.current_snapshot() is not None,
        )
    ]
    _refuse_a_trimmed_log(clients, args, tables, table_watermarks(current))
    if dry_run:
        report.watermarks = table_watermarks(current)
        report.records = sum(report.watermarks.values())
        return report
    typed, rejected = tables.open()  # evolves the schema: refused changes fail here
    covered: dict[str, int] = {}
    files: dict[str, list[dict[str, Any]]] = {TYPED: [], REJECTS: []}
    for attempt in range(max_attempts):
        report.attempts = attempt + 1
        attempt_id = f"{run_id}{attempt:02d}"
        typed_marks, rejected_marks = (
            table_watermarks(typed.refresh()),
            table_watermarks(rejected.refresh()),
        )
        for plan in plan_ranges(clients, args, covered, typed_marks):
            stats = write([plan], {})  # nothing skipped: every refusal derived anew
            check_typed([plan], stats)
            for kind in files:
                files[kind] += [s for s in stats if s["kind"] == kind]
            report.records += plan.records
            if progress is not None:
                progress(plan.records)
        covered = dict(typed_marks)
        if not covered:
            return report  # nothing compacted yet: nothing to re-derive
        try:
            _swap(tables, typed, rejected, files, covered, rejected_marks, attempt_id, report)
        except LakeConflictError as exc:
            report.conflicts.append(str(exc))
            continue
        return report
    raise BackfillError(
        f"backfill of {tables.typed.table}: compactions moved the table {max_attempts} times "
        f"while it swapped ({report.conflicts[-1]}); run it again (each row is still once "
        "in the typed table)"
    )


def _refuse_a_trimmed_log(
    clients: Clients, args: JobArgs, tables: TypedTables, marks: Mapping[str, int]
) -> None:
    """A backfill re-derives the table from seq 0: refused, naming the partitions, when
    retention trimmed the log below rows the table holds (the swap would drop them)."""
    trimmed = {
        p.partition_id: p.trim_horizon
        for p in Tables(clients, args.config().tables).list_partitions()
        if p.trim_horizon and marks.get(p.partition_id, 0)
    }
    if trimmed:
        where = ", ".join(f"{pid} below seq {seq}" for pid, seq in sorted(trimmed.items()))
        raise BackfillError(
            f"backfill of {tables.typed.table} re-derives it from the log from seq 0, and "
            f"retention trimmed the log ({where}): its rows there would be lost; a backfill "
            "needs the whole log (recordRetentionDays unset)"
        )


def _swap(
    tables: TypedTables,
    typed: Any,
    rejected: Any,
    files: Mapping[str, Sequence[dict[str, Any]]],
    covered: Mapping[str, int],
    rejected_marks: Mapping[str, int],
    attempt_id: str,
    report: BackfillReport,
) -> None:
    """Steps 4 and 5: the dead-letter table first, then the typed table."""
    marks = {
        p: max(rejected_marks.get(p, 0), covered.get(p, 0)) for p in {*rejected_marks, *covered}
    }
    refusals = replace(
        rejected,
        LakeReplace(
            _uris(tables.rejected.bucket, files[REJECTS]),
            covered,
            rejected_marks,
            marks,
            attempt_id,
        ),
    )
    report.rejected_snapshot_id = refusals.snapshot_id
    swapped = replace(
        typed,
        LakeReplace(
            _uris(tables.typed.bucket, files[TYPED]), covered, covered, covered, attempt_id
        ),
    )
    report.snapshot_id, report.watermarks = swapped.snapshot_id, dict(covered)
    report.typed = sum(f["records"] for f in files[TYPED])
    report.rejected = sum(f["records"] for f in files[REJECTS])


def _uris(bucket: str, files: Sequence[dict[str, Any]]) -> list[str]:
    return [s3_uri(bucket, f["file_key"]) for f in files]


def backfill(
    spark: SparkSession | None,
    clients: Clients,
    args: JobArgs,
    name: str,
    run_id: str,
    *,
    dry_run: bool = False,
    progress: Progress | None = None,
) -> BackfillReport:
    """Backfill declared table ``name``, its executors' step through Spark (no session
    for a dry run: it writes nothing)."""
    tables = TypedTables.beside(args.lake(), args.declared().table(name))

    def derive(plans: Sequence[BatchPlan], marks: Mapping[str, int]) -> list[dict[str, Any]]:
        if spark is None:
            raise ValueError("a backfill that derives rows needs a Spark session")
        return write_typed(spark, args, tables, plans, marks, run_id)

    return run_backfill(
        clients,
        args,
        tables,
        run_id,
        derive,
        dry_run=dry_run,
        progress=progress,
    )
