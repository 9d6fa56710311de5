"""The look-up of idempotent produce: which record ids reached a partition, or any of its
ancestors, since a given arrival time, and when each last arrived.

Ingest drops a resent record (shardlog/idempotence.py) whose id reached its partition or an
ancestor within the deduplication window before it (docs/FORMAT.md, section 9). The
writer (shardlog/writer.py) asks this module, for batches holding a resent record only:

1. **Lineage without shard sync.** A partition's parents come from its item when shard sync
   recorded them (``lineage_known``); else (no item yet, or one the ingest commit created)
   from ListShards of the batch's stream: one listing names every shard's parents, and
   parents never change, so ``Lineage`` keeps them. Lambda ingests a split child as soon as
   it has records, up to a shard sync interval before its lineage is recorded, and a
   resend of a record the parent holds hashes to the child.
2. **Newest first, up to the window's start.** A partition's segment objects are listed back
   from its head (``SegmentStore.listing_back``) and fetched newest first, one GET in
   flight at first and one more for each segment read, up to ``parallel``: a short tail
   costs a few GETs, a long one is read in parallel. Each segment must end where the newer
   one starts (a gap below the head is corruption). The read stops after the first
   segment whose first record arrived before the window: Kinesis stamps arrival times in
   sequence order, so everything below it is older.
3. **Ancestors when a partition is wholly inside.** A partition read back to seq 0 without
   leaving the window may have parents with records inside it too: their tails are read
   the same way, and theirs in turn. A parent with no item has an empty log, but its own
   parents are still walked (split twice before the middle shard took a record). Kinesis
   closed every parent before its child took a record, so parents' records are older.
4. **Bounded.** At most ``max_segments`` GETs and ``max_bytes`` bytes (sizes from the
   listing, counted before a GET is sent) and ``max_lists`` ListObjectsV2 requests per
   look-up, plus one GetItem per ancestor read and, when some lineage is not recorded,
   one ListShards page per 1,000 shards. A look-up the limits stop before the window's
   start is ``truncated``: what it read still counts; a resend it did not find is kept.
5. **Deterministic.** The answer depends on the committed logs and the limits only, never on
   timing (GETs in flight depend on the segments read, not on how fast they came): the
   partition's head is the one the writer read, and its ancestors' logs are complete
   (Lambda reads a parent to its end before its children). So every attempt at a batch
   drops the same copies, and a leftover segment an earlier attempt wrote holds exactly
   the records this one would write (the write path's adoption check).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Generator, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import closing
from dataclasses import dataclass, field

from shardlog import constants as C
from shardlog.aws import Clients
from shardlog.exceptions import ConfigurationError, CorruptLogError, ShardlogError
from shardlog.format import Segment
from shardlog.partitions import lineage_known
from shardlog.segments import ListedSegment, SegmentStore, segment_key
from shardlog.shardsync import list_shards, parents_of
from shardlog.tables import PartitionInfo, Tables

# What the look-up does on AWS, as IAM actions (the ingest role must grant them all):
# ListObjectsV2 is s3:ListBucket, on keys under events/ only.
LOOKUP_ACTIONS = ("s3:ListBucket", "s3:GetObject", "dynamodb:GetItem", "kinesis:ListShards")
# Shards whose parents a Lineage keeps (a Lambda container sees a few): past this many it
# forgets them and lists again when it needs one.
REMEMBERED_SHARDS = 4096


@dataclass(frozen=True)
class LookupLimits:
    """What one look-up may spend (module doc, item 4; the defaults' reasoning is with the
    constants)."""

    max_segments: int = C.DEDUPE_LOOKUP_MAX_SEGMENTS
    max_bytes: int = C.DEDUPE_LOOKUP_MAX_BYTES
    max_lists: int = C.DEDUPE_LOOKUP_MAX_LISTS
    parallel: int = C.DEDUPE_LOOKUP_PARALLEL

    def __post_init__(self) -> None:
        for name in ("max_segments", "max_bytes", "max_lists", "parallel"):
            if getattr(self, name) < 1:
                raise ValueError(f"LookupLimits.{name} must be at least 1")


@dataclass
class RecentIds:
    """The ids that reached the partition or an ancestor at or after ``since_ms``, each with
    its latest arrival (ms); what the look-up spent, and whether its limits stopped it."""

    since_ms: int
    arrivals: dict[str, int] = field(default_factory=dict)
    truncated: bool = False
    segments_read: int = 0  # GETs sent
    bytes_read: int = 0
    lists: int = 0  # ListObjectsV2 requests
    partitions_read: list[str] = field(default_factory=list)

    def add(self, record_id: str | None, arrival_ms: int) -> None:
        """One record that reached the log (or comes earlier in the batch)."""
        if record_id is None or arrival_ms < self.since_ms:
            return
        # The latest arrival: a copy kept (unflagged, or resent past the window) is the one
        # a later resend's window is measured from.
        if arrival_ms > self.arrivals.get(record_id, -1):
            self.arrivals[record_id] = arrival_ms

    def arrived_since(self, record_id: str, since_ms: int) -> bool:
        return self.arrivals.get(record_id, -1) >= since_ms


class Lineage:
    """Partitions' parents, from their items when shard sync recorded them, else from
    ListShards of the stream (module doc, item 1)."""

    def __init__(self, clients: Clients) -> None:
        self.clients = clients
        self._listed: dict[str, tuple[str, ...] | None] = {}  # None: not listed (trimmed)

    def parents(
        self, partition_id: str, item: PartitionInfo | None, stream: str | None
    ) -> tuple[str, ...] | None:
        """The partition's parents; None when Kinesis does not list the shard (trimmed)."""
        if item is not None and lineage_known(item):
            return item.parents
        if partition_id not in self._listed:
            self._list(partition_id, stream)
            self._listed.setdefault(partition_id, None)  # not listed: no need to ask again
        return self._listed[partition_id]

    def _list(self, partition_id: str, stream: str | None) -> None:
        if stream is None:
            raise ConfigurationError(
                f"partition {partition_id} has no lineage recorded yet and the writer was "
                "given no stream to list its shards: a resent record's look-up cannot reach "
                "its parents (pass the batch's stream, as the ingest handler does with the "
                "event's eventSourceARN, or set WriterSettings.stream)"
            )
        shards = list_shards(self.clients.kinesis, stream)
        if len(self._listed) + len(shards) > REMEMBERED_SHARDS:
            self._listed.clear()
        self._listed.update({shard["ShardId"]: parents_of(shard) for shard in shards})


