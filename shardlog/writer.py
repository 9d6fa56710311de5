"""The write path: append a Kinesis batch of one shard to its S3 log, exactly once.

1. acquire the ingest lease (one conditional write);
2. read the partition head and the ingest checkpoint as one consistent state (one
   transactional read of the partition item and the lease item), check the lease is still
   the one acquired, and drop redelivered records (at or below the checkpoint);
3. create segment objects with If-None-Match: *, adopting a crashed writer's leftover;
4. commit head and checkpoint in one transaction, fenced on the lease;
5. only then return. Budget: 4 requests per batch, plus 1 per extra segment; 3 when this
   writer committed the shard's previous batch itself (a warm Lambda container).

Why step 2 can be skipped: every lease write increments ``leaseCounter``, and nobody
commits without a lease write. So when the acquire returns the counter this writer's own
last commit left, plus one (the acquire's own increment), and the checkpoint that commit
wrote, nobody wrote the lease since: the head is still the one that commit wrote, paired
with that checkpoint, as of the acquire (exactly what step 2 would have read). The
partition's other attributes can change without a lease (shard sync closes a shard), so
only an OPEN partition whose lineage is recorded is remembered, and such a commit also
holds only while the partition is still OPEN; when shard sync closed it meanwhile, the
writer reads the state afresh and commits again (its segments are already in place).

Idempotent produce (docs/FORMAT.md, section 9): a record its producer sent again after an
unknown outcome (``resent``) is dropped when its record id reached this partition (earlier
records of the batch included) or any ancestor, among records that arrived within the
deduplication window before it, whether or not shard sync has recorded the lineage yet
(shardlog/dedupe.py: parents from ListShards of the batch's stream then). Only batches
holding such a record pay for the look-up, within its limits; the decision depends on the
committed log only, so every attempt at a batch drops the same copies. Copies dropped are
passed by the checkpoint; a batch of a CLOSED shard that holds nothing new but reaches the
shard's end (only dropped copies, or only redeliveries after a commit that reached it while
the partition was read OPEN) ends the partition in the same write as its checkpoint.

Why step 2 reads both at once: head and checkpoint only ever change together (step 4),
and a segment is adoptable only if it was cut from a (head, checkpoint) pair that existed.
A writer that paired the checkpoint its acquire returned with a head read later could,
after a stall in between during which its lease expired and a successor committed,
write already-committed records at the new head: a leftover no later writer could adopt.

The requests (their shapes, conditions and refusals) are the data-access layer's:
shardlog/lease.py for the lease, shardlog/dal/partitions.py for the state read and the
commit transaction. This module decides what is read, written and fenced, in which order.
"""

from __future__ import annotations

import uuid
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from shardlog import constants as C
from shardlog.aws import Clients
from shardlog.clock import Clock, SystemClock
from shardlog.dal.partitions import HeadCommit, PartitionsTable
from shardlog.dedupe import DedupeLookup, Lineage, LookupLimits
from shardlog.exceptions import CommitConflictError, CorruptLogError, LeaseLostError
from shardlog.format import Compression, IncomingRecord, Segment, encode_segment, plan_segments
from shardlog.lease import LeaseManager
from shardlog.partitions import PartitionState, lineage_known, reaches_end
from shardlog.segments import SegmentStore, segment_key
from shardlog.tables import (
    TRANSACTION_CANCELED,
    Lease,
    PartitionInfo,
    TableNames,
    Tables,
    kinesis_seq_int,
)

# Partitions whose last commit a writer remembers (one per shard it wrote; a Lambda
# container sees a few): past this many it forgets them all and reads state again.
REMEMBERED_PARTITIONS = 1024


@dataclass(frozen=True)
class WriterSettings:
    bucket: str = C.DEFAULT_BUCKET_NAME
    tables: TableNames = field(default_factory=TableNames)
    lease_duration_ms: int = C.DEFAULT_LEASE_DURATION_MS
    segment_max_records: int = C.DEFAULT_SEGMENT_MAX_RECORDS
    segment_max_bytes: int = C.DEFAULT_SEGMENT_MAX_BYTES
    # "zlib": each segment stored compressed when that saves a tenth of it (docs/FORMAT.md,
    # section 10); only the bytes of the objects change, never the protocol.
    segment_compression: Compression = C.DEFAULT_SEGMENT_COMPRESSION
    dedupe_window_ms: int = C.DEFAULT_DEDUPE_WINDOW_S * 1000
    dedupe_limits: LookupLimits = field(default_factory=LookupLimits)
    # The Kinesis stream (name or ARN) of the batches, when ``append`` is not told: the
    # look-up lists its shards for lineage shard sync has not recorded yet.
    stream: str | None = None


