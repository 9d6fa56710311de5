"""Typed compaction: the log's JSON payloads into a declared table and its dead-letter table,
exactly once, by the raw table's watermark protocol (``shardlog.lake.commit``).

A declared table ``T`` (``shardlog.lake.declared``) has two Iceberg tables, each with its
own watermarks in its own snapshots: ``T`` (the records that are T's and fit its schema)
and ``T_rejected`` (the records that are T's and do not: never dropped). Per run:

1. **open** both tables (created on first use; T's schema evolved to the declaration,
   an incompatible change refused naming the field: ``shardlog.lake.evolution``) and read
   their watermarks ``W_T``, ``W_R``;
2. **plan** per partition whole committed segments from ``W_T`` (``plan_batches``, as the
   raw table's compaction);
3. **write** (executors, one Spark job): read the chunks' records (``BatchRecords``: from
   the raw table's files this job's raw compaction just committed when they hold the
   chunk, ``RawBatch``, else from the log's segments), parse them
   (``shardlog.spark.payloads``: DataFrame transforms),
   and write each chunk's typed rows as T's data files and its rejected rows at or above
   ``W_R`` as T_rejected's (``TypedWriter``); rejected rows below ``W_R`` are already in
   T_rejected and are skipped. Each chunk also reports what it saw;
4. **check** (driver): per partition the chunks saw exactly the batch, and typed +
   rejected + skipped + not the table's = seen (``check_typed``); else nothing commits;
5. **commit T_rejected first**, for the partitions with rejected rows: range
   ``[W_R, end)``, its files. ``LakeConflictError``: another run moved ``W_R``: this run
   commits nothing and removes its files;
6. **commit T**: range ``[W_T, end)`` of every batch with its typed files (possibly none:
   the watermarks move all the same). ``LakeConflictError``: another run appended T first:
   this run removes its typed files; its T_rejected commit, if any, stands. An **upsert
   table** (``mode: upsert``) instead folds the typed files' rows, staged, into T: the
   newest row per key, one snapshot, the same watermark check (``shardlog.lake.upsert``);
   it reads a child partition only once each parent is wholly in T (step 2).

Where a chunk's records come from does not change what it holds: the raw table's commit in
this job holds each of the partition's records in ``[start, end)`` once, and the reader
checks a chunk's rows are its seqs, each once, in order (as ``check_segment`` does a
segment's): so the log is decoded once per run, not once per table.

Why exactly once: the parse is a function of the record and the declaration, so two runs
find the same rejected records in the same seqs. ``W_R`` is the next seq whose rejection
T_rejected does not hold: a rejected record below it is in T_rejected, one at or above it
is not (a run commits T_rejected before T, so when T's watermark passes a rejected
record, T_rejected holds it; a partition with no rejected record in a batch keeps its
``W_R``, which stays true). Each table's append is the raw table's exactly-once commit,
so a lost answer, a crash or a race is what docs/LAKE.md says for ``events``:

- a crash before 5: no file committed; the next run plans again from ``W_T``;
- a crash after 5, before 6: T_rejected holds the batch's rejects (``W_R`` moved); the next
  run plans from ``W_T`` and skips them;
- two runs on the same batch: the first to commit T_rejected wins it (the other's is stale
  and commits nothing); the first to commit T wins T;
- a commit's outcome unknown: ``LakeCommitUnknownError``: the run fails, every file kept.
"""

from __future__ import annotations

import io
import itertools
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from shardlog import constants as C
from shardlog.aws import Clients
from shardlog.config import ShardlogConfig
from shardlog.dal.consumers import lake_reader
from shardlog.lake.catalog import open_table
from shardlog.lake.commit import LakeAppend, append, table_watermarks
from shardlog.lake.declared import LOG_COLUMNS, LakeTableDeclaration, rejected_schema
from shardlog.lake.evolution import evolve
from shardlog.lake.exceptions import LakeConflictError
from shardlog.lake.files import EVENT_RECORDS, SegmentMapping, s3_uri, write_rows
from shardlog.lake.schema import EVENTS, TableSchema
from shardlog.lake.settings import LakeSettings
from shardlog.lake.upsert import LakeUpsert, UpsertTarget, ready, upsert
from shardlog.retirement import LakeReader
from shardlog.segments import SegmentStore, check_segment
from shardlog.spark.compaction import (
    BatchPlan,
    chunk_records,
    chunks,
    mirror_watermarks,
    plan_batches,
    remove_files,
)
from shardlog.spark.exceptions import CompactionError
from shardlog.spark.io import ARROW_FILE_STATS, FILE_STATS_SCHEMA
from shardlog.spark.jobs import JobArgs
from shardlog.spark.payloads import DATA, ERROR_FIELD, ERROR_REASON, MATCHED, parse_payloads
from shardlog.spark.watermark import WatermarkStore
from shardlog.tables import PartitionInfo

