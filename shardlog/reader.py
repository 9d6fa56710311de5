"""Read the committed log of one partition, in order.

Readers trust only ``nextSequenceNumber``: objects at or past it are uncommitted
leftovers and stay invisible; a missing or misplaced object below it is
corruption and raises CorruptLogError. It is never skipped. ``LogReader`` reads the
head from the partitions table and the segments through the one ``SegmentStore``.
"""

from __future__ import annotations

from collections.abc import Iterator

from shardlog import constants as C
from shardlog.aws import Clients
from shardlog.exceptions import NotFoundError
from shardlog.format import LogRecord, Segment
from shardlog.segments import SegmentStore
from shardlog.tables import PartitionInfo, TableNames, Tables


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
        """Committed records with from_seq <= seq < min(to_seq, head), in order."""
        end = self._end(partition_id, from_seq, to_seq)
        return self.store.records(partition_id, from_seq, end, prefetch=self.prefetch)

    def segments(
        self, partition_id: str, from_seq: int = 0, to_seq: int | None = None
    ) -> Iterator[Segment]:
        """Committed segments overlapping [from_seq, min(to_seq, head)), verified dense."""
        end = self._end(partition_id, from_seq, to_seq)
        return self.store.segments(partition_id, from_seq, end, prefetch=self.prefetch)

    def _end(self, partition_id: str, from_seq: int, to_seq: int | None) -> int:
        if from_seq < 0:
            raise ValueError("from_seq must be >= 0")
        head = self.head(partition_id)
        return head if to_seq is None else min(to_seq, head)
