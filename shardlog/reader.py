"""Read the committed log of one partition, in order.

Readers trust only ``nextSequenceNumber``: objects at or past it are uncommitted
leftovers and stay invisible; a missing or misplaced object below it is
corruption and raises CorruptLogError. It is never skipped.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from shardlog import constants as C
from shardlog.aws import Clients
from shardlog.exceptions import CorruptLogError
from shardlog.format import LogRecord, Segment, decode_segment, partition_prefix, seq_of_key
from shardlog.tables import TableNames, Tables

_FIRST_WINDOW = 1024


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
        self.prefetch = max(1, prefetch)

    def head(self, partition_id: str) -> int:
        partition = self.tables.get_partition(partition_id)
        return partition.next_seq if partition else 0

    def records(
        self, partition_id: str, from_seq: int = 0, to_seq: int | None = None
    ) -> Iterator[LogRecord]:
        """Committed records with from_seq <= seq < min(to_seq, head), in order."""
        for segment in self.segments(partition_id, from_seq, to_seq):
            for record in segment.records:
                if from_seq <= record.seq and (to_seq is None or record.seq < to_seq):
                    yield record

    def segments(
        self, partition_id: str, from_seq: int = 0, to_seq: int | None = None
    ) -> Iterator[Segment]:
        """Committed segments overlapping [from_seq, min(to_seq, head)), verified dense."""
        if from_seq < 0:
            raise ValueError("from_seq must be >= 0")
        head = self.head(partition_id)
        end = head if to_seq is None else min(to_seq, head)
        if from_seq >= end:
            return
        start = self._segment_start(partition_id, from_seq)
        expected = start
        with ThreadPoolExecutor(self.prefetch) as pool:
            window: list[tuple[str, Future[Segment]]] = []
            keys = self._keys_from(partition_id, start)
            while True:
                while len(window) < self.prefetch:
                    key = next(keys, None)
                    if key is None or seq_of_key(key) >= end:
                        break
                    window.append((key, pool.submit(self._fetch, key)))
                if not window:
                    break
                key, future = window.pop(0)
                segment = future.result()
                if seq_of_key(key) != expected or segment.first_seq != expected:
                    raise CorruptLogError(
                        f"{partition_id}: expected the segment at seq {expected}, found {key} "
                        f"(first seq {segment.first_seq}): a committed segment is missing"
                    )
                if segment.partition_id != partition_id:
                    raise CorruptLogError(f"{key} belongs to partition {segment.partition_id}")
                expected = segment.next_seq
                yield segment
                if expected >= end:
                    break
        if expected < end:
            raise CorruptLogError(
                f"{partition_id}: committed head is {head} but the log ends at seq {expected}"
            )

    def _fetch(self, key: str) -> Segment:
        body = self.clients.s3.get_object(Bucket=self.bucket, Key=key)["Body"].read()
        return decode_segment(body)

    def _keys_from(self, partition_id: str, start: int) -> Iterator[str]:
        prefix = partition_prefix(partition_id)
        kwargs: dict[str, Any] = {"Bucket": self.bucket, "Prefix": prefix}
        if start > 0:
            kwargs["StartAfter"] = f"{prefix}{start - 1:0{C.SEQ_DIGITS}d}"
        for page in self.clients.s3.get_paginator("list_objects_v2").paginate(**kwargs):
            for obj in page.get("Contents", []):
                yield obj["Key"]

    def _segment_start(self, partition_id: str, seq: int) -> int:
        """The first seq of the segment holding ``seq``: the greatest key <= seq.

        S3 lists forward only, so look back in doubling windows: O(log distance).
        """
        if seq == 0:
            return 0
        prefix = partition_prefix(partition_id)
        window = _FIRST_WINDOW
        while True:
            low = max(seq - window, 0)
            kwargs: dict[str, Any] = {"Bucket": self.bucket, "Prefix": prefix, "MaxKeys": 1000}
            if low > 0:
                kwargs["StartAfter"] = f"{prefix}{low - 1:0{C.SEQ_DIGITS}d}"
            page = self.clients.s3.list_objects_v2(**kwargs)
            starts = [seq_of_key(o["Key"]) for o in page.get("Contents", [])]
            below = [s for s in starts if s <= seq]
            if below and (len(below) < len(starts) or not page.get("IsTruncated")):
                return max(below)
            if below:  # the page was full of keys below seq: continue from its end
                window = seq - max(below)
                if window <= 0:
                    return seq
                continue
            if low == 0:
                raise CorruptLogError(f"{partition_id}: no segment holds committed seq {seq}")
            window *= 2
