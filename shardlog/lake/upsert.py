"""Latest by key: an upsert table's commit, the newest record per key, exactly once per run.

A declared table of mode ``upsert`` (``shardlog.lake.declared``) holds one row per key: the
newest record of that key the table has read. Typed compaction (``shardlog.spark.typed``)
parses and checks a batch as for an append table; this module folds the batch's typed rows
into the table.

**Newest by the log, never by a clock of ours.** Each row carries ``log_clock``: the
highest arrival time (epoch ms) of its partition up to and including it, and, for a
partition born of a split or a merge, at least one more than every parent's final clock.
Records are ordered by ``(log_clock, partition_id, seq)``, a total order, and the newest
is the highest:

- within a partition the clock never goes down as seq goes up, so the higher seq wins,
  even where Kinesis' approximate arrival time steps back;
- a partition key lives in one partition at a time (partition = hash of the key) and moves
  only to a child across a split or merge; the table reads a child only once each parent is
  wholly in it (``ready``, as a consumer group does), so a child's clock starts past its
  parents' and the child's record wins: exactly the log's order for that key;
- a JSON-field key may appear in unrelated partitions at once: there the later arrival
  (as clocked) wins, then the higher partition id, then the higher seq.

The clock is a function of the log alone (the partition's records and its lineage), so
every run, retry or race computes the same order. Each partition's clock travels with its
watermark in the snapshot summary (``shardlog.clocks`` beside ``shardlog.watermarks``).

One upsert (``upsert``), for a batch ``[start, end)`` per partition and its typed rows:

1. **read** the table (``shardlog.lake.commit``'s read: a failed read after a failed
   commit leaves the outcome unknown);
2. **recognise** a snapshot carrying this run's id: this run's commit landed: done;
3. **check** every partition starts exactly at the table's watermark, else another run
   applied it first: ``LakeConflictError``, nothing committed (a retry never applies a
   record twice, a race never applies one on top of a newer one);
4. **fold** (copy-on-write): clock the batch, keep its newest row per key, read every data
   file of the current snapshot, and rewrite those holding a key of the batch: their
   other rows as they were, each key's newest of (stored, batch) row; files without such
   a key stay untouched;
5. **commit** one ``overwrite`` snapshot based on the snapshot read: the rewritten files
   out, the new files in, the merged watermarks and clocks and the run id in its summary;
6. a failed commit is an unknown outcome: back to 1 (at most ``DEFAULT_COMMIT_ATTEMPTS``
   commits, else ``LakeCommitUnknownError``). Each attempt writes its files under its own
   name, so an attempt that did not land leaves orphans for maintenance, never a file a
   snapshot references. The commit deletes nothing from S3.

There are no tombstones: a key, once in the table, keeps its newest record. The cost of a
run is a read of the whole table's files and a rewrite of those holding the batch's keys
(with keys spread at random, all of them): docs/LAKE.md, "Latest by key".
"""

from __future__ import annotations

import io
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
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
    stale_batch,
    table_watermarks,
    watermark_chain,
)
from shardlog.lake.declared import LOG_CLOCK
from shardlog.lake.exceptions import (
    LakeCommitUnknownError,
    LakeError,
    LakeSchemaError,
)
from shardlog.lake.files import DATA_DIR, parquet_bytes, s3_uri
from shardlog.lake.schema import TableSchema
from shardlog.lake.settings import LakeSettings
from shardlog.tables import PartitionInfo

if TYPE_CHECKING:  # pragma: no cover
    from pyiceberg.table import Table
    from pyiceberg.table.snapshots import Snapshot

CLOCKS_PROPERTY = "shardlog.clocks"
FILE_ROWS = 500_000  # rows per file the fold writes, at most
_ORDER = (LOG_CLOCK, "partition_id", "seq")


@dataclass(frozen=True)
class LakeUpsert:
    """One run's batch: per partition its range ``[start, end)`` (as ``LakeAppend``), its
    typed rows (the typed table's columns, no ``log_clock``: every record of the ranges
    that is the table's and fits), each partition's parents, and the run id."""

    ranges: Mapping[str, tuple[int, int]]
    rows: pa.Table
    key: tuple[str, ...]
    parents: Mapping[str, Sequence[str]]
    run_id: str


