"""Compaction as a library: the exactly-once protocol that turns the log into Parquet.

Per partition (a group of its own in the consumers table, ``$compaction``):

1. **plan** (driver): read the watermark and the head; list the committed segments from the
   watermark on (through the ``SegmentStore``) and take whole segments up to
   ``max_records``; a batch a crashed run left pending is taken again exactly as it was;
2. **begin** (driver): record the batch end as ``pendingCheckpoint`` (a fenced write);
3. **write** (executors): read and decode the segments, then PUT one Parquet object per
   (partition, date, hour) of the batch at a name made of its seq range, so the same batch
   always gives the same names and a retry overwrites (``read_segments``, ``write_files``;
   the job adds the columns in between with pure DataFrame transforms);
4. **commit** (driver): check the files hold exactly the batch (``check_files``), then
   advance the watermark with a fenced write (``SHARD_END`` once an ENDED partition is done).

A crash anywhere before step 4 leaves the watermark where it was and the batch pending;
the next run redoes that very batch, overwriting the same objects: no duplicate, no gap.
Nothing here builds a SparkSession or imports pyspark at import time: the job
(``spark_jobs/compact.py``) does, and wires these steps together.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any

from shardlog import constants as C
from shardlog.aws import Clients
from shardlog.exceptions import CorruptLogError
from shardlog.segments import SegmentStore
from shardlog.spark.exceptions import CompactionError, WatermarkConflictError
from shardlog.spark.jobs import JobArgs
from shardlog.spark.watermark import Watermark, WatermarkStore
from shardlog.tables import Tables

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import DataFrame, SparkSession


@dataclass(frozen=True)
class SegmentRef:
    """A committed segment of a batch: its partition and seq range."""

    partition_id: str
    first_seq: int
    next_seq: int


@dataclass(frozen=True)
class BatchPlan:
    partition_id: str
    start: int
    end: int
    segments: tuple[SegmentRef, ...]
    watermark: Watermark
    ends_partition: bool = False  # the partition is ENDED and this batch reaches its head
    redo: bool = False  # a crashed run's pending batch, taken again as it was

    @property
    def records(self) -> int:
        return self.end - self.start


@dataclass
class CompactionReport:
    batches: list[dict[str, Any]] = field(default_factory=list)
    records: int = 0
    files: int = 0
    bytes: int = 0
    ended: list[str] = field(default_factory=list)
    conflicts: list[str] = field(default_factory=list)
    # Seconds per step of the run (plan, begin, write: the executors' one Spark job, check,
    # commit): where a run's time goes, in its report and its log line.
    phase_seconds: dict[str, float] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Time one step of the run into ``phase_seconds``."""
        started = time.perf_counter()
        try:
            yield
        finally:
            elapsed = time.perf_counter() - started
            self.phase_seconds[name] = round(self.phase_seconds.get(name, 0.0) + elapsed, 3)


# --- 1. plan -----------------------------------------------------------------------------
def batch_bounds(starts: Iterable[int], start: int, end: int, max_records: int) -> list[int]:
    """Segment boundaries of the batch from ``start``: whole segments, at most
    ``max_records`` records unless the first segment alone is larger, never past ``end``.

    Objects at or past ``end`` (the head) are uncommitted leftovers and are ignored; the
    first committed segment must start exactly at ``start``.
    """
    keys: list[int] = []
    past_limit = False
    for seq in starts:
        if seq >= end:
            break
        keys.append(seq)
        if seq - start >= max_records:
            past_limit = True
            break
    if not keys or keys[0] != start:
        found = keys[0] if keys else None
        raise CorruptLogError(
            f"no committed segment starts at seq {start} (first found: {found}), below head {end}"
        )
    bounds = keys if past_limit else [*keys, end]
    fitting = [b for b in bounds[1:] if b - start <= max_records]
    last = fitting[-1] if fitting else bounds[1]
    return bounds[: bounds.index(last) + 1]


def plan_batches(clients: Clients, args: JobArgs) -> tuple[list[BatchPlan], list[Watermark]]:
    """The batch of each partition with records to compact, and the ENDED partitions that
    are fully compacted but not yet marked ``SHARD_END``."""
    watermarks = WatermarkStore(clients, args.consumers_table)
    store = SegmentStore(clients, args.bucket)
    plans: list[BatchPlan] = []
    finished: list[Watermark] = []
    for partition in Tables(clients, args.config().tables).list_partitions():
        mark = watermarks.read(partition.partition_id)
        if mark.ended:
            continue
        redo = mark.pending_end is not None
        end = mark.pending_end if mark.pending_end is not None else partition.next_seq
        if mark.next_seq >= end:
            if partition.state == C.STATE_ENDED:
                finished.append(mark)
            continue
        limit = end - mark.next_seq if redo else args.max_records
        starts = store.starts(partition.partition_id, mark.next_seq)
        bounds = batch_bounds(starts, mark.next_seq, end, limit)
        plans.append(
            BatchPlan(
                partition_id=partition.partition_id,
                start=bounds[0],
                end=bounds[-1],
                segments=tuple(
                    SegmentRef(partition.partition_id, a, b) for a, b in itertools.pairwise(bounds)
                ),
                watermark=mark,
                ends_partition=(
                    partition.state == C.STATE_ENDED and bounds[-1] == partition.next_seq
                ),
                redo=redo,
            )
        )
    return plans, finished


