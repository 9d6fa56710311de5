"""The errors shardlog raises. Each keeps its cause and, where AWS said no, the AWS code.

A ``ConditionalCheckFailedException`` never leaks past the module that made the
conditional write: it becomes one of the domain errors below.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from shardlog.constants import THROTTLING_CODES
from shardlog.outcomes import PutResult

# DynamoDB's code for a write whose condition did not hold (shardlog.tables tests for it).
CONDITIONAL_CHECK_FAILED: Final = "ConditionalCheckFailedException"


class ShardlogError(Exception):
    """Base of every shardlog error."""

    def __init__(self, message: str, *, aws_error_code: str | None = None) -> None:
        super().__init__(message)
        self.aws_error_code = aws_error_code


def is_throttling(exc: BaseException) -> bool:
    return aws_error_code(exc) in THROTTLING_CODES


def aws_error_code(exc: BaseException) -> str | None:
    """The ``Error.Code`` of a botocore ClientError, else None."""
    response: Any = getattr(exc, "response", None)
    if isinstance(response, dict):
        code = response.get("Error", {}).get("Code")
        return str(code) if code is not None else None
    return None


class ValidationError(ShardlogError, ValueError):
    """Bad input: names the field and the limit it broke."""

    def __init__(self, field: str, message: str, *, limit: Any = None) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.limit = limit
        self.reason = message


class NotFoundError(ShardlogError):
    """A name the caller gave (a partition, a consumer group) that the log does not know."""


class LeaseError(ShardlogError):
    """Base of the lease errors."""


class LeaseHeldError(LeaseError):
    """Another owner holds a live lease on the partition."""

    def __init__(self, group: str, partition_id: str, owner: str, expires_at_ms: int) -> None:
        super().__init__(
            f"lease {group}/{partition_id} is held by {owner!r} until {expires_at_ms} (epoch ms)",
            aws_error_code=CONDITIONAL_CHECK_FAILED,
        )
        self.group = group
        self.partition_id = partition_id
        self.owner = owner
        self.expires_at_ms = expires_at_ms


class LeaseLostError(LeaseError):
    """The lease this worker held was taken over (fenced by leaseCounter)."""

    def __init__(self, group: str, partition_id: str, detail: str = "") -> None:
        suffix = f": {detail}" if detail else ""
        super().__init__(
            f"lease {group}/{partition_id} was lost{suffix}",
            aws_error_code=CONDITIONAL_CHECK_FAILED,
        )
        self.group = group
        self.partition_id = partition_id


class SegmentFormatError(ShardlogError):
    """A segment object is corrupt, truncated or of an unknown version."""


class CorruptLogError(ShardlogError):
    """The committed log breaks an invariant (a gap below the head, a foreign leftover)."""


class TrimmedError(ShardlogError):
    """A read asked for records below the partition's trim horizon: retention expired them.

    Not corruption: the log answers from ``horizon`` up (docs/FORMAT.md, section 2)."""

    def __init__(self, partition_id: str, horizon: int, asked: int) -> None:
        super().__init__(
            f"partition {partition_id} is trimmed below seq {horizon} (record retention "
            f"expired them); seq {asked} was asked for: read from seq {horizon} on"
        )
        self.partition_id = partition_id
        self.horizon = horizon
        self.asked = asked


class CommitConflictError(ShardlogError):
    """The partition head moved under a commit: another writer committed first."""


class ProducerError(ShardlogError):
    """Not every record was put. ``outcomes`` holds one per record, in order: a PutResult,
    or a PutFailure whose kind says whether the record may be in the stream (unknown) or
    is provably not; ``records`` holds the records as sent (with their record ids), so
    they can be sent again."""

    def __init__(
        self,
        message: str,
        records: Sequence[Any],
        outcomes: Sequence[Any],
        *,
        aws_error_code: str | None = None,
    ) -> None:
        super().__init__(message, aws_error_code=aws_error_code)
        self.records = list(records)
        self.outcomes = list(outcomes)

    @property
    def results(self) -> list[Any]:
        """The PutResult of each record, by input index; None for a record without one."""
        return [o if isinstance(o, PutResult) else None for o in self.outcomes]

    @property
    def unsent(self) -> list[Any]:
        """The records without a PutResult, in order (see ``outcomes`` for why)."""
        return [r for r, o in zip(self.records, self.results, strict=True) if o is None]


class ConfigurationError(ShardlogError):
    """A setting is missing or invalid."""


class PortInUseError(ShardlogError):
    """A local server could not listen: another process holds its port."""

    def __init__(self, what: str, host: str, port: int) -> None:
        super().__init__(f"port {port} on {host} is already in use, so the {what} cannot listen")
        self.what = what
        self.host = host
        self.port = port