@dataclass
class UpsertResult:
    snapshot_id: int
    watermarks: Mapping[str, int]
    attempts: int
    keys: int = 0  # distinct keys of the batch
    files_read: int = 0
    files_rewritten: int = 0
    files_written: int = 0
    rows: int = 0  # rows of the table after the commit (what the files read plus the fold hold)
    snapshot_properties: dict[str, str] = field(default_factory=dict)


# --- the order -----------------------------------------------------------------------------
def table_clocks(table: Table) -> dict[str, int]:
    """Each partition's clock where the table's watermark stands (from the snapshot that
    carries the watermarks); {} for a table no upsert has committed to."""
    chain = watermark_chain(table)
    summary = chain[-1].summary if chain else None
    raw = summary.additional_properties.get(CLOCKS_PROPERTY) if summary is not None else None
    if raw is None:
        return {}
    try:
        return {str(k): int(v) for k, v in json.loads(raw).items()}
    except (ValueError, AttributeError) as exc:
        raise LakeSchemaError(f"{table.name()}: unreadable {CLOCKS_PROPERTY}: {raw!r}") from exc


def first_clock(partition_id: str, clocks: Mapping[str, int], parents: Sequence[str]) -> int:
    """A partition's clock before its next record: where it stands, or for a partition new to
    the table one past its parents' final clocks (0 without any)."""
    if partition_id in clocks:
        return clocks[partition_id]
    inherited = [clocks[p] for p in parents if p in clocks]
    return max(inherited) + 1 if inherited else 0


def clocked(rows: pa.Table, starts: Mapping[str, int]) -> tuple[pa.Table, dict[str, int]]:
    """The rows with ``log_clock`` (the running maximum of arrival ms per partition, from its
    start clock), sorted by partition and seq; and each partition's clock after them."""
    ordered = rows.sort_by([("partition_id", "ascending"), ("seq", "ascending")])
    arrival = pc.cast(ordered.column("arrival_time"), pa.timestamp("ms", tz="UTC"))
    arrival_ms = pc.cast(arrival, pa.int64()).to_numpy(zero_copy_only=False)
    clock = np.empty_like(arrival_ms)
    ends: dict[str, int] = {}
    runs = pc.run_end_encode(ordered.column("partition_id").combine_chunks())
    offset = 0
    for partition_id, end in zip(runs.values.to_pylist(), runs.run_ends.to_pylist(), strict=True):
        part = slice(offset, end)  # one partition's rows, by seq
        start = starts.get(partition_id, 0)
        clock[part] = np.maximum.accumulate(np.maximum(arrival_ms[part], start))
        ends[partition_id], offset = int(clock[end - 1]), end
    return ordered.append_column(LOG_CLOCK, pa.array(clock, pa.int64())), ends


def key_values(rows: pa.Table, key: Sequence[str]) -> pa.Array:
    """The key column (a nested one by its path) of the rows, as one array."""
    values: Any = rows.column(key[0]).combine_chunks()
    for step in key[1:]:
        values = pc.struct_field(values, step)
    return values


def newest(rows: pa.Table, key: Sequence[str]) -> pa.Table:
    """The newest row per key: the highest ``(log_clock, partition_id, seq)``."""
    if not rows.num_rows:
        return rows
    ranked = rows.sort_by([(c, "ascending") for c in _ORDER])
    keyed = pa.table({"k": key_values(ranked, key), "rank": pa.array(range(ranked.num_rows))})
    last = keyed.group_by("k").aggregate([("rank", "max")]).column("rank_max")
    return ranked.take(last)


# --- 4. fold -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Fold:
    """What one attempt changes: the files replaced, and the rows of the files it writes."""

    replaced: list[Any]  # pyiceberg DataFiles
    rows: pa.Table
    files_read: int


