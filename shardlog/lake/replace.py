"""The backfill's commit: a table's rows below given watermarks swapped for re-derived ones,
in one Iceberg snapshot, exactly once, while compaction keeps appending.

A ``LakeReplace`` carries files that hold, per partition, every row of the table's kind in
``[0, covers[p])`` (re-derived from the log under the current declaration), the table's
watermarks they were derived against (``expected``), and the watermarks the snapshot
records. One commit:

1. **read**: refresh the table, its watermarks (``shardlog.lake.commit.table_watermarks``);
2. **recognise**: a snapshot carrying this attempt's run id is this commit, landed (its
   answer was lost): done;
3. **check**: the table's watermarks must equal ``expected``: a compaction that appended
   since the files were derived moved them, and its rows are not in the files:
   ``LakeConflictError`` (the caller derives the delta and tries again with a new run id);
4. **commit** one ``overwrite`` snapshot based on the snapshot read: delete every data file
   whose rows all lie below ``covers`` (a shardlog file's name says its partition and seq
   range: ``shardlog.lake.files.data_file_key``), add the new files, and record the
   watermarks and the run id in its summary. Files at or above ``covers`` stay (the
   dead-letter table's refusals of a batch whose typed commit is still to come). A file
   that straddles ``covers`` or is not shardlog's is refused (``LakeSchemaError``): the
   swap would lose or double its rows;
5. a failed commit is an unknown outcome, as for the append (``shardlog.lake.commit``):
   back to 1, at most ``DEFAULT_COMMIT_ATTEMPTS`` commits, else ``LakeCommitUnknownError``.

Why exactly once: the snapshot is based on the one read in 1 and Glue refuses an
``UpdateTable`` whose table moved since (``shardlog.local.glue_fidelity`` locally); a
compaction's append that lands first moves the watermarks, so 3 refuses; a compaction's
append that lands after this commit is based on it (its own commit re-reads the table
and finds the watermarks it started from: a replace keeps them) and adds only rows at or
above them. Like the append, the commit deletes nothing from S3: the replaced files stay
until maintenance removes what no snapshot references.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from shardlog.lake.commit import (
    DEFAULT_COMMIT_ATTEMPTS,
    RUN_PROPERTY,
    WATERMARKS_PROPERTY,
    CommitResult,
    _read,
    commit_failures,
    own_snapshot,
    snapshot_watermarks,
    table_watermarks,
)
from shardlog.lake.exceptions import (
    LakeCommitUnknownError,
    LakeConflictError,
    LakeError,
    LakeSchemaError,
)

if TYPE_CHECKING:  # pragma: no cover
    from pyiceberg.manifest import DataFile
    from pyiceberg.table import Table
    from pyiceberg.table.snapshots import Snapshot

# <partition>-<first seq>-<last seq>-<run id>.parquet (shardlog.lake.files.data_file_key)
_FILE_NAME = re.compile(r"(?P<partition>.+)-(?P<first>\d+)-(?P<last>\d+)-[^-/]+\.parquet")


@dataclass(frozen=True)
class LakeReplace:
    """Files holding every row of ``[0, covers[p])`` per partition, derived against the
    table's watermarks ``expected``; the snapshot records ``watermarks``."""

    files: Sequence[str]
    covers: Mapping[str, int]
    expected: Mapping[str, int]
    watermarks: Mapping[str, int]
    run_id: str


def file_range(path: str) -> tuple[str, int, int]:
    """A shardlog data file's partition, first and last seq, from its name."""
    found = _FILE_NAME.fullmatch(path.rsplit("/", 1)[-1])
    if found is None:
        raise LakeSchemaError(
            f"data file {path} is not named as shardlog names them: a table another engine "
            "wrote to cannot be backfilled (its rows' seqs are unknown)"
        )
    return found["partition"], int(found["first"]), int(found["last"])


