"""Errors of the log consumers. Each keeps its cause; lease losses stay LeaseLostErrors."""

from __future__ import annotations

from shardlog.exceptions import LeaseLostError, ShardlogError


class ConsumerError(ShardlogError):
    """Base of the consumer errors."""


class CheckpointError(ConsumerError):
    """A checkpoint was refused. ``kcl_error`` is the name KCL's MultiLangDaemon would send."""

    kcl_error = "KinesisClientLibDependencyException"


class CheckpointRangeError(CheckpointError, ValueError):
    """The position is not one this processor may checkpoint (KCL's IllegalArgumentException)."""

    kcl_error = "IllegalArgumentException"


class CheckpointStateError(CheckpointError):
    """Checkpointing is not possible here in the lifecycle (KCL's InvalidStateException)."""

    kcl_error = "InvalidStateException"


class CheckpointLeaseLostError(CheckpointError, LeaseLostError):
    """The worker no longer holds the lease: the checkpoint was fenced by ``leaseCounter``.

    Another worker owns the partition now and resumes from the last checkpoint that
    succeeded; stop processing this partition (KCL's ShutdownException).
    """

    kcl_error = "ShutdownException"

    def __init__(self, group: str, partition_id: str, detail: str = "") -> None:
        LeaseLostError.__init__(self, group, partition_id, detail)
        self.args = (
            f"checkpoint refused: this worker lost the lease {group}/{partition_id}"
            + (f" ({detail})" if detail else "")
            + "; another worker resumes from the last successful checkpoint",
        )

    def __str__(self) -> str:
        return str(self.args[0])


class ProcessorFailedError(ConsumerError):
    """The record processor is gone (a child process crashed or hung): hand the partition off."""


class SeekRefusedError(ConsumerError):
    """A group seek was refused before it moved anything (another seek in progress, a Lambda
    group's give-up not sent yet), or stopped (its hold on a lease was lost twice)."""