def fold(stored: Sequence[tuple[Any, pa.Table]], batch: pa.Table, key: Sequence[str]) -> Fold:
    """Fold the batch's newest rows into the stored files (each a DataFile and its rows):
    a file holding a key of the batch is replaced by its other rows plus, per such key, the
    newest of its stored row and the batch's; the other files stay."""
    incoming = newest(batch, key)
    keys = key_values(incoming, key)
    replaced, kept, contenders = [], [], [incoming]
    for data_file, rows in stored:
        hit = pc.is_in(key_values(rows, key), value_set=keys)
        if not pc.any(hit).as_py():
            continue
        replaced.append(data_file)
        kept.append(rows.filter(pc.invert(hit)))
        contenders.append(rows.filter(hit))
    winners = newest(pa.concat_tables(contenders, promote_options="default"), key)
    folded = pa.concat_tables([*kept, winners], promote_options="default")
    return Fold(replaced, folded, len(stored))


# --- the commit ------------------------------------------------------------------------------
@dataclass(frozen=True)
class UpsertTarget:
    """Where an upsert table's files go and their shape: its settings, schema and S3 client."""

    settings: LakeSettings
    schema: TableSchema
    s3: Any


def upsert(
    table: Table,
    target: UpsertTarget,
    batch: LakeUpsert,
    *,
    max_attempts: int = DEFAULT_COMMIT_ATTEMPTS,
) -> UpsertResult:
    """Fold ``batch`` into the table beyond its watermarks, exactly once (module docstring).
    ``LakeConflictError``: another run applied these partitions first, nothing of this batch
    is in the table; ``LakeCommitUnknownError``: the outcome could not be found out."""
    sent, failure = 0, ""
    while True:
        _read(table, failure)
        own = own_snapshot(table, batch.run_id)
        if own is not None:
            return UpsertResult(own.snapshot_id, snapshot_watermarks(own) or {}, sent)
        marks = table_watermarks(table)
        stale = sorted(p for p, (start, _) in batch.ranges.items() if marks.get(p, 0) != start)
        if stale:
            raise stale_batch(table, "applied to", marks, batch.ranges, stale)
        if sent == max_attempts:
            raise LakeCommitUnknownError(
                f"the upsert into {table.name()} was not confirmed after {sent} commits "
                f"({failure}); delete nothing: the next run reads the table and finds out"
            )
        sent += 1
        try:
            return _attempt(table, target, batch, marks, sent)
        except commit_failures() as exc:  # refused, or applied and its answer lost
            failure = f"{type(exc).__name__}: {exc}"


def _attempt(
    table: Table, target: UpsertTarget, batch: LakeUpsert, marks: Mapping[str, int], attempt: int
) -> UpsertResult:
    """Steps 4 and 5 from the snapshot read: fold, write, commit one overwrite snapshot."""
    from shardlog.lake.keeping_io import keeping_view

    view = keeping_view(table)
    clocks = table_clocks(view)
    starts = {p: first_clock(p, clocks, batch.parents.get(p, ())) for p in batch.ranges}
    rows, ends = clocked(batch.rows, starts)
    folded = fold(_stored(view, target), rows, batch.key)
    paths = _write(target, folded.rows, batch.key, f"{batch.run_id}-{attempt}")
    properties = {
        WATERMARKS_PROPERTY: json.dumps(
            {**marks, **{p: end for p, (_, end) in batch.ranges.items()}}, sort_keys=True
        ),
        CLOCKS_PROPERTY: json.dumps({**clocks, **starts, **ends}, sort_keys=True),
        RUN_PROPERTY: batch.run_id,
    }
    snapshot = _overwrite(view, folded.replaced, paths, properties)
    table.metadata, table.metadata_location = view.metadata, view.metadata_location
    result = UpsertResult(
        snapshot.snapshot_id, json.loads(properties[WATERMARKS_PROPERTY]), attempt
    )
    result.keys = len(pc.unique(key_values(rows, batch.key))) if rows.num_rows else 0
    result.files_read, result.files_rewritten = folded.files_read, len(folded.replaced)
    result.files_written, result.snapshot_properties = len(paths), properties
    result.rows = _rows(snapshot)
    return result


