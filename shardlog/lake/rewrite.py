"""Right-sized files: a day partition's small files rewritten into files near a target size,
in one Iceberg snapshot per day, exactly once, while compaction keeps appending.

**What is rewritten.** Compaction appends one file per (log partition, arrival day) a run
touched, so a day collects many small files. The table's data files are grouped by day
partition (``arrival_day``) and log partition; a file is **small** below
``small_file_bytes``. In a group, ordered by seq, consecutive small files (no other file of
the group between them) are packed in order into **bins** of at most ``target_file_bytes``;
each bin of two files or more becomes one file holding exactly their rows, sorted by seq
(the table's sort order), in the table's current schema, and named as compaction names
its files (``shardlog.lake.files.data_file_key``: log partition, first and last seq, and a
run id of the rewrite's own, ``rewrite<hex>``, so no name is ever another's). Every file
still holds one log partition's seq range, so the backfill's swap
(``shardlog.lake.replace``) reads its range from its name as before. Left alone: files not
named as shardlog names them (another engine's: their seqs are unknown), files that delete
files apply to (a new file would bring deleted rows back), files of another partition
spec, and, for a dead-letter table, files not wholly below its typed table's watermark
(``below``: the refusals of a batch whose typed commit is still to come, which the
backfill keeps apart; a file merged across that bound would straddle it).

**One day, per attempt** (each attempt under a run id of its own, ``shardlog.run-id``):

1. **read**: refresh the table; its watermarks (``shardlog.lake.commit.table_watermarks``);
2. **recognise**: a snapshot carrying the run id of an earlier attempt is that attempt's
   commit, landed (its answer was lost): done;
3. **plan** the day's bins from the snapshot read; none: done;
4. **write** each bin's file (read through pyiceberg, so evolved columns come as the table
   has them now), checked to hold exactly the bin's rows: as many, one log partition,
   seqs strictly increasing;
5. **commit** one ``overwrite`` snapshot based on the snapshot read: delete exactly the
   bins' files, add the new ones, and record in its summary the watermarks read in 1,
   unchanged, with every other ``shardlog.`` property of the snapshot they were read from
   (an upsert table's clocks: ``shardlog.lake.upsert``), and the run id;
6. a failed commit is an **unknown outcome**, as for the append (``shardlog.lake.commit``):
   back to 1, at most ``DEFAULT_COMMIT_ATTEMPTS`` commits, else ``LakeCommitUnknownError``.

**Why never a row lost or doubled.** The commit is based on the snapshot read, and Glue
refuses an ``UpdateTable`` whose table moved since (``shardlog.local.glue_fidelity``
locally): it lands only on the snapshot it was planned from, where the files it deletes
are, holding exactly the rows of the files it adds, and the watermarks are those it
records. A compaction's append that lands between 1 and 5 makes 5 refused: the next
attempt re-reads and re-plans (the appended file may join a bin). An append that commits
after the rewrite is based on it (its own commit re-reads the table, finds the watermarks
it started from: the rewrite carries them) and adds only rows at or above them. A backfill
swap racing a rewrite is refused the same way and re-plans from the other's snapshot.

**Nothing is deleted from S3.** The replaced files stay referenced by the older snapshots
until expiry, then are orphans that ``shardlog.lake.maintenance`` removes after their
grace; so are the files of an attempt that did not land. The rewrite's snapshot carries
the watermarks, so compaction reads them from it, and expiry's protected chain
(``watermark_chain``) is the current snapshot alone.
"""

from __future__ import annotations

import tempfile
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import IO, TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from shardlog import constants as C
from shardlog.lake.commit import (
    DEFAULT_COMMIT_ATTEMPTS,
    RUN_PROPERTY,
    WATERMARKS_PROPERTY,
    _read,
    commit_failures,
    own_snapshot,
    snapshot_watermarks,
    table_watermarks,
    watermark_chain,
)
from shardlog.lake.exceptions import LakeCommitUnknownError, LakeError, LakeSchemaError
from shardlog.lake.files import data_file_key, s3_uri
from shardlog.lake.replace import file_range, overwrite_files
from shardlog.lake.schema import arrow_type
from shardlog.lake.settings import LakeSettings

if TYPE_CHECKING:  # pragma: no cover
    from pyiceberg.manifest import DataFile
    from pyiceberg.table import FileScanTask, Table

MIB = 2**20
RUN_PREFIX = "rewrite"  # run ids of the rewrite's files: compaction's are plain hex
# Rows a written file buffers before it writes them as one row group (in-memory bytes).
_ROW_GROUP_BYTES = 64 * MIB
_EPOCH = date(1970, 1, 1)
# The files an attempt wrote: (s3:// URI, bytes) each.
Written = Sequence[tuple[str, int]]


