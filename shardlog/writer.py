"""The write path: append a Kinesis batch of one shard to its S3 log, exactly once.

1. acquire the ingest lease (one conditional UpdateItem; it returns the checkpoint);
2. read the partition head (one consistent GetItem) and drop redelivered records;
3. create segment objects with If-None-Match: *, adopting a crashed writer's leftover;
4. commit head and checkpoint in one TransactWriteItems, fenced on the lease;
5. only then return. Budget: 4 requests per batch, plus 1 per extra segment.
"""

from __future__ import annotations

import uuid
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import ClientError

from shardlog import constants as C
from shardlog.aws import Clients
from shardlog.clock import Clock, SystemClock
from shardlog.exceptions import (
    CommitConflictError,
    CorruptLogError,
    LeaseLostError,
    ShardlogError,
    aws_error_code,
)
from shardlog.format import IncomingRecord, Segment, encode_segment, plan_segments
from shardlog.lease import LeaseManager
from shardlog.segments import SegmentStore, segment_key
from shardlog.tables import (
    Lease,
    PartitionInfo,
    TableNames,
    Tables,
    kinesis_seq_int,
    partition_key,
)


@dataclass(frozen=True)
class WriterSettings:
    bucket: str = C.DEFAULT_BUCKET_NAME
    tables: TableNames = field(default_factory=TableNames)
    lease_duration_ms: int = C.DEFAULT_LEASE_DURATION_MS
    segment_max_records: int = C.DEFAULT_SEGMENT_MAX_RECORDS
    segment_max_bytes: int = C.DEFAULT_SEGMENT_MAX_BYTES


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
    written: int = 0
    adopted: int = 0
    added_bytes: int = 0


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
        self.store = SegmentStore(clients, self.settings.bucket)
        self.leases = LeaseManager(
            clients,
            self.settings.tables.consumers,
            clock=self.clock,
            lease_duration_ms=self.settings.lease_duration_ms,
        )

    def append(
        self, partition_id: str, records: Sequence[IncomingRecord], owner: str | None = None
    ) -> AppendResult:
        """Append one batch (in Kinesis order) of shard ``partition_id``.

        Returns only once every record is committed (or was already). Raises
        LeaseHeldError, LeaseLostError, CommitConflictError or CorruptLogError
        otherwise; then nothing of this batch counts as committed and the caller
        must fail the batch so it is delivered again.
        """
        return self.commit(self.prepare(partition_id, records, owner))

    def prepare(
        self, partition_id: str, records: Sequence[IncomingRecord], owner: str | None = None
    ) -> PreparedBatch:
        """Steps 1-3: lease, head, segments in S3. Nothing is committed yet."""
        _check_ordered(partition_id, records)
        lease = self.leases.acquire(C.INGEST_GROUP, partition_id, owner or f"writer-{uuid.uuid4()}")
        partition = self.tables.get_partition(partition_id) or PartitionInfo(partition_id, -1)
        head = max(partition.next_seq, 0)
        checkpoint = lease.checkpoint
        pending = _after(records, checkpoint)
        batch = PreparedBatch(partition, lease, head, head, checkpoint, len(records))
        batch.redelivered = len(records) - len(pending)
        planned = deque(self._plan(pending))
        while planned:
            chunk = planned.popleft()
            body = encode_segment(partition_id, batch.new_head, chunk, self.clock.now_ms())
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
        return batch

    def _plan(self, records: Sequence[IncomingRecord]) -> list[Sequence[IncomingRecord]]:
        if not records:
            return []
        return plan_segments(
            records, self.settings.segment_max_records, self.settings.segment_max_bytes
        )

    def commit(self, batch: PreparedBatch) -> AppendResult:
        """Steps 4-5: head and checkpoint in one fenced transaction, then report."""
        partition = batch.partition
        ended = False
        if batch.new_head == batch.head:
            self.leases.release(batch.lease)
        else:
            assert batch.checkpoint is not None
            ended = (
                partition.state == C.STATE_CLOSED
                and partition.ending_kinesis_seq is not None
                and kinesis_seq_int(batch.checkpoint)
                >= kinesis_seq_int(partition.ending_kinesis_seq)
            )
            self._commit(batch, ended)
        return AppendResult(
            partition.partition_id,
            batch.head,
            batch.new_head,
            batch.received,
            batch.redelivered,
            batch.written,
            batch.adopted,
            batch.checkpoint,
            ended,
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

    def _commit(self, batch: PreparedBatch, ended: bool) -> None:
        partition, head, lease, checkpoint = (
            batch.partition,
            batch.head,
            batch.lease,
            batch.checkpoint,
        )
        assert checkpoint is not None
        new_head, segments, added_bytes = (
            batch.new_head,
            batch.written + batch.adopted,
            batch.added_bytes,
        )
        values: dict[str, Any] = {
            ":new": {"N": str(new_head)},
            ":now": {"N": str(self.clock.now_ms())},
            ":segs": {"N": str(segments)},
            ":bytes": {"N": str(added_bytes)},
            ":zero": {"N": "0"},
        }
        sets = [
            "#next = :new",
            "#committedAt = :now",
            "#segs = if_not_exists(#segs, :zero) + :segs",
            "#bytes = if_not_exists(#bytes, :zero) + :bytes",
        ]
        if partition.next_seq < 0:  # no item yet: shard sync has not seen this shard
            condition = "attribute_not_exists(#next)"
            sets.append("#state = if_not_exists(#state, :open)")
            values[":open"] = {"S": C.STATE_OPEN}
        else:
            condition = "#next = :old"
            values[":old"] = {"N": str(head)}
        if ended:
            sets.append("#state = :ended")
            values[":ended"] = {"S": C.STATE_ENDED}
        head_update = {
            "TableName": self.settings.tables.partitions,
            "Key": partition_key(partition.partition_id),
            "UpdateExpression": "SET " + ", ".join(sets),
            "ConditionExpression": condition,
            "ExpressionAttributeNames": {
                "#next": C.ATTR_NEXT_SEQUENCE_NUMBER,
                "#committedAt": C.ATTR_LAST_COMMITTED_AT,
                "#segs": C.ATTR_SEGMENT_COUNT,
                "#bytes": C.ATTR_COMMITTED_BYTES,
                **({"#state": C.ATTR_STATE} if "#state" in " ".join(sets) else {}),
            },
            "ExpressionAttributeValues": values,
        }
        checkpoint_update = self.leases.checkpoint_update(lease, checkpoint, release=True)
        try:
            self.clients.dynamodb.transact_write_items(
                TransactItems=[{"Update": head_update}, {"Update": checkpoint_update}]
            )
        except ClientError as exc:
            if aws_error_code(exc) != "TransactionCanceledException":
                raise
            reasons = [r.get("Code") for r in exc.response.get("CancellationReasons", [])]
            if len(reasons) > 1 and reasons[1] == "ConditionalCheckFailed":
                raise LeaseLostError(
                    C.INGEST_GROUP, partition.partition_id, "commit fenced by leaseCounter"
                ) from exc
            if reasons and reasons[0] == "ConditionalCheckFailed":
                raise CommitConflictError(
                    f"partition {partition.partition_id} head moved from {head} under the commit",
                    aws_error_code="TransactionCanceledException",
                ) from exc
            raise ShardlogError(
                f"commit of {partition.partition_id} cancelled: {reasons}",
                aws_error_code="TransactionCanceledException",
            ) from exc


def _after(records: Sequence[IncomingRecord], checkpoint: str | None) -> list[IncomingRecord]:
    """The records strictly after a Kinesis checkpoint (compared as integers)."""
    floor = kinesis_seq_int(checkpoint)
    return [r for r in records if kinesis_seq_int(r.kinesis_sequence_number) > floor]


def _check_ordered(partition_id: str, records: Sequence[IncomingRecord]) -> None:
    previous = -1
    for record in records:
        current = kinesis_seq_int(record.kinesis_sequence_number)
        if current <= previous:
            raise ValueError(
                f"batch for {partition_id} is not in Kinesis order at {current} (after {previous})"
            )
        previous = current