@dataclass
class _Budget:
    limits: LookupLimits
    found: RecentIds
    refused: bool = False  # a GET did not fit: nothing more is fetched

    def take(self, segment: ListedSegment) -> bool:
        """Count one GET against the limits; False (and no GET from now on) when it does
        not fit."""
        found = self.found
        if (
            self.refused
            or found.segments_read + 1 > self.limits.max_segments
            or found.bytes_read + segment.size > self.limits.max_bytes
        ):
            self.refused = True
            return False
        found.segments_read += 1
        found.bytes_read += segment.size
        return True

    @property
    def lists_left(self) -> int:
        return self.limits.max_lists - self.found.lists


class DedupeLookup:
    """The look-up (module doc): ``record_ids_since`` for the writer."""

    def __init__(
        self, store: SegmentStore, tables: Tables, lineage: Lineage, limits: LookupLimits
    ) -> None:
        self.store = store
        self.tables = tables
        self.lineage = lineage
        self.limits = limits

    def record_ids_since(
        self, partition: PartitionInfo, since_ms: int, stream: str | None
    ) -> RecentIds:
        """The ids that reached ``partition`` (as of its head as read) or an ancestor at or
        after ``since_ms``. ``stream``: the Kinesis stream (name or ARN) the partition's
        shard belongs to, for lineage shard sync has not recorded yet."""
        found = RecentIds(since_ms)
        budget = _Budget(self.limits, found)
        frontier = [partition.partition_id]
        visited: set[str] = set()
        while frontier and not found.truncated:
            partition_id = frontier.pop()
            if partition_id in visited:
                continue
            visited.add(partition_id)
            item = partition if partition_id == partition.partition_id else None
            if item is None:
                item = self.tables.get_partition(partition_id)  # None: never ingested
            found.partitions_read.append(partition_id)
            head = max(item.next_seq, 0) if item is not None else 0
            if not self._read_back(partition_id, head, budget):
                continue  # it holds records older than the window: so do its parents
            parents = self.lineage.parents(partition_id, item, stream)
            if parents is None:
                if partition_id == partition.partition_id:
                    raise ShardlogError(
                        f"stream {stream} does not list shard {partition_id}: its parents "
                        "are unknown, so a resent record's look-up cannot cover them"
                    )
                parents = ()  # trimmed from Kinesis: older than any window
            frontier.extend(reversed(parents))  # the first parent is read first
        return found

    def _read_back(self, partition_id: str, head: int, budget: _Budget) -> bool:
        """Read the partition's committed tail back from ``head`` into the budget's
        ``found``, newest first (module doc, item 2). True when the whole log is inside the
        window (its parents may hold records inside it too)."""
        found = budget.found
        listing = self.store.listing_back(partition_id, head, max_lists=budget.lists_left)
        expected_end = head
        try:
            with closing(self._newest_first(partition_id, listing, budget)) as segments:
                for segment in segments:
                    if segment.next_seq != expected_end:
                        raise CorruptLogError(
                            f"{partition_id}: expected a segment ending at seq {expected_end}, "
                            f"found {segment_key(partition_id, segment.first_seq)} ending at "
                            f"{segment.next_seq}: a committed segment is missing"
                        )
                    expected_end = segment.first_seq
                    for record in segment.records:
                        found.add(record.record_id, record.arrival_ms)
                    if segment.records[0].arrival_ms < found.since_ms:
                        return False  # the window's start: older from here back
        finally:
            found.lists += listing.lists
        if budget.refused or listing.truncated:  # stopped inside the window
            found.truncated = True
            return False
        if expected_end != 0:
            raise CorruptLogError(
                f"{partition_id}: committed head is {head} but no segment holds seq "
                f"{expected_end - 1}"
            )
        return True

    def _newest_first(
        self, partition_id: str, listing: Iterable[ListedSegment], budget: _Budget
    ) -> Generator[Segment, None, None]:
        """The listed segments fetched, in listing order: one GET in flight, then one more
        for each segment read, up to ``parallel``; none past the budget."""
        listed = iter(listing)
        read = 0
        with ThreadPoolExecutor(self.limits.parallel) as pool:
            in_flight: deque[Future[Segment]] = deque()
            try:
                while True:
                    while len(in_flight) < min(self.limits.parallel, read + 1):
                        segment = None if budget.refused else next(listed, None)
                        if segment is None or not budget.take(segment):
                            break
                        in_flight.append(pool.submit(self.store.fetch, partition_id, segment.start))
                    if not in_flight:
                        return
                    yield in_flight.popleft().result()
                    read += 1
            finally:
                pool.shutdown(cancel_futures=True)
