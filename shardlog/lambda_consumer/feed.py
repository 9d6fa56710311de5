"""A Lambda consumer runner's view of one partition's committed log, from a position on.

It reads through the segment store only, trusts only the head it read from the partitions
table, and keeps each record's commit time (its segment's ``written_at``) for the
batching window. A segment is fetched once however many batches it feeds; the head is
re-read only when what it allowed has been read. A feed may start from the partition as
the runner read it a moment before (``known``: one consistent GetItem, made to decide the
run is ready): the first look reads up to that head without reading it again, as a look
that has just read the head does; later looks re-read it when what it allowed has run out.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass

from shardlog.format import LogRecord, Segment
from shardlog.partitions import PartitionState
from shardlog.segments import SegmentStore
from shardlog.tables import PartitionInfo, Tables


@dataclass(frozen=True)
class FedRecord:
    record: LogRecord
    committed_at_ms: int


class LogFeed:
    def __init__(
        self,
        store: SegmentStore,
        tables: Tables,
        partition_id: str,
        position: int,
        known: PartitionInfo | None = None,
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
        self._fresh = known is not None  # the first look need not re-read the head
        if known is not None:
            self._note(known)

    def refresh(self) -> int:
        """Re-read the head and state (one consistent GetItem)."""
        self._note(self.tables.get_partition(self.partition_id))
        return self.head

    def _note(self, partition: PartitionInfo | None) -> None:
        self.head = partition.next_seq if partition else 0
        self.ended = partition is not None and partition.state == PartitionState.ENDED
        self.horizon = partition.trim_horizon if partition else 0

    @property
    def at_end(self) -> bool:
        """ENDED, and every committed record taken."""
        return self.ended and self.position >= self.head

    def peek(self, count: int, *, refresh: bool = True) -> list[FedRecord]:
        """Up to ``count`` records from the position on (not taken): first up to the head
        last read, then, with ``refresh``, the head is re-read once if what is buffered does
        not reach ``count``."""
        refreshed, opened = not refresh or self._fresh, False
        self._fresh = False
        while len(self._buffer) < count:
            segment = next(self._segments, None) if self._segments is not None else None
            if segment is None:
                self._segments = None
                if self._read_until < self.head and not opened:
                    opened = True  # once per head read: a segment store always reaches it
                    self._segments = self.store.segments(
                        self.partition_id,
                        self._read_until,
                        self.head,
                        prefetch=2,
                        horizon=self.horizon,
                    )
                    continue
                if refreshed:
                    break
                refreshed, opened = True, False
                self.refresh()
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
