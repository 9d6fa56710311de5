"""Compaction as a library: the exactly-once protocol that appends the log to the lake table.

The truth is the lake table (``shardlog.lake``): each partition's watermark, the next seq
the table does not hold, travels in the summary of the very snapshot that appended the
records below it. Per run:

1. **open** (driver): the table, created on first use; an unreachable catalog or a table
   that is not shardlog's fails the run here, before anything is read or written;
2. **plan** (driver): per partition, whole committed segments from the table's watermark
   (or the trim horizon, if the log no longer holds it: shardlog/retention.py) up to
   ``max_records``, never past the committed head (through the ``SegmentStore``); over the
   live set once the table, a reader of the log, is caught up (``LakeReader``,
   shardlog/retirement.py), over every partition before;
3. **write** (executors): the batches cut into chunks of consecutive segments (``chunks``),
   a task each: fetch and decode the segments, PUT one Parquet file per arrival day of the
   chunk, named by its partition, seq range and this run's id (``write_chunks``); no
   shuffle, the records never pass through the JVM;
4. **commit** (driver): check the files hold exactly the batch (``check_files``), then
   append them and the new watermarks in one Iceberg snapshot (``shardlog.lake.commit``),
   refused if the table's watermark moved since step 2;
5. **mirror** (driver): copy the table's watermarks into the ``$compaction`` items, for
   status displays, retirement and retention (which wait for them: a lagging mirror only
   retires and trims later); the compaction never reads them back as the truth.

| crash or race | what happens next |
| --- | --- |
| before 4 | files no snapshot references: never read; the next run plans afresh from the
  table and maintenance removes them |
| after 4, before 5 | the table has the batch; the next run finds nothing new for it and
  brings the mirror up to date |
| two runs at once | the second commit finds the watermark moved, commits nothing and
  deletes its own files (``CompactionReport.conflicts``), each only if the table references
  it from no snapshot |
| the commit's answer lost | the commit re-reads the table and finds its own snapshot by
  the run id (``shardlog.lake.commit``); if it cannot find out, the run fails with every
  file kept (``LakeCommitUnknownError``) and the next run reads the table |

Nothing here builds a SparkSession or imports pyspark at import time: the job
(``spark_jobs/compact.py``) does, opens the table and hands its executors' write step to
``run_compaction``, which runs the other steps on the driver.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from shardlog import constants as C
from shardlog.aws import Clients
from shardlog.dal.consumers import lake_reader
from shardlog.exceptions import CorruptLogError
from shardlog.lake.commit import CommitResult, LakeAppend, append, table_watermarks
from shardlog.lake.exceptions import LakeConflictError
from shardlog.lake.files import s3_uri
from shardlog.lake.settings import LakeSettings
from shardlog.retirement import LakeReader
from shardlog.segments import SegmentStore
from shardlog.spark.exceptions import CompactionError, WatermarkConflictError
from shardlog.spark.jobs import JobArgs
from shardlog.spark.watermark import WatermarkStore
from shardlog.tables import PartitionInfo

if TYPE_CHECKING:  # pragma: no cover
    from pyiceberg.table import Table
    from pyspark.sql import SparkSession


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
    # The table's watermark the batch follows, when the log is trimmed above it (a table
    # declared after the trim: its records below the horizon are gone from the log).
    after: int | None = None

    @property
    def records(self) -> int:
        return self.end - self.start

    @property
    def follows(self) -> int:
        """The watermark the commit expects the table at (the batch's ``ranges`` start)."""
        return self.start if self.after is None else self.after

    @property
    def trimmed(self) -> int:
        """Records the table skips: trimmed from the log before it read them."""
        return self.start - self.follows


@dataclass
class CompactionReport:
    run_id: str = ""
    batches: list[dict[str, Any]] = field(default_factory=list)
    records: int = 0
    files: int = 0
    bytes: int = 0
    snapshot_id: int | None = None
    ended: list[str] = field(default_factory=list)
    conflicts: list[str] = field(default_factory=list)
    # Seconds per step of the run (plan, begin, write: the executors' one Spark job, check,
    # commit): where a run's time goes, in its report and its log line.
    phase_seconds: dict[str, float] = field(default_factory=dict)
    # Each declared typed table's run (shardlog.spark.typed.TypedReport): typed, rejected.
    tables: list[dict[str, Any]] = field(default_factory=list)
    # What the plan read: "live" (the live set) or "all" (every partition: not caught up).
    partitions_read: str = ""
    # Per partition, records the table skipped: trimmed from the log before it read them.
    trimmed: dict[str, int] = field(default_factory=dict)

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


# --- 2. plan -----------------------------------------------------------------------------
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


def plan_batches(
    clients: Clients,
    args: JobArgs,
    watermarks: Mapping[str, int],
    partitions: Sequence[PartitionInfo],
) -> list[BatchPlan]:
    """The batch of each partition with committed records beyond the table's watermark (from
    the trim horizon when the log is trimmed above the watermark: ``BatchPlan.after``)."""
    store = SegmentStore(clients, args.bucket)
    plans: list[BatchPlan] = []
    for partition in partitions:
        mark = watermarks.get(partition.partition_id, 0)
        start = max(mark, partition.trim_horizon)
        if start >= partition.next_seq:
            if start > mark:  # all of it trimmed: the watermark moves to the head alone
                plans.append(BatchPlan(partition.partition_id, start, start, (), after=mark))
            continue
        starts = store.starts(partition.partition_id, start)
        bounds = batch_bounds(starts, start, partition.next_seq, args.max_records)
        plans.append(
            BatchPlan(
                partition_id=partition.partition_id,
                start=bounds[0],
                end=bounds[-1],
                segments=tuple(
                    SegmentRef(partition.partition_id, a, b) for a, b in itertools.pairwise(bounds)
                ),
                after=mark if start > mark else None,
            )
        )
    return plans


# --- 3. write (executors) ----------------------------------------------------------------
def chunks(plans: Sequence[BatchPlan], target_records: int) -> list[tuple[str, list[int]]]:
    """The batches cut into tasks: consecutive whole segments of one partition, about
    ``target_records`` each (a segment is never split): ``(partition, boundaries)``."""
    tasks: list[tuple[str, list[int]]] = []
    for plan in plans:
        bounds = [plan.start]
        for segment in plan.segments:
            bounds.append(segment.next_seq)
            if bounds[-1] - bounds[0] >= target_records:
                tasks.append((plan.partition_id, bounds))
                bounds = [segment.next_seq]
        if len(bounds) > 1:
            tasks.append((plan.partition_id, bounds))
    return tasks


def chunk_records(plans: Sequence[BatchPlan], parallelism: int) -> int:
    """Records per task: enough tasks for every core twice over, none below the minimum
    (each task writes its own files: fewer, larger files beat more parallelism)."""
    total = sum(p.records for p in plans)
    return max(C.COMPACTION_MIN_CHUNK_RECORDS, -(-total // max(1, 2 * parallelism)))


def write_chunks(
    spark: SparkSession, args: JobArgs, plans: Sequence[BatchPlan], run_id: str
) -> list[dict[str, Any]]:
    """The executors fetch, decode and write each chunk as data files (one per arrival
    day); the stats of every file written."""
    from shardlog.spark.io import CHUNK_TASK_SCHEMA, FILE_STATS_SCHEMA, ChunkWriter

    parallelism = spark.sparkContext.defaultParallelism
    tasks = chunks(plans, chunk_records(plans, parallelism))
    if not tasks:
        return []
    task_df = spark.createDataFrame(
        spark.sparkContext.parallelize(tasks, len(tasks)), CHUNK_TASK_SCHEMA
    )
    writer = ChunkWriter(args.config(), args.lake(), run_id)
    return [row.asDict() for row in task_df.mapInArrow(writer, FILE_STATS_SCHEMA).collect()]


# --- 4. commit ---------------------------------------------------------------------------
def check_files(plans: Sequence[BatchPlan], files: Sequence[dict[str, Any]]) -> None:
    """Commit nothing unless each batch's files hold exactly its records."""
    for plan in plans:
        mine = [f for f in files if f["partition_id"] == plan.partition_id]
        if not plan.records and not mine:  # all trimmed: the watermark moves alone
            continue
        count = sum(f["records"] for f in mine)
        low = min((f["first_seq"] for f in mine), default=None)
        high = max((f["last_seq"] for f in mine), default=None)
        if (count, low, high) != (plan.records, plan.start, plan.end - 1):
            raise CompactionError(
                f"{plan.partition_id}: batch [{plan.start}, {plan.end}) wrote {count} records "
                f"over seqs [{low}, {high}]; nothing is committed"
            )


def commit_batches(
    table: Table,
    settings: LakeSettings,
    plans: Sequence[BatchPlan],
    files: Sequence[dict[str, Any]],
    run_id: str,
) -> CommitResult:
    """Append the files and the batches' ends in one snapshot (``LakeConflictError`` if
    another run appended any of these partitions first)."""
    batch = LakeAppend(
        ranges={p.partition_id: (p.follows, p.end) for p in plans},
        files=[s3_uri(settings.bucket, f["file_key"]) for f in files],
        run_id=run_id,
        watermarks_only=not files,  # only partitions trimmed before the table read them
    )
    return append(table, batch)


def remove_files(
    clients: Clients, settings: LakeSettings, table: Table, files: Sequence[dict[str, Any]]
) -> list[str]:
    """Delete the files of a run whose commit is provably not in the table (a lost race),
    each only if the table, read afresh, references it from no snapshot: a file the table
    may reference is never deleted. The keys deleted."""
    from shardlog.lake.references import referenced_files

    referenced = referenced_files(table.refresh())
    keys = [f["file_key"] for f in files]
    doomed = [k for k in keys if s3_uri(settings.bucket, k) not in referenced]
    for start in range(0, len(doomed), 1000):  # DeleteObjects takes 1,000 keys at most
        clients.s3.delete_objects(
            Bucket=settings.bucket,
            Delete={"Objects": [{"Key": k} for k in doomed[start : start + 1000]], "Quiet": True},
        )
    return doomed


# --- 5. mirror ---------------------------------------------------------------------------
class Mirrored(Protocol):
    """What a run's report records of its mirror (CompactionReport, TypedReport)."""

    conflicts: list[str]
    ended: list[str]


def mirror_watermarks(
    store: WatermarkStore,
    partitions: Sequence[PartitionInfo],
    watermarks: Mapping[str, int],
    report: Mirrored,
) -> None:
    """Copy the table's watermarks to its reader's items (``$compaction`` for the raw table;
    ``SHARD_END`` once an ENDED partition is all in the table), writing only the items that
    differ. Never read back by compaction as the truth."""
    mirrored = store.read_all()
    for partition in partitions:
        pid = partition.partition_id
        mark = watermarks.get(pid, 0)
        ended = partition.state == C.STATE_ENDED and mark >= partition.next_seq
        current = mirrored.get(pid)
        if current is not None and (current.ended, current.next_seq) == (ended, mark):
            continue
        if current is not None and current.ended:
            continue
        try:
            store.mirror(current or store.read(pid), mark, ended=ended)
        except WatermarkConflictError as exc:  # a concurrent run mirrors the same table
            report.conflicts.append(str(exc))
            continue
        if ended:
            report.ended.append(pid)


# --- the run, steps 2 to 5 -----------------------------------------------------------------
WriteFiles = Callable[[Sequence[BatchPlan]], list[dict[str, Any]]]


def run_compaction(
    clients: Clients,
    args: JobArgs,
    table: Table,
    report: CompactionReport,
    write: WriteFiles,
) -> CompactionReport:
    """Steps 2 to 5 on the driver, on the table opened in step 1; ``write`` is step 3 (the
    executors' Spark job in ``spark_jobs/compact.py``; plain pyarrow in the lake model).

    Only a commit refused as stale (``LakeConflictError``: provably in no snapshot) makes
    the run remove its files; a commit whose outcome is unknown (``LakeCommitUnknownError``)
    fails the run with every file kept: the next run reads the table and finds out.
    """
    settings = args.lake()
    with report.phase("plan"):
        reader = LakeReader.open(clients, args.config().tables, lake_reader())
        partitions = reader.partitions
        report.partitions_read = "live" if reader.caught_up else "all"
        marks = table_watermarks(table)
        plans = plan_batches(clients, args, marks, partitions)
        report.trimmed = {p.partition_id: p.trimmed for p in plans if p.trimmed}
    with report.phase("write"):
        files = write(plans)
    if plans:
        with report.phase("check"):
            check_files(plans, files)
        with report.phase("commit"):
            try:
                committed = commit_batches(table, settings, plans, files, report.run_id)
            except LakeConflictError as exc:
                report.conflicts.append(str(exc))
                remove_files(clients, settings, table, files)
                plans, files = [], []
                marks = table_watermarks(table)  # remove_files read it afresh
            else:
                report.snapshot_id, marks = committed.snapshot_id, dict(committed.watermarks)
    with report.phase("mirror"):
        mirror_watermarks(WatermarkStore(clients, args.consumers_table), partitions, marks, report)
        reader.finish(marks)
    return summarize(report, plans, files)


def summarize(
    report: CompactionReport, plans: Sequence[BatchPlan], files: Sequence[dict[str, Any]]
) -> CompactionReport:
    """Fill the report with what the run committed."""
    report.batches = [
        {"partitionId": p.partition_id, "start": p.start, "end": p.end} for p in plans
    ]
    report.records = sum(p.records for p in plans)
    report.files = len(files)
    report.bytes = sum(f["bytes"] for f in files)
    return report