if TYPE_CHECKING:  # pragma: no cover
    from pyiceberg.table import Table
    from pyspark.sql import SparkSession

TYPED, REJECTS = "typed", "rejected"  # the two tables' files
SEEN, SKIPPED, FILTERED = "seen", "skipped", "filtered"  # a chunk's counts (no file)
FROM_RAW = "from_raw"  # a chunk read from the raw table's files (the driver's count)
# The raw compaction's file stats, and a kind: which table's file, or a chunk's count.
STATS_SCHEMA = f"kind string, {FILE_STATS_SCHEMA}"
_ARROW_STATS = pa.schema([pa.field("kind", pa.string()), *ARROW_FILE_STATS])
# What the typed job reads of a record: the columns the parse and the writer use (the log's
# own columns and the payload), in the raw table's order and types. A segment's Kinesis
# sequence number and commit time stay out: each column read crosses into the JVM and is
# copied there per record.
PARSE_INPUT = SegmentMapping(
    TableSchema(
        tuple(c for c in EVENTS.columns if c.name in (*LOG_COLUMNS, "data")),
        EVENTS.identifier,
        EVENTS.partition,
        EVENTS.sort_by,
    ),
    {name: EVENT_RECORDS.mappers[name] for name in (*LOG_COLUMNS, "data")},
)


@dataclass
class TypedReport:
    """What one run did to one declared table and its dead-letter table."""

    table: str
    records: int = 0  # the batch: its records (from the log, or the raw run's files)
    typed: int = 0
    rejected: int = 0  # newly in the dead-letter table
    filtered: int = 0  # not the table's (its record filter)
    from_raw: int = 0  # of the batch, read from the raw run's files (the rest: the log's)
    files: int = 0
    snapshot_id: int | None = None
    rejected_snapshot_id: int | None = None
    conflicts: list[str] = field(default_factory=list)
    ended: list[str] = field(default_factory=list)  # mirrored SHARD_END (all in the table)
    partitions_read: str = ""  # "live" (caught up: the live set) or "all"
    trimmed: dict[str, int] = field(default_factory=dict)  # records gone before it read them
    waiting: list[str] = field(default_factory=list)  # upsert: partitions whose parents lag
    upsert: dict[str, int] = field(default_factory=dict)  # upsert: the fold's counts

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class TypedTables:
    """A declared table's two Iceberg tables, where they live, and their shapes."""

    declared: LakeTableDeclaration
    typed: LakeSettings
    rejected: LakeSettings

    @classmethod
    def beside(cls, raw: LakeSettings, declared: LakeTableDeclaration) -> TypedTables:
        """Beside the raw table: same catalog, database and bucket."""
        return cls(declared, raw.sibling(declared.name), raw.sibling(declared.rejected_name))

    def open(self, *, create: bool = True) -> tuple[Table, Table]:
        """The typed table and the dead-letter table, each checked to have its shape; with
        ``create``, the typed table's schema evolved to the declaration first
        (``shardlog.lake.evolution``: an incompatible change is refused, naming the field)."""
        declared = self.declared
        return (
            open_table(
                self.typed,
                create=create,
                schema=declared.table_schema(),
                evolve=(lambda table: evolve(table, declared)) if create else None,
            ),
            open_table(self.rejected, create=create, schema=rejected_schema()),
        )


# --- 3. write (executors) ----------------------------------------------------------------
@dataclass(frozen=True)
class RawBatch:
    """What this job's raw compaction committed to the raw table (``spark_jobs.compact``):
    per partition the seqs ``[start, end)`` of its batch, and the data files holding them
    (their stats: ``file_key``, ``partition_id``, ``first_seq``, ``last_seq``). A typed
    table reads a chunk the batch holds from these files: the log decoded once a run."""

    bucket: str
    ranges: Mapping[str, tuple[int, int]]
    files: Sequence[Mapping[str, Any]]

    def holding(self, partition_id: str, start: int, end: int) -> list[str]:
        """The keys of the files holding the partition's seqs ``[start, end)``; [] unless
        the batch holds every one of them."""
        low, high = self.ranges.get(partition_id, (0, 0))
        if not low <= start < end <= high:
            return []
        return [
            f["file_key"]
            for f in self.files
            if f["partition_id"] == partition_id and f["first_seq"] < end and f["last_seq"] >= start
        ]