def _stored(view: Table, target: UpsertTarget) -> list[tuple[Any, pa.Table]]:
    """Every data file of the snapshot read, with its rows (one GetObject each)."""
    stored = []
    for task in view.scan().plan_files():
        if task.delete_files:
            raise LakeSchemaError(
                f"{view.name()}: data file {task.file.file_path} has delete files (another "
                "engine's row deletes): an upsert folds whole files and would bring rows back"
            )
        bucket, key = task.file.file_path.removeprefix("s3://").split("/", 1)
        body = target.s3.get_object(Bucket=bucket, Key=key)["Body"].read()
        stored.append((task.file, pq.read_table(io.BytesIO(body))))
    return stored


def _write(target: UpsertTarget, rows: pa.Table, key: Sequence[str], name: str) -> list[str]:
    """The folded rows as data files, one or more per arrival day (the table's partition),
    sorted by key, named by the run and attempt (a name no other attempt uses)."""
    if not rows.num_rows:
        return []
    days = pc.strftime(rows.column("arrival_time"), format="%Y-%m-%d", locale="C")
    paths = []
    for day in sorted(set(days.to_pylist())):
        part = rows.filter(pc.equal(days, day))
        part = part.take(pc.sort_indices(key_values(part, key)))
        for index, start in enumerate(range(0, part.num_rows, FILE_ROWS)):
            key_name = (
                f"{target.settings.key_prefix}{DATA_DIR}arrival_day={day}/"
                f"upsert-{name}-{index:05d}.parquet"
            )
            body = parquet_bytes(part.slice(start, FILE_ROWS), target.schema)
            target.s3.put_object(Bucket=target.settings.bucket, Key=key_name, Body=body)
            paths.append(s3_uri(target.settings.bucket, key_name))
    return paths


def _overwrite(
    view: Table, replaced: Sequence[Any], paths: Sequence[str], properties: Mapping[str, str]
) -> Snapshot:
    """One overwrite snapshot from the snapshot read (pyiceberg asserts it; Glue's VersionId
    refuses an UpdateTable whose table moved)."""
    from pyiceberg.io.pyarrow import parquet_file_to_data_file

    transaction = view.transaction()
    update = transaction.update_snapshot(snapshot_properties=dict(properties))
    with update.overwrite() as overwrite:
        for data_file in replaced:
            overwrite.delete_data_file(data_file)
        for path in paths:
            overwrite.append_data_file(
                parquet_file_to_data_file(view.io, transaction.table_metadata, path)
            )
    committed = transaction.commit_transaction().current_snapshot()
    if committed is None or own_snapshot(view, properties[RUN_PROPERTY]) is None:
        raise LakeError(f"{view.name()}: the commit answered without this run's snapshot")
    return committed


def _rows(snapshot: Snapshot) -> int:
    summary = snapshot.summary
    raw = summary.additional_properties.get("total-records") if summary is not None else None
    return int(raw) if raw is not None else 0


# --- which partitions a run may read -----------------------------------------------------------
def ready(
    partitions: Sequence[PartitionInfo], marks: Mapping[str, int]
) -> tuple[list[str], list[str]]:
    """The partitions an upsert table may read now, and those that wait: a partition waits
    while a parent is not wholly in the table (not ENDED, or its watermark below its head).
    A parent out of the partitions read is retired, and retirement waits for every lake
    table's watermark, so it is wholly in."""
    known = {p.partition_id: p for p in partitions}

    def done(parent_id: str) -> bool:
        parent = known.get(parent_id)
        if parent is None or parent.retired:
            return True
        return parent.state == C.STATE_ENDED and marks.get(parent_id, 0) >= parent.next_seq

    readable: list[str] = []
    waiting: list[str] = []
    for partition in partitions:
        (readable if all(done(p) for p in partition.parents) else waiting).append(
            partition.partition_id
        )
    return readable, waiting
