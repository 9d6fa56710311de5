"""Where a consumer starts: TRIM_HORIZON, LATEST, AT_SEQUENCE, AT_TIMESTAMP; and replay.

Positions are log seqs (0, 1, 2, ... per partition). A start position only applies to
a partition that has no checkpoint for the group yet (see docs/CONSUMERS.md); a
checkpoint always wins. ``replay`` reads any range of one partition without a group.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from shardlog.exceptions import ValidationError
from shardlog.format import LogRecord, Segment
from shardlog.reader import LogReader


class InitialPosition(StrEnum):
    TRIM_HORIZON = "TRIM_HORIZON"
    LATEST = "LATEST"
    AT_SEQUENCE = "AT_SEQUENCE"
    AT_TIMESTAMP = "AT_TIMESTAMP"


@dataclass(frozen=True)
class StartPosition:
    """A group's start position. Build it with the class methods."""

    kind: InitialPosition = InitialPosition.TRIM_HORIZON
    timestamp_ms: int | None = None
    sequences: Mapping[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.kind is InitialPosition.AT_TIMESTAMP and (
            self.timestamp_ms is None or self.timestamp_ms < 0
        ):
            raise ValidationError(
                "start_position", "AT_TIMESTAMP needs timestamp_ms >= 0 (epoch ms)", limit=0
            )
        for partition_id, seq in self.sequences.items():
            if seq < 0:
                raise ValidationError(
                    "start_position", f"AT_SEQUENCE seq for {partition_id} must be >= 0", limit=0
                )

    @classmethod
    def trim_horizon(cls) -> StartPosition:
        """Every record of the log (the default)."""
        return cls()

    @classmethod
    def latest(cls) -> StartPosition:
        """Only records committed after the group started."""
        return cls(InitialPosition.LATEST)

    @classmethod
    def at_timestamp(cls, timestamp_ms: int) -> StartPosition:
        """The first record whose arrival time (Kinesis ApproximateArrivalTimestamp) >= this."""
        return cls(InitialPosition.AT_TIMESTAMP, timestamp_ms=timestamp_ms)

    @classmethod
    def at_sequence(cls, sequences: Mapping[str, int]) -> StartPosition:
        """Per partition, start at this log seq; unlisted partitions start at TRIM_HORIZON."""
        return cls(InitialPosition.AT_SEQUENCE, sequences=dict(sequences))

    def describe(self) -> str:
        if self.kind is InitialPosition.AT_TIMESTAMP:
            return f"AT_TIMESTAMP {self.timestamp_ms}"
        if self.kind is InitialPosition.AT_SEQUENCE:
            return "AT_SEQUENCE " + ",".join(f"{p}={s}" for p, s in sorted(self.sequences.items()))
        return str(self.kind)


def resolve_start(
    reader: LogReader, partition_id: str, position: StartPosition, *, head: int | None = None
) -> int:
    """The first seq to read in a partition that has no checkpoint, as of now (``head``: the
    partition's head, when the caller has just read it)."""
    if position.kind is InitialPosition.TRIM_HORIZON:  # the oldest record the log still has
        return reader.horizon(partition_id)
    head = reader.head(partition_id) if head is None else head
    if position.kind is InitialPosition.LATEST:
        return head
    if position.kind is InitialPosition.AT_SEQUENCE:
        return min(position.sequences.get(partition_id, 0), head)
    assert position.timestamp_ms is not None
    return seq_at_timestamp(reader, partition_id, position.timestamp_ms, head=head)


def seq_at_timestamp(
    reader: LogReader, partition_id: str, timestamp_ms: int, *, head: int | None = None
) -> int:
    """The seq of the first committed record with arrival >= timestamp_ms (head if none).

    Kinesis arrival times do not decrease within a shard, so this is a binary search
    over the segments (one GetObject per probe), then a scan of one segment.
    """
    head = reader.head(partition_id) if head is None else head
    horizon = reader.horizon(partition_id)  # below it segments may be gone (retention)
    listed = reader.store.starts(partition_id, horizon)
    starts = list(itertools.takewhile(lambda s: s < head, listed))
    low, high = 0, len(starts)  # find the first segment whose last arrival >= timestamp
    found: Segment | None = None
    while low < high:
        middle = (low + high) // 2
        segment = reader.store.fetch(partition_id, starts[middle])
        if segment.records[-1].arrival_ms >= timestamp_ms:
            found, high = segment, middle
        else:
            low = middle + 1
    if found is None or low >= len(starts):
        return head
    if found.first_seq != starts[low]:
        found = reader.store.fetch(partition_id, starts[low])
    return next(r.seq for r in found.records if r.arrival_ms >= timestamp_ms)


def replay(
    reader: LogReader,
    partition_id: str,
    *,
    from_seq: int = 0,
    to_seq: int | None = None,
    at_timestamp_ms: int | None = None,
) -> Iterator[LogRecord]:
    """Records of any committed range of one partition, in order: no group, no checkpoint.

    With ``at_timestamp_ms`` the range starts at the first record that arrived at or
    after it (and not before ``from_seq``).
    """
    if at_timestamp_ms is not None:
        from_seq = max(from_seq, seq_at_timestamp(reader, partition_id, at_timestamp_ms))
    return reader.records(partition_id, from_seq, to_seq)
