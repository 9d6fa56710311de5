"""A Lambda consumer runner's view of one partition's committed log, from a position on.

It reads through the segment store only, trusts only the head it read from the partitions
table, and keeps each record's commit time (its segment's ``written_at``) for the
batching window. A segment is fetched once however many batches it feeds; the head is
re-read only when what it allowed has been read.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass

from shardlog.format import LogRecord, Segment
from shardlog.partitions import PartitionState
from shardlog.segments import SegmentStore
from shardlog.tables import Tables


@dataclass(frozen=True)
class FedRecord:
    record: LogRecord
    committed_at_ms: int


class LogFeed:
    def __init__(
        self, store: SegmentStore, tables: Tables, partition_id: str, position: int
    ) -> None:
        self.store = store
        self.tables = tables
        self.partition_id = partition_id
        self.position = position  # the seq of the first record not yet taken
        self.head = position
        self.ended = False  # the partition was ENDED at the last head read
        self.horizon = 0  # the trim horizon at the last head read (TrimmedError below it)
        self._buffer: deque[FedRecord] = deque()  # records from position on
        self._segments: Iterator[Segment] | None = None
        self._read_until = position  # the seq after the last record buffered

    def refresh(self) -> int:
        """Re-read the head and state (one consistent GetItem)."""
        partition = self.tables.get_partition(self.partition_id)
        self.head = partition.next_seq if partition else 0
        self.ended = partition is not None and partition.state == PartitionState.ENDED
        self.horizon = partition.trim_horizon if partition else 0
        return self.head

    @property
    def at_end(self) -> bool:
        """ENDED, and every committed record taken."""
        return self.ended and self.position >= self.head

    def peek(self, count: int, *, refresh: bool = True) -> list[FedRecord]:
        """Up to ``count`` records from the position on (not taken). With ``refresh``, the
        head is re-read once if what is buffered does not reach ``count``."""
        refreshed = not refresh
        while len(self._buffer) < count:
            segment = next(self._segments, None) if self._segments is not None else None
            if segment is None:
                self._segments = None
                if refreshed:
                    break
                refreshed = True
                self.refresh()
                if self._read_until < self.head:
                    self._segments = self.store.segments(
                        self.partition_id,
                        self._read_until,
                        self.head,
                        prefetch=2,
                        horizon=self.horizon,
                    )
                continue
            for record in segment.records:
                if record.seq >= self._read_until:
                    self._buffer.append(FedRecord(record, segment.written_at_ms))
            self._read_until = max(self._read_until, segment.next_seq)
        return list(self._buffer)[:count]

    def take(self, count: int) -> None:
        """Mark the next ``count`` records consumed."""
        for _ in range(count):
            self._buffer.popleft()
        self.position += count

    def seek(self, seq: int) -> None:
        """Continue from ``seq`` (a retry from an earlier record, or a skip forward)."""
        while self._buffer and self._buffer[0].record.seq < seq:
            self._buffer.popleft()
        if self._buffer and self._buffer[0].record.seq == seq:
            self.position = seq
            return
        self._buffer.clear()
        self._segments = None
        self.position = self._read_until = seq