@dataclass(frozen=True)
class RewriteSettings:
    """How large a file should be (``target_file_bytes``), and below what size a file is
    small and rewritten (``small_file_bytes``); each refused past its limits, by name."""

    target_file_bytes: int = C.DEFAULT_LAKE_TARGET_FILE_MIB * MIB
    small_file_bytes: int = C.DEFAULT_LAKE_SMALL_FILE_MIB * MIB

    def __post_init__(self) -> None:
        top = C.MAX_LAKE_TARGET_FILE_MIB * MIB
        if not 1 <= self.target_file_bytes <= top:
            raise ValueError(
                f"target_file_bytes must be 1..{top} ({C.MAX_LAKE_TARGET_FILE_MIB} MiB: a "
                f"file is one PutObject), not {self.target_file_bytes}"
            )
        if not 1 <= self.small_file_bytes <= self.target_file_bytes:
            raise ValueError(
                f"small_file_bytes must be 1..target_file_bytes ({self.target_file_bytes}): "
                f"files above the target are not small, not {self.small_file_bytes}"
            )

    @classmethod
    def of_mib(cls, target_file_mib: int, small_file_mib: int) -> RewriteSettings:
        """From the command's and the job's options, in MiB."""
        return cls(target_file_mib * MIB, small_file_mib * MIB)


@dataclass(frozen=True)
class Bin:
    """Consecutive small files of one log partition and day: one new file."""

    partition_id: str
    files: tuple[DataFile, ...]

    @property
    def records(self) -> int:
        return sum(f.record_count for f in self.files)

    @property
    def bytes(self) -> int:
        return sum(f.file_size_in_bytes for f in self.files)


@dataclass(frozen=True)
class DayPlan:
    """A day partition's bins, planned from one snapshot, and that snapshot's watermarks."""

    day: str
    bins: tuple[Bin, ...]
    files: int  # the day's data files in the snapshot
    watermarks: Mapping[str, int]
    carried: Mapping[str, str]  # the other shardlog. properties beside the watermarks

    @property
    def replaced(self) -> set[str]:
        return {f.file_path for b in self.bins for f in b.files}


@dataclass(frozen=True)
class DayRewrite:
    """What a day's rewrite did: the day's file counts before and after, the files it
    replaced and wrote, their rows and bytes, and its snapshot."""

    day: str
    files_before: int
    files_after: int
    replaced: int
    written: int
    records: int
    bytes_before: int
    bytes_after: int
    attempts: int
    snapshot_id: int


def rewrite_table(
    s3: Any,
    settings: LakeSettings,
    table: Table,
    rewrite: RewriteSettings,
    *,
    below: Mapping[str, int] | None = None,
    max_attempts: int = DEFAULT_COMMIT_ATTEMPTS,
) -> list[DayRewrite]:
    """Rewrite each day partition of the table that has a bin, one snapshot per day. A
    table whose watermarks are unknown (only another engine's snapshots) is left alone."""
    table.refresh()
    chain = watermark_chain(table)
    if not chain or snapshot_watermarks(chain[-1]) is None:
        return []
    days = sorted({plan.day for plan in plan_days(table, rewrite, below) if plan.bins})
    done = []
    for day in days:
        result = rewrite_day(
            s3, settings, table, day, rewrite, below=below, max_attempts=max_attempts
        )
        if result is not None:
            done.append(result)
    return done


def rewrite_day(
    s3: Any,
    settings: LakeSettings,
    table: Table,
    day: str,
    rewrite: RewriteSettings,
    *,
    below: Mapping[str, int] | None = None,
    max_attempts: int = DEFAULT_COMMIT_ATTEMPTS,
) -> DayRewrite | None:
    """Rewrite one day partition's bins in one snapshot, exactly once (module docstring);
    None when the day has none left. ``LakeCommitUnknownError``: the outcome could not be
    found out (the next maintenance reads the table)."""
    sent: dict[str, tuple[DayPlan, Written]] = {}  # run id -> its plan and files written
    failure = ""
    while True:
        _read(table, failure)
        landed = _landed(table, sent)
        if landed is not None:
            return landed
        plan = plan_day(table, day, rewrite, below)
        if not plan.bins:
            return None
        if len(sent) == max_attempts:
            raise LakeCommitUnknownError(
                f"the rewrite of {'.'.join(table.name())} day {day} was not confirmed after "
                f"{len(sent)} commits ({failure}); delete nothing: the next maintenance "
                "reads the table"
            )
        run_id = f"{RUN_PREFIX}{uuid.uuid4().hex[:16]}"
        written = [write_bin(s3, settings, table, day, b, run_id) for b in plan.bins]
        sent[run_id] = (plan, written)
        try:
            snapshot = overwrite_files(
                table,
                _replaced_by(plan),
                [uri for uri, _ in written],
                plan.watermarks,
                run_id,
                plan.carried,
            )
        except commit_failures() as exc:
            failure = f"{type(exc).__name__}: {exc}"
            continue
        return _result(plan, written, len(sent), snapshot.snapshot_id)