# A typed job's task: a chunk (a partition's consecutive whole segments) and, when the raw
# batch holds it, the raw files to read it from.
TASK_SCHEMA = "partition_id string, bounds array<long>, raw_files array<string>"


def typed_tasks(
    plans: Sequence[BatchPlan], target_records: int, raw: RawBatch | None
) -> list[tuple[str, list[int], list[str]]]:
    """The batches' chunks (``chunks``), each cut where the raw batch starts and ends (at
    segment boundaries), so the part it holds is read from its files, the rest from the
    log: ``(partition, boundaries, raw files)``."""
    ranges = raw.ranges if raw else {}
    tasks = []
    for partition_id, bounds in chunks(plans, target_records):
        cuts = [
            bounds.index(c) for c in sorted(set(ranges.get(partition_id, ()))) if c in bounds[1:-1]
        ]
        for lo, hi in itertools.pairwise([0, *cuts, len(bounds) - 1]):
            part = bounds[lo : hi + 1]
            files = raw.holding(partition_id, part[0], part[-1]) if raw else []
            tasks.append((partition_id, part, files))
    return tasks


@dataclass(frozen=True)
class BatchRecords:
    """A task per chunk: its records in the columns the typed job reads (``PARSE_INPUT``),
    from the raw files it names (its rows checked to be the chunk's seqs, each once, in
    order) or else from its segments (each checked to be the one planned: density)."""

    config: ShardlogConfig
    raw_bucket: str = ""  # where the raw table's files live (``RawBatch.bucket``)

    def __call__(self, tasks: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        clients = self.config.clients()
        store = SegmentStore(clients, self.config.bucket)
        for batch in tasks:
            for task in batch.to_pylist():
                partition_id, bounds = task["partition_id"], task["bounds"]
                if task["raw_files"]:
                    rows = raw_rows(clients.s3, self.raw_bucket, task["raw_files"])
                    chunk = chunk_rows(rows, partition_id, bounds[0], bounds[-1])
                    yield from chunk.to_batches(max_chunksize=C.DEFAULT_SEGMENT_MAX_RECORDS)
                    continue
                for first_seq, next_seq in itertools.pairwise(bounds):
                    segment = store.fetch(partition_id, first_seq)
                    check_segment(segment, partition_id, first_seq, next_seq)
                    yield PARSE_INPUT.records(segment)


def raw_rows(s3: Any, bucket: str, keys: Sequence[str]) -> pa.Table:
    """The ``PARSE_INPUT`` columns of the raw table's files (one GetObject each)."""
    names = list(PARSE_INPUT.schema.names)
    parts = [
        pq.read_table(pa.BufferReader(s3.get_object(Bucket=bucket, Key=key)["Body"].read()),
                      columns=names, partitioning=None)
        for key in keys
    ]  # fmt: skip
    return pa.concat_tables(parts).cast(PARSE_INPUT.schema.arrow())


def chunk_rows(rows: pa.Table, partition_id: str, start: int, end: int) -> pa.Table:
    """The rows of the partition's seqs ``[start, end)``, in seq order; ``CompactionError``
    unless each of those seqs is there exactly once (the chunk whole, nothing doubled)."""
    mine = rows.filter(
        pc.and_(
            pc.equal(rows.column("partition_id"), partition_id),
            pc.and_(pc.greater_equal(rows.column("seq"), start), pc.less(rows.column("seq"), end)),
        )
    ).sort_by("seq")
    expected = pa.array(range(start, end), pa.int64())
    if mine.num_rows != end - start or not mine.column("seq").combine_chunks().equals(expected):
        raise CompactionError(
            f"{partition_id}: the raw table's files hold {mine.num_rows} rows of seqs "
            f"[{start}, {end}), not each of them once; nothing is committed"
        )
    return mine


@dataclass(frozen=True)
class TypedWriter:
    """A task's parsed records (``parse_payloads``) as the typed table's files and the
    dead-letter table's (rejected rows below ``rejected_marks`` skipped: already there),
    one per (partition, arrival day) each; emits their stats and the task's counts."""

    config: ShardlogConfig
    tables: TypedTables
    rejected_marks: Mapping[str, int]
    run_id: str

    def __call__(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        received = list(batches)
        if not received:
            return
        rows = pa.Table.from_batches(received)
        s3 = self.config.clients().s3
        matched = pc.fill_null(rows.column(MATCHED), False)
        fits = pc.is_null(rows.column(ERROR_FIELD))
        refused = rows.filter(pc.and_(matched, pc.invert(fits)))
        below = pc.less(refused.column("seq"), self._marks(refused))
        stats = _counts(rows, SEEN) + _counts(rows.filter(pc.invert(matched)), FILTERED)
        stats += _counts(refused.filter(below), SKIPPED)
        typed = rows.filter(pc.and_(matched, fits))
        schema = self.tables.declared.typed_schema()
        for kind, settings, part, shape in (
            (TYPED, self.tables.typed, typed.select(list(schema.names)), schema),
            (
                REJECTS,
                self.tables.rejected,
                _rejected_rows(refused.filter(pc.invert(below))),
                rejected_schema(),
            ),
        ):
            for f in write_rows(s3, settings, part, self.run_id, shape):
                stats.append({"kind": kind, **f.stats()})
        yield pa.RecordBatch.from_pylist(
            [{k: s.get(k) for k in _ARROW_STATS.names} for s in stats], schema=_ARROW_STATS
        )

    def _marks(self, rows: pa.Table) -> pa.Array:
        """Each row's partition's ``rejected_marks`` (0 for a partition without one)."""
        known = sorted(self.rejected_marks)
        marks = pa.array([self.rejected_marks[p] for p in known], pa.int64())
        index = pc.index_in(rows.column("partition_id"), value_set=pa.array(known, pa.string()))
        return pc.fill_null(pc.take(marks, index), 0)


def _rejected_rows(rows: pa.Table) -> pa.Table:
    """Rejected records in the dead-letter table's columns."""
    columns = [rows.column(c) for c in LOG_COLUMNS]
    columns += [rows.column(ERROR_FIELD), rows.column(ERROR_REASON), rows.column(DATA)]
    return pa.Table.from_arrays(columns, names=list(rejected_schema().names))


def _counts(rows: pa.Table, kind: str) -> list[dict[str, Any]]:
    """Per partition: how many rows, and their lowest and highest seq."""
    groups = rows.group_by("partition_id").aggregate(
        [([], "count_all"), ("seq", "min"), ("seq", "max")]
    )
    return [
        {"kind": kind, "file_key": "", "partition_id": g["partition_id"],
         "records": g["count_all"], "bytes": 0, "first_seq": g["seq_min"],
         "last_seq": g["seq_max"]}
        for g in sorted(groups.to_pylist(), key=lambda g: g["partition_id"])
    ]  # fmt: skip


def write_typed(
    spark: SparkSession,
    args: JobArgs,
    tables: TypedTables,
    plans: Sequence[BatchPlan],
    rejected_marks: Mapping[str, int],
    run_id: str,
    raw: RawBatch | None = None,
) -> list[dict[str, Any]]:
    """Step 3: one Spark job reads, parses and writes every chunk (what ``raw`` holds read
    from its files); the stats rows."""
    from pyspark.sql import functions as F

    target = chunk_records(plans, spark.sparkContext.defaultParallelism)
    tasks = typed_tasks(plans, target, raw)
    if not tasks:
        return []
    task_df = spark.createDataFrame(spark.sparkContext.parallelize(tasks, len(tasks)), TASK_SCHEMA)
    reader = BatchRecords(args.config(), raw.bucket if raw else "")
    records = task_df.mapInArrow(reader, PARSE_INPUT.schema.spark_ddl())
    parsed = parse_payloads(records, tables.declared)
    # The writer needs a record's bytes only for the dead-letter table: a typed row's stay
    # behind (each column crosses from the JVM to the writer per record).
    parsed = parsed.withColumn(DATA, F.when(F.col(ERROR_FIELD).isNotNull(), F.col(DATA)))
    writer = TypedWriter(args.config(), tables, dict(rejected_marks), run_id)
    stats = [row.asDict() for row in parsed.mapInArrow(writer, STATS_SCHEMA).collect()]
    return stats + [
        {"kind": FROM_RAW, "file_key": "", "partition_id": partition_id,
         "records": bounds[-1] - bounds[0], "bytes": 0, "first_seq": bounds[0],
         "last_seq": bounds[-1] - 1}
        for partition_id, bounds, files in tasks
        if files
    ]  # fmt: skip


# --- 4. check ----------------------------------------------------------------------------
def check_typed(plans: Sequence[BatchPlan], stats: Sequence[dict[str, Any]]) -> None:
    """Commit nothing unless each batch was seen whole and every record it holds is
    accounted for once: typed, rejected, skipped (already rejected) or not the table's."""
    for plan in plans:
        mine = [s for s in stats if s["partition_id"] == plan.partition_id]
        if not plan.records and not mine:  # all trimmed: the watermark moves alone
            continue
        total = {k: sum(s["records"] for s in mine if s["kind"] == k) for k in _KINDS}
        seen = [s for s in mine if s["kind"] == SEEN]
        span = (min((s["first_seq"] for s in seen), default=None),
                max((s["last_seq"] for s in seen), default=None))  # fmt: skip
        outside = [
            s["file_key"] for s in mine if s["file_key"]
            and not plan.start <= s["first_seq"] <= s["last_seq"] < plan.end
        ]  # fmt: skip
        accounted = total[TYPED] + total[REJECTS] + total[SKIPPED] + total[FILTERED]
        whole = (total[SEEN], span) == (plan.records, (plan.start, plan.end - 1))
        if not whole or outside or accounted != total[SEEN]:
            raise CompactionError(
                f"{plan.partition_id}: batch [{plan.start}, {plan.end}) saw {total[SEEN]} "
                f"records over seqs {span}, accounted for {accounted} ({total}), files "
                f"outside the batch: {outside}; nothing is committed"
            )


_KINDS = (SEEN, TYPED, REJECTS, SKIPPED, FILTERED)


# --- 5, 6. commit ------------------------------------------------------------------------
WriteTyped = Callable[[Sequence[BatchPlan], Mapping[str, int]], list[dict[str, Any]]]


def run_typed(
    clients: Clients, args: JobArgs, tables: TypedTables, run_id: str, write: WriteTyped
) -> TypedReport:
    """Steps 1 to 6 for one declared table; ``write`` is step 3 (``write_typed``)."""
    report = TypedReport(table=tables.typed.table)
    typed, rejected = tables.open()
    group = lake_reader(tables.declared.name)
    reader = LakeReader.open(clients, args.config().tables, group)
    report.partitions_read = "live" if reader.caught_up else "all"
    marks = table_watermarks(typed)
    partitions = reader.partitions
    if tables.declared.upsert:  # a child only once its parents are wholly in (log order)
        readable, report.waiting = ready(partitions, marks)
        partitions = [p for p in partitions if p.partition_id in readable]
    plans = plan_batches(clients, args, marks, partitions)
    report.trimmed = {p.partition_id: p.trimmed for p in plans if p.trimmed}
    if plans:
        _commit(clients, tables, (typed, rejected), plans, run_id, write, report, partitions)
    marks = table_watermarks(typed.refresh())
    mirror_watermarks(
        WatermarkStore(clients, args.consumers_table, group), reader.partitions, marks, report
    )
    reader.finish(marks)
    return report


def _commit(
    clients: Clients,
    tables: TypedTables,
    opened: tuple[Table, Table],
    plans: Sequence[BatchPlan],
    run_id: str,
    write: WriteTyped,
    report: TypedReport,
    partitions: Sequence[PartitionInfo],
) -> None:
    """Steps 3 to 6 of the planned batches: write, check, commit the dead-letter table's
    append, then the typed table's (a lost race removes the run's files and commits no
    more)."""
    typed, rejected = opened
    rejected_marks = table_watermarks(rejected)
    stats = write(plans, rejected_marks)
    check_typed(plans, stats)
    typed_files = [s for s in stats if s["kind"] == TYPED]
    rejected_files = [s for s in stats if s["kind"] == REJECTS]
    report.records = sum(p.records for p in plans)
    report.filtered = sum(s["records"] for s in stats if s["kind"] == FILTERED)
    report.from_raw = sum(s["records"] for s in stats if s["kind"] == FROM_RAW)
    if rejected_files:
        ranges = {
            p.partition_id: (rejected_marks.get(p.partition_id, 0), p.end)
            for p in plans
            if any(f["partition_id"] == p.partition_id for f in rejected_files)
        }
        try:
            committed = append(rejected, _batch(tables.rejected, ranges, rejected_files, run_id))
        except LakeConflictError as exc:
            report.conflicts.append(str(exc))
            remove_files(clients, tables.rejected, rejected, rejected_files)
            remove_files(clients, tables.typed, typed, typed_files)
            return
        report.rejected_snapshot_id = committed.snapshot_id
        report.rejected = sum(f["records"] for f in rejected_files)
    ranges = {p.partition_id: (p.follows, p.end) for p in plans}
    if tables.declared.upsert:
        parents = {p.partition_id: p.parents for p in partitions}
        _upsert(clients, tables, typed, ranges, typed_files, parents, run_id, report)
        return
    try:
        committed = append(typed, _batch(tables.typed, ranges, typed_files, run_id))
    except LakeConflictError as exc:
        report.conflicts.append(str(exc))
        remove_files(clients, tables.typed, typed, typed_files)
        return
    report.snapshot_id = committed.snapshot_id
    report.typed = sum(f["records"] for f in typed_files)
    report.files = len(typed_files) + len(rejected_files)


def _upsert(
    clients: Clients,
    tables: TypedTables,
    typed: Table,
    ranges: Mapping[str, tuple[int, int]],
    staged: Sequence[dict[str, Any]],
    parents: Mapping[str, Sequence[str]],
    run_id: str,
    report: TypedReport,
) -> None:
    """Step 6 of an upsert table: the typed files written in step 3 are the batch's rows,
    staged (never committed); ``shardlog.lake.upsert`` folds them into the table in one
    snapshot. The staged files go once the fold committed or lost its race (each only if
    no snapshot references it)."""
    declared = tables.declared
    rows = read_staged(clients, tables.typed.bucket, staged, declared.typed_schema())
    batch = LakeUpsert(ranges, rows, declared.key_column(), parents, run_id)
    target = UpsertTarget(tables.typed, declared.table_schema(), clients.s3)
    try:
        result = upsert(typed, target, batch)
    except LakeConflictError as exc:
        report.conflicts.append(str(exc))
        remove_files(clients, tables.typed, typed, staged)
        return
    remove_files(clients, tables.typed, typed, staged)  # an unknown outcome keeps them
    report.snapshot_id, report.typed = result.snapshot_id, rows.num_rows
    report.files = result.files_written
    report.upsert = {
        "keys": result.keys,
        "files_read": result.files_read,
        "files_rewritten": result.files_rewritten,
        "files_written": result.files_written,
        "rows": result.rows,
    }


def read_staged(
    clients: Clients, bucket: str, staged: Sequence[dict[str, Any]], schema: TableSchema
) -> pa.Table:
    """The rows of the staged typed files (one GetObject each), in the typed table's shape."""
    bodies = [clients.s3.get_object(Bucket=bucket, Key=f["file_key"])["Body"] for f in staged]
    tables = [pq.read_table(io.BytesIO(body.read())) for body in bodies]
    return pa.concat_tables(tables) if tables else schema.arrow().empty_table()


def _batch(
    settings: LakeSettings,
    ranges: Mapping[str, tuple[int, int]],
    files: Sequence[dict[str, Any]],
    run_id: str,
) -> LakeAppend:
    return LakeAppend(
        ranges=ranges,
        files=[s3_uri(settings.bucket, f["file_key"]) for f in files],
        run_id=run_id,
        watermarks_only=True,
    )


def publish_rejections(clients: Clients, reports: Sequence[TypedReport]) -> None:
    """Each declared table's records newly refused into its dead-letter table, as one
    CloudWatch metric per table (the stack alarms on it: docs/LAKE.md)."""
    if not reports:
        return
    clients.client("cloudwatch").put_metric_data(
        Namespace=C.METRICS_NAMESPACE,
        MetricData=[
            {
                "MetricName": C.METRIC_LAKE_RECORDS_REJECTED,
                "Dimensions": [{"Name": C.DIMENSION_LAKE_TABLE, "Value": report.table}],
                "Value": report.rejected,
                "Unit": "Count",
            }
            for report in reports
        ],
    )


def compact_typed(
    spark: SparkSession,
    clients: Clients,
    args: JobArgs,
    declared: LakeTableDeclaration,
    run_id: str,
    raw: RawBatch | None = None,
) -> TypedReport:
    """One declared table's run, its executors' step through Spark; what ``raw`` (this
    job's raw commit) holds is read from the raw table's files, the rest from the log."""
    tables = TypedTables.beside(args.lake(), declared)
    return run_typed(
        clients,
        args,
        tables,
        run_id,
        lambda plans, marks: write_typed(spark, args, tables, plans, marks, run_id, raw),
    )
