"""Read the committed log of one partition, in order.

Readers trust only ``nextSequenceNumber``: objects at or past it are uncommitted
leftovers and stay invisible; a missing or misplaced object below it is
corruption and raises CorruptLogError. It is never skipped. ``LogReader`` reads the
head from the partitions table and the segments through the one ``SegmentStore``.

Below the partition's trim horizon (``trimHorizonSeq``, shardlog/retention.py) the log
answers TrimmedError naming the horizon. The horizon is read with the head; if the log turns
out to have a gap while it is read, the partition item is read again: a gap the horizon has
since passed (retention moved it and the segment expired meanwhile) is TrimmedError too, any
other gap stays CorruptLogError.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TypeVar

from shardlog import constants as C
from shardlog.aws import Clients
from shardlog.exceptions import CorruptLogError, NotFoundError, TrimmedError
from shardlog.format import LogRecord, Segment
from shardlog.segments import SegmentStore
from shardlog.tables import PartitionInfo, TableNames, Tables

T = TypeVar("T", LogRecord, Segment)


class LogReader:
    def __init__(
        self,
        clients: Clients,
        bucket: str = C.DEFAULT_BUCKET_NAME,
        tables: TableNames | None = None,
        *,
        prefetch: int = 8,
    ) -> None:
        self.clients = clients
        self.bucket = bucket
        self.tables = Tables(clients, tables)
        self.store = SegmentStore(clients, bucket)
        self.prefetch = max(1, prefetch)

    def head(self, partition_id: str) -> int:
        partition = self.tables.get_partition(partition_id)
        return partition.next_seq if partition else 0

    def require_partition(self, partition_id: str) -> PartitionInfo:
        """The partition's item; NotFoundError naming it if the log has no such partition."""
        partition = self.tables.get_partition(partition_id)
        if partition is None:
            raise NotFoundError(
                f"no partition {partition_id!r} in table {self.tables.names.partitions} "
                "(`shardlog status` lists the partitions)"
            )
        return partition

    def records(
        self, partition_id: str, from_seq: int = 0, to_seq: int | None = None
    ) -> Iterator[LogRecord]:
        """Committed records with from_seq <= seq < min(to_seq, head), in order;
        TrimmedError from below the trim horizon."""
        horizon, end = self._bounds(partition_id, from_seq, to_seq)
        records = self.store.records(
            partition_id, from_seq, end, prefetch=self.prefetch, horizon=horizon
        )
        return self._trimmed_or_corrupt(partition_id, records, lambda r: r.seq + 1, from_seq)

    def segments(
        self, partition_id: str, from_seq: int = 0, to_seq: int | None = None
    ) -> Iterator[Segment]:
        """Committed segments overlapping [from_seq, min(to_seq, head)), verified dense;
        TrimmedError from below the trim horizon."""
        horizon, end = self._bounds(partition_id, from_seq, to_seq)
        segments = self.store.segments(
            partition_id, from_seq, end, prefetch=self.prefetch, horizon=horizon
        )
        return self._trimmed_or_corrupt(partition_id, segments, lambda s: s.next_seq, from_seq)

    def horizon(self, partition_id: str) -> int:
        """The partition's trim horizon: the first seq the log still answers for."""
        partition = self.tables.get_partition(partition_id)
        return partition.trim_horizon if partition else 0

    def _bounds(self, partition_id: str, from_seq: int, to_seq: int | None) -> tuple[int, int]:
        """The horizon and the end of the read, from one read of the partition item."""
        if from_seq < 0:
            raise ValueError("from_seq must be >= 0")
        partition = self.tables.get_partition(partition_id)
        head = partition.next_seq if partition else 0
        horizon = partition.trim_horizon if partition else 0
        return horizon, head if to_seq is None else min(to_seq, head)

    def _trimmed_or_corrupt(
        self, partition_id: str, items: Iterator[T], next_of: Callable[[T], int], at: int
    ) -> Iterator[T]:
        """``items``, with a gap the horizon passed during the read turned into TrimmedError."""
        try:
            for item in items:
                yield item
                at = next_of(item)
        except CorruptLogError as exc:
            horizon = self.horizon(partition_id)
            if at < horizon:
                raise TrimmedError(partition_id, horizon, at) from exc
            raise