@dataclass
class PreparedBatch:
    """A batch whose segments are in S3 but not committed: what ``commit`` needs."""

    partition: PartitionInfo
    lease: Lease
    head: int
    new_head: int
    checkpoint: str | None
    received: int
    redelivered: int = 0
    deduplicated: int = 0
    resent_unchecked: int = 0  # resent records kept by a look-up its limits stopped
    written: int = 0
    adopted: int = 0
    added_bytes: int = 0
    remembered: bool = False  # head and partition came from this writer's last commit


@dataclass(frozen=True)
class Remembered:
    """What this writer's own last commit on a partition left behind (see step 2)."""

    partition: PartitionInfo  # OPEN, lineage recorded, head as committed
    counter: int  # leaseCounter after the commit
    checkpoint: str | None

    def still_holds(self, acquired: Lease) -> bool:
        """Nobody wrote the lease between that commit and this acquire (its +1)."""
        return (acquired.counter, acquired.checkpoint) == (self.counter + 1, self.checkpoint)


@dataclass(frozen=True)
class AppendResult:
    partition_id: str
    first_seq: int  # the head before this batch
    next_seq: int  # the head after it
    received: int
    redelivered: int  # dropped: already at or below the checkpoint
    segments_written: int
    segments_adopted: int
    checkpoint: str | None
    ended: bool
    deduplicated: int = 0  # dropped: resent copies of records already in the log
    state_read: bool = True  # False: the state came from this writer's previous commit
    resent_unchecked: int = 0  # resent records kept by a look-up its limits stopped

    @property
    def committed(self) -> int:
        return self.next_seq - self.first_seq


