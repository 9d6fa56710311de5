"""Errors of the Spark jobs and their trigger."""

from __future__ import annotations

from shardlog.exceptions import CONDITIONAL_CHECK_FAILED, ShardlogError


class WatermarkConflictError(ShardlogError):
    """The compaction watermark moved since it was read: another run wrote it first."""

    def __init__(self, partition_id: str, detail: str) -> None:
        super().__init__(
            f"compaction watermark of {partition_id} changed under this run: {detail}",
            aws_error_code=CONDITIONAL_CHECK_FAILED,
        )
        self.partition_id = partition_id


class CompactionError(ShardlogError):
    """Compacted files do not hold exactly the batch's records: the watermark stays put."""


class JobRunError(ShardlogError):
    """A job run did not succeed, or did not finish in time."""

    def __init__(self, message: str, state: str | None = None) -> None:
        super().__init__(message)
        self.state = state
