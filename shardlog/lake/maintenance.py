"""Maintenance of the lake table: expire old snapshots, remove files no snapshot references.

- **expire**: snapshots older than ``snapshot_retention`` go, except the **protected**
  ones (``protected_snapshots``): the current one, every branch and tag head (pyiceberg
  refuses to expire those), and the current snapshot's ancestors down to the newest one
  that carries the watermarks. That last part matters once another engine commits a
  snapshot (an append, a rewrite, a delete: no ``shardlog.watermarks`` in its summary):
  compaction then reads the watermarks from the ancestor (``watermark_chain``), and
  expiring it, or any snapshot between, would cut the chain (pyiceberg drops the parent
  link of a removed snapshot's child): every later compaction would fail, not knowing
  where to resume. The table's rows are the current snapshot's: expiring loses time
  travel, never a row.
- **orphans**: objects under the table's location that no remaining snapshot, manifest,
  metadata file or statistics file references, read afresh after the expiry, and that
  are older than ``orphan_grace``: the files of a run that crashed before its commit or
  lost a race, manifests of commits that did not land, and the manifest lists and
  metadata of expired snapshots. The grace period protects a compaction still running:
  its files are written before its commit, so the grace must exceed the longest run.
- **rewrite** (when asked, between the two): each day partition's small files into files
  near a target size, one snapshot per day that carries the watermarks unchanged
  (``shardlog.lake.rewrite``). The files it replaces stay referenced by the older
  snapshots, so they go with them: expired, then orphans past the grace.

An expiry commit that fails (refused by a concurrent commit, or its answer lost: Glue
refuses the resend of an applied ``UpdateTable``) is an unknown outcome: the table is read
again and what is still expirable is expired, a bounded number of times. Nothing is ever
deleted on the strength of a commit: orphan removal reads what the table references.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from shardlog import constants as C
from shardlog.lake.references import referenced_files
from shardlog.lake.settings import LakeSettings

if TYPE_CHECKING:  # pragma: no cover
    from pyiceberg.table import Table

    from shardlog.lake.rewrite import DayRewrite, RewriteSettings

# Longer than a compaction run can last (its EMR Serverless timeout, shardlog.spark.jobs).
MIN_ORPHAN_GRACE = timedelta(hours=C.MIN_LAKE_ORPHAN_GRACE_HOURS)
DEFAULT_ORPHAN_GRACE = timedelta(hours=C.DEFAULT_LAKE_ORPHAN_GRACE_HOURS)
MIN_SNAPSHOT_RETENTION = timedelta(hours=C.MIN_LAKE_SNAPSHOT_RETENTION_HOURS)
DEFAULT_SNAPSHOT_RETENTION = timedelta(hours=C.DEFAULT_LAKE_SNAPSHOT_RETENTION_HOURS)
EXPIRE_ATTEMPTS = 5


@dataclass
class MaintenanceReport:
    expired_snapshots: list[int] = field(default_factory=list)
    removed_files: list[str] = field(default_factory=list)
    kept_young_files: int = 0
    rewritten: list[DayRewrite] = field(default_factory=list)  # per day partition rewritten

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def check_durations(snapshot_retention: timedelta, orphan_grace: timedelta) -> None:
    if snapshot_retention < MIN_SNAPSHOT_RETENTION:
        raise ValueError(
            f"snapshot retention must be at least {MIN_SNAPSHOT_RETENTION}, "
            f"not {snapshot_retention}"
        )
    if orphan_grace < MIN_ORPHAN_GRACE:
        raise ValueError(
            f"orphan grace must be at least {MIN_ORPHAN_GRACE} (longer than a compaction "
            f"run, whose files precede its commit), not {orphan_grace}"
        )


def protected_snapshots(table: Table) -> set[int]:
    """The snapshots expiry must keep: every branch and tag head (the current snapshot is
    main's) and the chain compaction reads its watermarks through."""
    from shardlog.lake.commit import watermark_chain

    protected = {ref.snapshot_id for ref in table.metadata.refs.values()}
    return protected | {s.snapshot_id for s in watermark_chain(table)}


def expirable(table: Table, older_than: datetime) -> list[int]:
    """The snapshots older than ``older_than`` that are not protected."""
    protected = protected_snapshots(table)
    cutoff_ms = older_than.timestamp() * 1000
    return sorted(
        s.snapshot_id
        for s in table.snapshots()
        if s.timestamp_ms < cutoff_ms and s.snapshot_id not in protected
    )


def expire_snapshots(
    table: Table, older_than: datetime, *, max_attempts: int = EXPIRE_ATTEMPTS
) -> list[int]:
    """Expire the unprotected snapshots older than ``older_than``; the ones that went."""
    from shardlog.lake.commit import commit_failures

    expired: set[int] = set()
    for _ in range(max_attempts):
        doomed = expirable(table, older_than)
        if not doomed:
            break
        with contextlib.suppress(*commit_failures()):  # refused or lost: the read tells
            table.maintenance.expire_snapshots().by_ids(doomed).commit()
        table.refresh()
        present = {s.snapshot_id for s in table.snapshots()}
        expired |= set(doomed) - present
    return sorted(expired)


def remove_orphans(
    s3: Any, settings: LakeSettings, table: Table, older_than: datetime
) -> tuple[list[str], int]:
    """Delete the table location's objects nobody references, last modified before
    ``older_than``: (removed keys, unreferenced objects kept as too young)."""
    referenced = referenced_files(table)
    doomed, young = [], 0
    for obj in _objects(s3, settings):
        if f"s3://{settings.bucket}/{obj['Key']}" in referenced:
            continue
        if obj["LastModified"] >= older_than:
            young += 1
            continue
        doomed.append(obj["Key"])
    for start in range(0, len(doomed), 1000):  # DeleteObjects takes 1,000 keys at most
        s3.delete_objects(
            Bucket=settings.bucket,
            Delete={"Objects": [{"Key": k} for k in doomed[start : start + 1000]], "Quiet": True},
        )
    return sorted(doomed), young


def maintain(
    s3: Any,
    settings: LakeSettings,
    table: Table,
    now: datetime,
    *,
    snapshot_retention: timedelta = DEFAULT_SNAPSHOT_RETENTION,
    orphan_grace: timedelta = DEFAULT_ORPHAN_GRACE,
    rewrite: RewriteSettings | None = None,
    below: Mapping[str, int] | None = None,
) -> MaintenanceReport:
    """Expire, rewrite small files if ``rewrite`` is given (``below``: a dead-letter table's
    bound, ``shardlog.lake.rewrite``), then remove orphans (the expired snapshots' files
    among them)."""
    check_durations(snapshot_retention, orphan_grace)
    table.refresh()
    report = MaintenanceReport()
    report.expired_snapshots = expire_snapshots(table, now - snapshot_retention)
    if rewrite is not None:
        from shardlog.lake.rewrite import rewrite_table

        report.rewritten = rewrite_table(s3, settings, table, rewrite, below=below)
    table.refresh()  # what the table references now, after the expiry, whoever committed
    report.removed_files, report.kept_young_files = remove_orphans(
        s3, settings, table, now - orphan_grace
    )
    return report


def _objects(s3: Any, settings: LakeSettings) -> Iterable[dict[str, Any]]:
    pages = s3.get_paginator("list_objects_v2").paginate(
        Bucket=settings.bucket, Prefix=settings.key_prefix
    )
    for page in pages:
        yield from page.get("Contents", [])