class LogWriter:
    """Appends batches of one shard at a time; safe to run from many processes at once."""

    def __init__(
        self,
        clients: Clients,
        settings: WriterSettings | None = None,
        *,
        clock: Clock | None = None,
    ) -> None:
        self.clients = clients
        self.settings = settings or WriterSettings()
        self.clock = clock or SystemClock()
        self.tables = Tables(clients, self.settings.tables)
        self.partitions = PartitionsTable(clients, self.settings.tables)
        self.store = SegmentStore(clients, self.settings.bucket)
        self.leases = LeaseManager(
            clients,
            self.settings.tables.consumers,
            clock=self.clock,
            lease_duration_ms=self.settings.lease_duration_ms,
        )
        self._remembered: dict[str, Remembered] = {}
        self.lookup = DedupeLookup(
            self.store, self.tables, Lineage(clients), self.settings.dedupe_limits
        )

    def remembers(self, partition_id: str) -> bool:
        """This writer's next batch of the partition may skip the state read (step 2)."""
        return partition_id in self._remembered

    def append(
        self,
        partition_id: str,
        records: Sequence[IncomingRecord],
        owner: str | None = None,
        *,
        stream: str | None = None,
    ) -> AppendResult:
        """Append one batch (in Kinesis order) of shard ``partition_id`` of ``stream`` (its
        name or ARN; default ``settings.stream``).

        Returns only once every record is committed (or was already). Raises
        LeaseHeldError, LeaseLostError, CommitConflictError or CorruptLogError
        otherwise; then nothing of this batch counts as committed and the caller
        must fail the batch so it is delivered again.
        """
        return self.commit(self.prepare(partition_id, records, owner, stream=stream))

    def prepare(
        self,
        partition_id: str,
        records: Sequence[IncomingRecord],
        owner: str | None = None,
        *,
        stream: str | None = None,
    ) -> PreparedBatch:
        """Steps 1-3: lease, head, segments in S3. Nothing is committed yet."""
        _check_ordered(partition_id, records)
        remembered = self._remembered.pop(partition_id, None)  # valid for one acquire only
        acquired = self.leases.acquire(
            C.INGEST_GROUP, partition_id, owner or f"writer-{uuid.uuid4()}"
        )
        if remembered is not None and remembered.still_holds(acquired):
            partition, lease, from_memory = remembered.partition, acquired, True
        else:
            (partition, lease), from_memory = self._read_state(acquired), False
        head = max(partition.next_seq, 0)
        checkpoint = lease.checkpoint
        after_checkpoint = _after(records, checkpoint)
        pending, unchecked = self._without_resent_copies(
            partition, after_checkpoint, stream or self.settings.stream
        )
        batch = PreparedBatch(partition, lease, head, head, checkpoint, len(records))
        batch.remembered = from_memory
        batch.redelivered = len(records) - len(after_checkpoint)
        batch.deduplicated = len(after_checkpoint) - len(pending)
        batch.resent_unchecked = unchecked
        planned = deque(self._plan(pending))
        while planned:
            chunk = planned.popleft()
            body = encode_segment(
                partition_id,
                batch.new_head,
                chunk,
                self.clock.now_ms(),
                compression=self.settings.segment_compression,
            )
            if self.store.create(partition_id, batch.new_head, body):
                batch.written += 1
                batch.added_bytes += len(body)
                batch.new_head += len(chunk)
                batch.checkpoint = chunk[-1].kinesis_sequence_number
                continue
            ahead = [*chunk, *(r for later in planned for r in later)]
            leftover = self._adoptable(partition_id, batch.new_head, ahead)
            batch.adopted += 1
            batch.new_head += len(leftover.records)
            batch.checkpoint = leftover.records[-1].kinesis_sequence_number
            # The leftover's boundary need not match ours: plan what remains afresh.
            planned = deque(self._plan(_after(ahead, batch.checkpoint)))
        if after_checkpoint and batch.deduplicated:
            # Dropped copies are done with too: the checkpoint passes them (they need not
            # be looked up again when Kinesis delivers them again).
            last = after_checkpoint[-1].kinesis_sequence_number
            if kinesis_seq_int(last) > kinesis_seq_int(batch.checkpoint):
                batch.checkpoint = last
        return batch

    def _without_resent_copies(
        self, partition: PartitionInfo, records: Sequence[IncomingRecord], stream: str | None
    ) -> tuple[list[IncomingRecord], int]:
        """``records`` without the resent copies of records that reached the partition
        (earlier records of the batch included) or an ancestor within the deduplication
        window; and how many resent records were kept unchecked (the look-up's limits
        stopped it before the window's start)."""
        resent = [r for r in records if r.resent and r.record_id is not None]
        if not resent:
            return list(records), 0  # no look-up: the budget of 4 (3) requests holds
        window_ms = self.settings.dedupe_window_ms
        since_ms = min(r.arrival_ms for r in resent) - window_ms
        found = self.lookup.record_ids_since(partition, since_ms, stream)
        kept: list[IncomingRecord] = []
        unchecked = 0
        for record in records:
            if record.record_id is not None:
                if record.resent and found.arrived_since(
                    record.record_id, record.arrival_ms - window_ms
                ):
                    continue
                unchecked += record.resent and found.truncated
                # Earlier in the batch counts as reached, within the same window: the
                # decision must not depend on how Lambda cut the batches.
                found.add(record.record_id, record.arrival_ms)
            kept.append(record)
        return kept, unchecked

    def _read_state(self, acquired: Lease) -> tuple[PartitionInfo, Lease]:
        """Step 2: the partition item and the lease item, as of one instant.

        Raises LeaseLostError when the lease is no longer the one acquired (a successor
        took it while this writer stalled): then nothing has been written.
        """
        partition_id = acquired.partition_id
        item, lease = self.partitions.read_with_lease(partition_id, C.INGEST_GROUP)
        if lease is None or (lease.owner, lease.counter) != (acquired.owner, acquired.counter):
            raise LeaseLostError(
                C.INGEST_GROUP, partition_id, "taken over between the acquire and the head read"
            )
        # No item: shard sync has not seen this shard yet (the commit creates it).
        partition = item if item is not None else PartitionInfo(partition_id, -1)
        return partition, lease

    def _plan(self, records: Sequence[IncomingRecord]) -> list[Sequence[IncomingRecord]]:
        if not records:
            return []
        return plan_segments(
            records, self.settings.segment_max_records, self.settings.segment_max_bytes
        )

    def commit(self, batch: PreparedBatch) -> AppendResult:
        """Steps 4-5: head and checkpoint in one fenced transaction, then report."""
        ended = False
        if (
            batch.new_head == batch.head
            and not batch.remembered
            and not reaches_end(batch.partition, batch.checkpoint)
        ):
            self._pass_or_release(batch)
        else:
            # New records; or nothing new but the end of a CLOSED shard reached (only
            # dropped copies, or a redelivery after a commit that reached it while the
            # partition read OPEN): the partition ends with the checkpoint, not at the next
            # shard sync; or nothing new from remembered state, which may be stale on just
            # that (shard sync closed the shard): the commit's still-OPEN condition finds it.
            self._commit(batch)
            ended = reaches_end(batch.partition, batch.checkpoint)
        self._remember(batch, ended)
        return AppendResult(
            batch.partition.partition_id,
            batch.head,
            batch.new_head,
            batch.received,
            batch.redelivered,
            batch.written,
            batch.adopted,
            batch.checkpoint,
            ended,
            batch.deduplicated,
            state_read=not batch.remembered,
            resent_unchecked=batch.resent_unchecked,
        )

    def _pass_or_release(self, batch: PreparedBatch) -> None:
        """Nothing new, the shard not ending here: the checkpoint passes the copies dropped
        (they need not be looked up again), or, with none, the lease is just released."""
        if batch.checkpoint == batch.lease.checkpoint:
            self.leases.release(batch.lease)
            return
        assert batch.checkpoint is not None
        self.leases.checkpoint_and_release(batch.lease, batch.checkpoint)

    def _remember(self, batch: PreparedBatch, ended: bool) -> None:
        """Keep what this commit left, for the next batch of the partition (step 2)."""
        partition = batch.partition
        if ended or partition.state != PartitionState.OPEN or not lineage_known(partition):
            return  # its attributes may still change without a lease write: read them
        if len(self._remembered) >= REMEMBERED_PARTITIONS:
            self._remembered.clear()
        self._remembered[partition.partition_id] = Remembered(
            replace(partition, next_seq=batch.new_head),
            batch.lease.counter + 1,  # every commit path is one fenced write: +1
            batch.checkpoint,
        )

    # --- steps ---------------------------------------------------------------------------
    def _adoptable(self, partition_id: str, seq: int, pending: Sequence[IncomingRecord]) -> Segment:
        """The uncommitted leftover at ``seq``, verified to hold exactly our next records."""
        leftover = self.store.fetch(partition_id, seq)
        for ours, theirs in zip(pending, leftover.records, strict=False):
            if ours.kinesis_sequence_number != theirs.kinesis_sequence_number:
                raise CorruptLogError(
                    f"uncommitted segment {segment_key(partition_id, seq)} starts with "
                    f"Kinesis record {leftover.records[0].kinesis_sequence_number}, expected "
                    f"{pending[0].kinesis_sequence_number}: refusing to overwrite or skip"
                )
        return leftover

    def _commit(self, batch: PreparedBatch) -> None:
        """Step 4: the new head (conditional on the head read) and the checkpoint (fenced on
        the lease, which it also releases) in one transaction."""
        partition, checkpoint = batch.partition, batch.checkpoint
        assert checkpoint is not None
        commit = HeadCommit(
            partition,
            batch.head,
            batch.new_head,
            checkpoint,
            self.clock.now_ms(),
            batch.written + batch.adopted,
            batch.added_bytes,
            only_while_open=batch.remembered,  # as this writer's last commit left it: OPEN
        )
        checkpoint_update = self.leases.checkpoint_update(batch.lease, checkpoint, release=True)
        refusal = self.partitions.commit_batch(commit, checkpoint_update)
        if refusal is None:
            return
        if refusal.lease_fenced:
            raise LeaseLostError(
                C.INGEST_GROUP, partition.partition_id, "commit fenced by leaseCounter"
            ) from refusal.cause
        if batch.remembered and self._read_afresh_unmoved(batch):
            self._commit(batch)  # once: the batch no longer comes from memory
            return
        raise CommitConflictError(
            f"partition {partition.partition_id} head moved from {batch.head} under the commit",
            aws_error_code=TRANSACTION_CANCELED,
        ) from refusal.cause

    def _read_afresh_unmoved(self, batch: PreparedBatch) -> bool:
        """A commit from remembered state found the partition changed without a lease write
        (shard sync closed it): read the state as step 2 does and, when the head is still
        the one the segments were cut at, take what was read for the batch (True)."""
        partition, _ = self._read_state(batch.lease)  # LeaseLostError if the lease moved
        if partition.next_seq != batch.head:
            return False
        batch.partition, batch.remembered = partition, False
        return True


def _after(records: Sequence[IncomingRecord], checkpoint: str | None) -> list[IncomingRecord]:
    """The records strictly after a Kinesis checkpoint (compared as integers). ``records``
    are in Kinesis order (``_check_ordered``), so those are a suffix: found at the first
    record past the checkpoint, which is the first one unless the batch is a redelivery."""
    floor = kinesis_seq_int(checkpoint)
    for index, record in enumerate(records):
        if kinesis_seq_int(record.kinesis_sequence_number) > floor:
            return list(records[index:])
    return []


def _check_ordered(partition_id: str, records: Sequence[IncomingRecord]) -> None:
    previous = -1
    for record in records:
        current = kinesis_seq_int(record.kinesis_sequence_number)
        if current <= previous:
            raise ValueError(
                f"batch for {partition_id} is not in Kinesis order at {current} (after {previous})"
            )
        previous = current