# --- 2. begin ----------------------------------------------------------------------------
def begin_batches(
    store: WatermarkStore, plans: Sequence[BatchPlan], report: CompactionReport
) -> list[BatchPlan]:
    """Record each new batch as pending; a partition another run moved first is skipped."""
    begun = []
    for plan in plans:
        if plan.redo:
            begun.append(plan)
            continue
        try:
            mark = store.begin(plan.watermark, plan.end)
        except WatermarkConflictError as exc:
            report.conflicts.append(str(exc))
            continue
        begun.append(replace(plan, watermark=mark))
    return begun


def mark_finished(
    store: WatermarkStore, marks: Sequence[Watermark], report: CompactionReport
) -> None:
    """ENDED partitions with nothing left to compact: ``SHARD_END``, never looked at again."""
    for mark in marks:
        try:
            store.mark_ended(mark)
            report.ended.append(mark.partition_id)
        except WatermarkConflictError as exc:
            report.conflicts.append(str(exc))


# --- 3. write (executors) ----------------------------------------------------------------
def read_segments(spark: SparkSession, args: JobArgs, plans: Sequence[BatchPlan]) -> DataFrame:
    """The batches' records, decoded by the executors (one task per segment)."""
    from shardlog.spark.io import RECORD_SCHEMA, SEGMENT_TASK_SCHEMA, SegmentReader

    tasks = [(s.partition_id, s.first_seq, s.next_seq) for p in plans for s in p.segments]
    slices = max(1, min(len(tasks), spark.sparkContext.defaultParallelism * 4))
    task_df = spark.createDataFrame(
        spark.sparkContext.parallelize(tasks, slices), SEGMENT_TASK_SCHEMA
    )
    return task_df.mapInArrow(SegmentReader(args.config()), RECORD_SCHEMA)


def write_files(files: DataFrame, args: JobArgs) -> list[dict[str, Any]]:
    """PUT every ``file_key`` group as one Parquet object; the files' stats.

    Every row of a group must already sit in one Spark partition (the job partitions by
    the columns the file key is made of).
    """
    from shardlog.spark.io import FILE_STATS_SCHEMA, FileWriter

    written = files.sortWithinPartitions("file_key", "seq").mapInArrow(
        FileWriter(args.config()), FILE_STATS_SCHEMA
    )
    return [row.asDict() for row in written.collect()]


# --- 4. commit ---------------------------------------------------------------------------
def check_files(plans: Sequence[BatchPlan], files: Sequence[dict[str, Any]]) -> None:
    """Advance nothing unless each batch's files hold exactly its records."""
    for plan in plans:
        mine = [f for f in files if f["partition_id"] == plan.partition_id]
        count = sum(f["records"] for f in mine)
        low = min((f["first_seq"] for f in mine), default=None)
        high = max((f["last_seq"] for f in mine), default=None)
        if (count, low, high) != (plan.records, plan.start, plan.end - 1):
            raise CompactionError(
                f"{plan.partition_id}: batch [{plan.start}, {plan.end}) wrote {count} records "
                f"over seqs [{low}, {high}]; the watermark stays at {plan.start}"
            )


def commit_batches(
    store: WatermarkStore, plans: Sequence[BatchPlan], report: CompactionReport
) -> None:
    """Advance each batch's watermark (fenced); a conflict means another run committed it."""
    for plan in plans:
        try:
            store.advance(plan.watermark, ended=plan.ends_partition)
        except WatermarkConflictError as exc:
            # Another run committed this batch (it wrote the very same files): nothing lost.
            report.conflicts.append(str(exc))
            continue
        if plan.ends_partition:
            report.ended.append(plan.partition_id)


def summarize(
    report: CompactionReport, plans: Sequence[BatchPlan], files: Sequence[dict[str, Any]]
) -> CompactionReport:
    """Fill the report with what the run compacted."""
    report.batches = [
        {"partitionId": p.partition_id, "start": p.start, "end": p.end, "redo": p.redo}
        for p in plans
    ]
    report.records = sum(p.records for p in plans)
    report.files = len(files)
    report.bytes = sum(f["bytes"] for f in files)
    return report
