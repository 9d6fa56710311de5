"""A forward cursor over one partition's committed log, batch by batch.

It keeps one ``SegmentStore.segments`` iterator open while there is log below the head it
read, so a segment is fetched once however many batches it feeds, and reopens it
(re-reading the head) once that is consumed. Only committed records are returned.

A position below the partition's trim horizon (shardlog/retention.py; possible only when
retention does not hold segments for the groups) moves up to the horizon at the reopen: the
records between were expired unread, ``trimmed_unread`` counts them and a warning names them.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Iterator

from shardlog import constants as C
from shardlog.format import LogRecord, Segment
from shardlog.reader import LogReader

_REMEMBERED_SEGMENTS = 64
logger = logging.getLogger(__name__)


class PartitionCursor:
    def __init__(self, reader: LogReader, partition_id: str, position: int) -> None:
        self.reader = reader
        self.partition_id = partition_id
        self.position = position  # the seq of the next record to return
        self._segments: Iterator[Segment] | None = None
        self._records: tuple[LogRecord, ...] = ()  # the current segment's records...
        self._index = 0  # ...and the next one to return
        self._ranges: deque[tuple[int, int]] = deque(maxlen=_REMEMBERED_SEGMENTS)
        self.head = position  # the partition's committed head as of the last reopen
        self.ended = False  # the partition was ENDED at the last reopen
        self.trimmed_unread = 0  # records retention expired before this cursor read them

    @property
    def caught_up(self) -> bool:
        """Nothing is left below the head read last: the partition is consumed to it."""
        return self._index >= len(self._records) and self.position >= self.head

    def next_batch(self, max_records: int) -> list[LogRecord]:
        """Up to max_records records from the position on; [] when caught up with the head."""
        batch: list[LogRecord] = []
        reopened = False
        while len(batch) < max_records:
            if self._index < len(self._records):
                end = min(len(self._records), self._index + max_records - len(batch))
                batch.extend(self._records[self._index : end])
                self._index = end
                continue
            if self._segments is None:
                if reopened or batch:
                    break  # reopen (one head read) at most once per call, and only when empty
                self._segments = self._reopen()
                reopened = True
            try:
                segment = next(self._segments, None)
            except Exception:
                self.close()
                if not batch:
                    raise
                break  # deliver what precedes the failure; the next call meets it again
            if segment is None:
                self._segments = None
                continue
            self._ranges.append((segment.first_seq, segment.next_seq))
            expected = batch[-1].seq + 1 if batch else self.position
            self._records, self._index = segment.records, max(0, expected - segment.first_seq)
        if batch:
            self.position = batch[-1].seq + 1
        return batch

    def _reopen(self) -> Iterator[Segment]:
        # One consistent read gives head and state together: an ENDED head is final.
        partition = self.reader.tables.get_partition(self.partition_id)
        self.head = partition.next_seq if partition else 0
        self.ended = partition is not None and partition.state == C.STATE_ENDED
        horizon = partition.trim_horizon if partition else 0
        if self.position < horizon:
            self._restart_at(horizon)
        if self.position >= self.head:
            return iter(())
        return self.reader.store.segments(
            self.partition_id,
            self.position,
            self.head,
            prefetch=self.reader.prefetch,
            horizon=horizon,
        )

    def _restart_at(self, horizon: int) -> None:
        logger.warning(
            "%s: position %d is below the trim horizon %d; %d records expired unread, "
            "continuing at %d",
            self.partition_id,
            self.position,
            horizon,
            horizon - self.position,
            horizon,
        )
        self.trimmed_unread += horizon - self.position
        self.position = horizon

    def segment_offset(self, seq: int) -> int | None:
        """How far ``seq`` is inside its segment, when it is inside one (not its first record)."""
        for first, end in reversed(self._ranges):
            if first <= seq < end:
                return seq - first if seq != first else None
        return None

    def close(self) -> None:
        if self._segments is not None:
            close = getattr(self._segments, "close", None)
            if close is not None:
                close()
            self._segments = None
        self._records, self._index = (), 0
