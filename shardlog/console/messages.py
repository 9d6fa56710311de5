"""The message browser's reads: one partition from a seq or a time, a record, and the search
by partition key across partitions (bounded, resumable). Each through ``LogReader`` and the
segment store, as `shardlog read` reads; the bounds are in ``shardlog.console.queries``."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from shardlog.aws import Clients
from shardlog.console.queries import MAX_PAGE_RECORDS, SEARCH_BUDGET, TIME_SEARCH_MAX_LISTS
from shardlog.console.source import Deployment
from shardlog.exceptions import ValidationError
from shardlog.format import LogRecord
from shardlog.reader import LogReader
from shardlog.tables import PartitionInfo, Tables


@dataclass(frozen=True)
class Browse:
    partition: PartitionInfo
    records: list[LogRecord]
    from_seq: int
    found_by_time: datetime | None = None


def browse(
    deployment: Deployment,
    clients: Clients,
    partition_id: str,
    *,
    seq: int | None,
    at: datetime | None,
    limit: int,
) -> Browse:
    """Records of one partition from ``seq`` (or the first that arrived at or after ``at``);
    NotFoundError / ValidationError, as `shardlog read` refuses them."""
    if not 1 <= limit <= MAX_PAGE_RECORDS:
        raise ValidationError("limit", f"{limit} is not in 1..{MAX_PAGE_RECORDS}", limit=limit)
    reader = LogReader(clients, deployment.config.bucket, deployment.config.tables, prefetch=1)
    partition = reader.require_partition(partition_id)
    head = partition.next_seq
    start = seq or 0
    if at is not None:
        start = first_at_or_after(reader, partition_id, head, at)
    elif start > head:
        raise ValidationError(
            "seq",
            f"{start} is past partition {partition_id}'s head {head} (its committed records "
            f"are seq 0 to {head - 1})"
            if head
            else f"{start} is past partition {partition_id}'s head 0 (no record committed yet)",
            limit=head,
        )
    end = min(head, start + limit)
    records = list(reader.store.records(partition_id, start, end, prefetch=1))
    return Browse(partition, records, start, at)


def first_at_or_after(reader: LogReader, partition_id: str, head: int, at: datetime) -> int:
    """The seq of the first committed record that arrived at or after ``at`` (the head when
    none did): binary search over the segments by their first record's arrival (a shard's
    arrival times do not go back), then a scan of one segment."""
    target = int(at.timestamp() * 1000)
    starts = []
    for count, start in enumerate(reader.store.starts(partition_id)):
        if start >= head or count >= TIME_SEARCH_MAX_LISTS * 1000:
            break
        starts.append(start)
    low, high = 0, len(starts) - 1
    candidate = -1  # the last segment whose first record arrived before the target
    while low <= high:
        middle = (low + high) // 2
        first = reader.store.fetch(partition_id, starts[middle]).records[0]
        if first.arrival_ms < target:
            candidate, low = middle, middle + 1
        else:
            high = middle - 1
    if candidate < 0:
        return starts[0] if starts else head
    segment = reader.store.fetch(partition_id, starts[candidate])
    for record in segment.records:
        if record.seq < head and record.arrival_ms >= target:
            return record.seq
    return min(head, starts[candidate + 1]) if candidate + 1 < len(starts) else head


@dataclass(frozen=True)
class SearchResult:
    key: str
    found: list[LogRecord]
    searched_records: int
    total_records: int  # committed records in every partition
    next_cursor: str | None  # where a further request resumes; None when done
    partitions_done: int
    partition_ids: list[str]

    @property
    def partitions(self) -> int:
        return len(self.partition_ids)


def search(
    deployment: Deployment, clients: Clients, key: str, cursor: str | None, budget: int
) -> SearchResult:
    """Records with partition key ``key``, partitions in id order from ``cursor``
    ("<partition index>:<seq>"), reading ``budget`` records at most."""
    if not key:
        raise ValidationError("key", "give the partition key to look for")
    if not 1 <= budget <= 10 * SEARCH_BUDGET:
        raise ValidationError("budget", f"{budget} is not in 1..{10 * SEARCH_BUDGET}")
    tables = Tables(clients, deployment.config.tables)
    partitions = tables.list_partitions()
    index, seq = _cursor(cursor, len(partitions))
    reader = LogReader(clients, deployment.config.bucket, deployment.config.tables, prefetch=1)
    found: list[LogRecord] = []
    searched = 0
    while index < len(partitions) and searched < budget:
        partition = partitions[index]
        end = min(partition.next_seq, seq + budget - searched)
        if seq < end:
            for record in reader.store.records(partition.partition_id, seq, end, prefetch=1):
                if record.partition_key == key:
                    found.append(record)
            searched += end - seq
        seq = end
        if seq >= partition.next_seq:
            index, seq = index + 1, 0
    return SearchResult(
        key=key,
        found=found,
        searched_records=searched,
        total_records=sum(p.next_seq for p in partitions),
        next_cursor=f"{index}:{seq}" if index < len(partitions) else None,
        partitions_done=index,
        partition_ids=[p.partition_id for p in partitions],
    )


def _cursor(cursor: str | None, partitions: int) -> tuple[int, int]:
    if not cursor:
        return 0, 0
    index, _, seq = cursor.partition(":")
    if not (index.isdigit() and seq.isdigit()) or int(index) > partitions:
        raise ValidationError("cursor", f"{cursor!r} is not <partition index>:<seq>")
    return int(index), int(seq)


def record(deployment: Deployment, clients: Clients, partition_id: str, seq: int) -> LogRecord:
    """One committed record (a permalink); refused past the head."""
    page = browse(deployment, clients, partition_id, seq=seq, at=None, limit=1)
    if not page.records:
        head = page.partition.next_seq
        raise ValidationError(
            "seq", f"{seq} is past partition {partition_id}'s head {head}", limit=head
        )
    return page.records[0]
