"""Errors of the lake table. Each says what was refused and why, and keeps its cause."""

from __future__ import annotations

from shardlog.exceptions import ShardlogError


class LakeError(ShardlogError):
    """Base of the lake table's errors."""


class NoLakeTableError(LakeError):
    """The catalog has no lake table yet: no compaction has run."""


class CatalogUnavailableError(LakeError):
    """The catalog (Glue, or the SQL catalog's database) could not be reached."""


class LakeSchemaError(LakeError):
    """The table exists but is not the table shardlog writes (columns, types, location)."""


class LakeConflictError(LakeError):
    """Another run appended to the table first: this run's batch is no longer beyond the
    table's watermark, so it commits nothing (the next run appends what is left)."""

    def __init__(self, message: str, partitions: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.partitions = partitions


class LakeCommitUnknownError(LakeError):
    """The commit's answer was lost and the table could not be read to find out whether it
    landed: the outcome is unknown. Nothing may be deleted on it: the commit may hold the
    files; the next run reads the table and finds out."""