def _replaced_by(plan: DayPlan) -> Callable[[list[DataFile]], list[DataFile]]:
    """The commit's choice of files to delete: exactly the plan's, all present (the commit
    is based on the snapshot the plan was read from)."""

    def choose(current: list[DataFile]) -> list[DataFile]:
        doomed = [f for f in current if f.file_path in plan.replaced]
        if len(doomed) != len(plan.replaced):
            raise LakeError(f"day {plan.day}: files to rewrite are missing from the snapshot")
        return doomed

    return choose


def _landed(table: Table, sent: Mapping[str, tuple[DayPlan, Written]]) -> DayRewrite | None:
    """An earlier attempt's commit, if the table has it (its answer was lost)."""
    for run_id, (plan, written) in sent.items():
        own = own_snapshot(table, run_id)
        if own is not None:
            return _result(plan, written, len(sent), own.snapshot_id)
    return None


def _result(plan: DayPlan, written: Written, attempts: int, snapshot_id: int) -> DayRewrite:
    replaced = sum(len(b.files) for b in plan.bins)
    return DayRewrite(
        day=plan.day,
        files_before=plan.files,
        files_after=plan.files - replaced + len(written),
        replaced=replaced,
        written=len(written),
        records=sum(b.records for b in plan.bins),
        bytes_before=sum(b.bytes for b in plan.bins),
        bytes_after=sum(size for _, size in written),
        attempts=attempts,
        snapshot_id=snapshot_id,
    )


# --- plan --------------------------------------------------------------------------------
def plan_days(
    table: Table, rewrite: RewriteSettings, below: Mapping[str, int] | None = None
) -> list[DayPlan]:
    """Every day partition's plan, from the table's current snapshot."""
    return _plans(table, table.scan().plan_files(), rewrite, below)


def plan_day(
    table: Table, day: str, rewrite: RewriteSettings, below: Mapping[str, int] | None = None
) -> DayPlan:
    """One day partition's plan, from the table's current snapshot (manifests of other
    days skipped by their partition values)."""
    from shardlog.lake.query import LakeQuery, row_filter

    start = datetime.combine(date.fromisoformat(day), time(), UTC)
    window = row_filter(LakeQuery(since=start, until=start + timedelta(days=1)))
    plans = _plans(table, table.scan(row_filter=window).plan_files(), rewrite, below)
    found = [p for p in plans if p.day == day]
    return found[0] if found else DayPlan(day, (), 0, table_watermarks(table), {})


def _plans(
    table: Table,
    tasks: Iterable[FileScanTask],
    rewrite: RewriteSettings,
    below: Mapping[str, int] | None,
) -> list[DayPlan]:
    """The tasks' files grouped by day and log partition, each group's bins (``_bins``):
    only shardlog's files that no delete file applies to are candidates."""
    groups: dict[str, dict[str, list[tuple[int, int, DataFile]]]] = {}
    counts: dict[str, int] = {}
    for task in tasks:
        day = _day_of(table, task.file)
        if day is None:
            continue
        counts[day] = counts.get(day, 0) + 1
        named = None if task.delete_files else _named(task.file)
        if named is not None:
            partition_id, first, last = named
            group = groups.setdefault(day, {}).setdefault(partition_id, [])
            group.append((first, last, task.file))
    marks, carried = table_watermarks(table), _carried(table)
    plans = []
    for day in sorted(counts):
        bins: list[Bin] = []
        for partition_id, group in sorted(groups.get(day, {}).items()):
            bound = None if below is None else below.get(partition_id, 0)
            bins += _bins(partition_id, sorted(group, key=lambda g: g[:2]), rewrite, bound)
        plans.append(DayPlan(day, tuple(bins), counts[day], marks, carried))
    return plans


def _carried(table: Table) -> dict[str, str]:
    """The ``shardlog.`` properties of the snapshot the watermarks are read from, but the
    watermarks and the run id: what other writers keep beside the watermarks (an upsert
    table's clocks), carried as they are."""
    chain = watermark_chain(table)
    summary = chain[-1].summary if chain else None
    properties = summary.additional_properties if summary is not None else {}
    own = {WATERMARKS_PROPERTY, RUN_PROPERTY}
    return {k: v for k, v in properties.items() if k.startswith("shardlog.") and k not in own}