def replaced(files: Sequence[DataFile], covers: Mapping[str, int]) -> list[DataFile]:
    """The files whose rows all lie below ``covers``; one that straddles it is refused."""
    doomed = []
    for data_file in files:
        partition, first, last = file_range(data_file.file_path)
        bound = covers.get(partition, 0)
        if first < bound <= last:
            raise LakeSchemaError(
                f"data file {data_file.file_path} holds seqs {first}..{last} across the "
                f"backfill's bound {bound}: replacing it would lose or double rows"
            )
        if last < bound:
            doomed.append(data_file)
    return doomed


def replace(
    table: Table, batch: LakeReplace, *, max_attempts: int = DEFAULT_COMMIT_ATTEMPTS
) -> CommitResult:
    """Swap the table's rows below ``batch.covers`` for ``batch.files``, exactly once.
    ``LakeConflictError``: the watermarks moved, nothing of this batch is in the table;
    ``LakeCommitUnknownError``: the outcome could not be found out."""
    sent, failure = 0, ""
    while True:
        _read(table, failure)
        own = own_snapshot(table, batch.run_id)
        if own is not None:
            return CommitResult(own.snapshot_id, snapshot_watermarks(own) or {}, sent)
        marks = table_watermarks(table)
        moved = sorted(
            p for p in {*marks, *batch.expected} if marks.get(p, 0) != batch.expected.get(p, 0)
        )
        if moved:
            raise LakeConflictError(
                f"{'.'.join(table.name())} moved while the backfill derived its rows: "
                + ", ".join(
                    f"{p} is at {marks.get(p, 0)}, not {batch.expected.get(p, 0)}" for p in moved
                ),
                tuple(moved),
            )
        if sent == max_attempts:
            raise LakeCommitUnknownError(
                f"the backfill of {'.'.join(table.name())} was not confirmed after {sent} "
                f"commits ({failure}); delete nothing: the next backfill reads the table"
            )
        sent += 1
        try:
            snapshot = _overwrite(table, batch)
        except commit_failures() as exc:
            failure = f"{type(exc).__name__}: {exc}"
            continue
        return CommitResult(snapshot.snapshot_id, dict(batch.watermarks), sent)


def _overwrite(table: Table, batch: LakeReplace) -> Snapshot:
    """The backfill's overwrite: the files wholly below ``covers`` out, the batch's in."""
    return overwrite_files(
        table,
        lambda current: replaced(current, batch.covers),
        batch.files,
        batch.watermarks,
        batch.run_id,
    )


def overwrite_files(
    table: Table,
    choose: Callable[[list[DataFile]], list[DataFile]],
    files: Sequence[str],
    watermarks: Mapping[str, int],
    run_id: str,
    carried: Mapping[str, str] | None = None,
) -> Snapshot:
    """One overwrite snapshot from the snapshot read, through a view that cannot delete:
    the data files ``choose`` picks of the snapshot's out, ``files`` in, the watermarks,
    the run id and the ``carried`` properties in its summary (the backfill's swap, and
    maintenance's rewrite: ``shardlog.lake.rewrite``)."""
    from pyiceberg.io.pyarrow import parquet_file_to_data_file

    from shardlog.lake.keeping_io import keeping_view

    view = keeping_view(table)
    doomed = choose([task.file for task in view.scan().plan_files()])
    transaction = view.transaction()
    properties = {
        **(carried or {}),
        WATERMARKS_PROPERTY: json.dumps(dict(watermarks), sort_keys=True),
        RUN_PROPERTY: run_id,
    }
    with transaction.update_snapshot(snapshot_properties=properties).overwrite() as overwrite:
        for data_file in doomed:
            overwrite.delete_data_file(data_file)
        for path in files:
            overwrite.append_data_file(
                parquet_file_to_data_file(view.io, transaction.table_metadata, path)
            )
    committed = transaction.commit_transaction().current_snapshot()
    if committed is None or own_snapshot(view, run_id) is None:
        raise LakeError(f"{table.name()}: the commit answered without this run's snapshot")
    table.metadata, table.metadata_location = view.metadata, view.metadata_location
    return committed