def _bins(
    partition_id: str,
    group: Sequence[tuple[int, int, DataFile]],
    rewrite: RewriteSettings,
    bound: int | None,
) -> list[Bin]:
    """Runs of consecutive small files (by seq), packed in order into bins of at most the
    target; a bin of one file is no gain and is left out."""
    bins: list[list[DataFile]] = [[]]
    size, previous_last = 0, -1
    for first, last, data_file in group:
        small = data_file.file_size_in_bytes < rewrite.small_file_bytes
        fits = bound is None or last < bound
        if not small or not fits or first <= previous_last:  # ends the run
            bins.append([])
            size = 0
        elif size + data_file.file_size_in_bytes > rewrite.target_file_bytes:
            bins.append([data_file])
            size = data_file.file_size_in_bytes
        else:
            bins[-1].append(data_file)
            size += data_file.file_size_in_bytes
        previous_last = max(previous_last, last)
    return [Bin(partition_id, tuple(b)) for b in bins if len(b) > 1]


def _named(data_file: DataFile) -> tuple[str, int, int] | None:
    """A shardlog data file's log partition and seq range, from its name; None for a file
    another engine wrote."""
    try:
        return file_range(data_file.file_path)
    except LakeSchemaError:
        return None


def _day_of(table: Table, data_file: DataFile) -> str | None:
    """The file's arrival day (YYYY-MM-DD) if it is of the table's day partition spec."""
    spec = table.spec()
    if data_file.spec_id != spec.spec_id or len(spec.fields) != 1:
        return None
    if str(spec.fields[0].transform) != "day" or data_file.partition[0] is None:
        return None
    return (_EPOCH + timedelta(days=int(data_file.partition[0]))).isoformat()


# --- write -------------------------------------------------------------------------------
def write_bin(
    s3: Any, settings: LakeSettings, table: Table, day: str, bin_: Bin, run_id: str
) -> tuple[str, int]:
    """The bin's rows as one new file (one PutObject): its URI and size in bytes."""
    schema = pa.schema(
        [pa.field(f.name, arrow_type(f.field_type), not f.required) for f in table.schema().fields]
    )
    with tempfile.TemporaryFile() as sink:
        first, last, rows = _write_rows(sink, schema, bin_, _batches(table, bin_))
        if rows != bin_.records:
            raise LakeSchemaError(
                f"{bin_.partition_id} day {day}: the files to rewrite hold {rows} rows, "
                f"their manifests say {bin_.records}: nothing rewritten"
            )
        size = sink.tell()
        sink.seek(0)
        key = data_file_key(settings.key_prefix, bin_.partition_id, day, first, last, run_id)
        s3.put_object(Bucket=settings.bucket, Key=key, Body=sink)
    return s3_uri(settings.bucket, key), size


def _batches(table: Table, bin_: Bin) -> Iterator[pa.RecordBatch]:
    """The bin's rows in the table's current schema, one file at a time (bounded memory)."""
    from pyiceberg.expressions import AlwaysTrue
    from pyiceberg.io.pyarrow import ArrowScan
    from pyiceberg.table import FileScanTask

    scan = ArrowScan(table.metadata, table.io, table.schema(), AlwaysTrue())
    for data_file in bin_.files:
        task: FileScanTask = FileScanTask(data_file)
        yield from scan.to_record_batches([task])


def _write_rows(
    sink: IO[bytes], schema: pa.Schema, bin_: Bin, batches: Iterator[pa.RecordBatch]
) -> tuple[int, int, int]:
    """Write the rows, checked to be the bin's log partition's, seqs strictly increasing (so
    the name's range is the file's); their first and last seq and count."""
    first, last, rows = -1, -1, 0
    buffered: list[pa.Table] = []
    with pq.ParquetWriter(sink, schema, compression="zstd") as writer:
        for batch in batches:
            if not batch.num_rows:
                continue
            seqs = batch.column("seq")
            ordered = batch.num_rows == 1 or pc.all(pc.greater(seqs[1:], seqs[:-1])).as_py()
            ours = pc.all(pc.equal(batch.column("partition_id"), bin_.partition_id)).as_py()
            if not ordered or not ours or seqs[0].as_py() <= last:
                raise LakeSchemaError(
                    f"the files {', '.join(f.file_path for f in bin_.files)} do not hold "
                    f"{bin_.partition_id}'s rows in seq order as their names say: "
                    "nothing rewritten"
                )
            first = seqs[0].as_py() if first < 0 else first
            last, rows = seqs[-1].as_py(), rows + batch.num_rows
            buffered.append(pa.Table.from_batches([batch]).cast(schema))
            if sum(t.nbytes for t in buffered) >= _ROW_GROUP_BYTES:
                writer.write_table(pa.concat_tables(buffered))
                buffered = []
        if buffered:
            writer.write_table(pa.concat_tables(buffered))
    return first, last, rows
