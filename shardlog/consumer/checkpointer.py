"""Checkpoints of one partition for one worker, fenced on ``leaseCounter``.

KCL's meaning: ``checkpoint(seq)`` says "every record up to and including seq is
processed". The consumers table stores the *next* log seq to read (seq + 1), plus
``checkpointSubSequenceNumber`` when that next record sits inside a segment rather
than at its start (so ``checkpoint - subseq`` is the key of the segment to fetch).
At the end of a finished partition, ``checkpoint()`` writes SHARD_END.

Every write goes through ``LeaseHolder``: one at a time per lease, always with the
latest counter (renewals and checkpoints both increment it), so a renewal on the
worker's thread never makes the processor's checkpoint look fenced.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from botocore.exceptions import ClientError

from shardlog import constants as C
from shardlog.consumer.exceptions import (
    CheckpointError,
    CheckpointLeaseLostError,
    CheckpointRangeError,
    CheckpointStateError,
)
from shardlog.exceptions import LeaseLostError, aws_error_code, is_throttling
from shardlog.format import LogRecord
from shardlog.lease import LeaseManager
from shardlog.tables import Lease

logger = logging.getLogger("shardlog.consumer")


class LeaseHolder:
    """The worker's copy of one lease; renew, checkpoint, release and hand-over are
    serialized here.

    Every write returns the item, so the owner sees a handoff request (another worker's
    ``leaseTransferRequestedBy``) at its next renewal or checkpoint; the worker's listing
    reports one too (``note_transfer_request``). ``requested_by()`` is the requester to hand
    the lease to, while its request is younger than ``handoff_timeout_ms`` (after that the
    requester falls back to stealing, and handing it over would only race with it).
    """

    def __init__(self, manager: LeaseManager, lease: Lease, handoff_timeout_ms: int = 0) -> None:
        self.manager = manager
        self._lease = lease
        self._lock = threading.Lock()
        self.lost = False
        self.released = False
        self.handoff_timeout_ms = handoff_timeout_ms or manager.lease_duration_ms // 2
        self._noted: tuple[str, int] | None = None  # a request the listing showed

    @property
    def lease(self) -> Lease:
        with self._lock:
            return self._lease

    def renew_if_due(self, now_ms: int, renew_interval_ms: int) -> bool:
        """Renew when renew_interval_ms passed since the last write; False once lost."""
        with self._lock:
            if self.lost or self.released:
                return not self.lost
            last_write = self._lease.expires_at_ms - self.manager.lease_duration_ms
            if now_ms - last_write < renew_interval_ms:
                return True
            try:
                self._wrote(self.manager.renew(self._lease))
            except LeaseLostError as exc:
                self.lost = True
                logger.warning("lease lost: %s", exc)
                return False
            return True

    def note_transfer_request(self, listed: Lease) -> None:
        """The listing shows a handoff request on this lease (the copy may not, yet)."""
        with self._lock:
            by, at = listed.transfer_requested_by, listed.transfer_requested_at_ms
            if listed.owner == self._lease.owner and by is not None and at is not None:
                self._noted = (by, at)

    def requested_by(self) -> str | None:
        """The worker to hand this lease to, if a fresh request by another worker stands."""
        with self._lock:
            if self.lost or self.released:
                return None
            by, at = self._lease.transfer_requested_by, self._lease.transfer_requested_at_ms
            if (by is None or at is None) and self._noted is not None:
                by, at = self._noted
            if by is None or at is None or by == self._lease.owner:
                return None
            age_ms = self.manager.clock.now_ms() - at
            return by if age_ms < self.handoff_timeout_ms else None

    def hand_over(self, to_owner: str) -> str:
        """Transfer the lease to ``to_owner`` (fenced); if its request was withdrawn meanwhile,
        release it instead. Returns what happened, for the log."""
        with self._lock:
            if self.lost or self.released:
                return "the lease was already lost"
            try:
                handed = self.manager.transfer(self._lease, to_owner)
                if handed is None:
                    self._wrote(self.manager.release(self._lease))
                    self.released = True
                    return f"released ({to_owner} withdrew its request)"
            except LeaseLostError:
                self.lost = True
                return "the lease was already lost"
            self._wrote(handed)
            self.released = True
            return f"handed over to {to_owner}"

    def _wrote(self, lease: Lease) -> None:
        self._lease = lease
        self._noted = None  # the write returned the item: its request (or none) is current

    def mark_lost(self, reason: str) -> None:
        with self._lock:
            if not self.lost and not self.released:
                self.lost = True
                logger.warning(
                    "lease lost: %s/%s: %s",
                    self._lease.group,
                    self._lease.partition_id,
                    reason,
                )

    def checkpoint(self, value: str, subseq: int | None) -> Lease:
        with self._lock:
            if self.lost or self.released:
                raise CheckpointLeaseLostError(
                    self._lease.group, self._lease.partition_id, "the lease is no longer held"
                )
            try:
                self._wrote(self.manager.checkpoint(self._lease, value, subseq))
            except LeaseLostError as exc:
                self.lost = True
                raise CheckpointLeaseLostError(
                    self._lease.group, self._lease.partition_id, "fenced by leaseCounter"
                ) from exc
            return self._lease

    def release(self) -> bool:
        """Hand the lease back for immediate takeover; False when it was already lost."""
        with self._lock:
            if self.lost or self.released:
                return False
            try:
                self._wrote(self.manager.release(self._lease))
            except LeaseLostError:
                self.lost = True
                return False
            self.released = True
            return True


class Checkpointer:
    """Given to the processor with each batch, at shard end and at shutdown."""

    def __init__(
        self,
        holder: LeaseHolder,
        start_seq: int,
        segment_offset: Callable[[int], int | None] = lambda _seq: None,
    ) -> None:
        self._holder = holder
        self._segment_offset = segment_offset
        self.checkpointed_next = start_seq  # next seq per the stored checkpoint
        self.largest_delivered = start_seq - 1  # seq of the last record delivered
        self.shard_end_permitted = False
        self.at_shard_end = False
        self.enabled = True
        # How far the last batch is behind the committed head, in ms (KCL's millisBehindLatest):
        # 0 when it reached the head, else now minus the arrival time of its last record.
        self.millis_behind_latest = 0

    @property
    def group(self) -> str:
        return self._holder.lease.group

    @property
    def partition_id(self) -> str:
        return self._holder.lease.partition_id

    def checkpoint(
        self, record: LogRecord | int | str | None = None, sub_sequence_number: int | None = None
    ) -> None:
        """Mark every record up to and including ``record`` (a LogRecord or its seq) processed.

        Without an argument: everything delivered so far, or SHARD_END inside
        ``shard_ended``. Raises CheckpointRangeError for a seq before the last checkpoint
        or after the last record delivered, CheckpointLeaseLostError when the lease was
        lost (stop processing the partition), CheckpointStateError when checkpointing is
        not allowed here (after lease_lost).
        """
        if not self.enabled:
            raise CheckpointStateError(
                f"{self.partition_id}: checkpointing is not allowed here (lease lost or "
                "processor shut down)"
            )
        if sub_sequence_number is not None and sub_sequence_number < 0:
            raise CheckpointRangeError(
                f"sub-sequence number must be >= 0, got {sub_sequence_number}"
            )
        if record is None:
            if self.shard_end_permitted:
                self._write_shard_end()
                return
            seq = self.largest_delivered
        elif isinstance(record, LogRecord):
            seq = record.seq
        elif isinstance(record, str) and record == C.SHARD_END:
            if not self.shard_end_permitted:
                raise CheckpointRangeError(
                    f"{self.partition_id}: SHARD_END may only be checkpointed at the end of an "
                    "ENDED partition"
                )
            self._write_shard_end()
            return
        else:
            seq = _as_seq(record)
        low, high = self.checkpointed_next - 1, self.largest_delivered
        if not low <= seq <= high:
            raise CheckpointRangeError(
                f"{self.partition_id}: cannot checkpoint seq {seq}: it must lie between the last "
                f"checkpoint ({low}) and the last record delivered ({high})"
            )
        if self.shard_end_permitted and seq == high:
            self._write_shard_end()  # the partition's last record: that is its end (as KCL)
            return
        if seq + 1 == self.checkpointed_next:
            return  # already checkpointed: no write, as KCL
        self._write(str(seq + 1), self._segment_offset(seq + 1))
        self.checkpointed_next = seq + 1

    def _write_shard_end(self) -> None:
        if self.at_shard_end:
            return
        self._write(C.SHARD_END, None)
        self.at_shard_end = True

    def _write(self, value: str, subseq: int | None) -> None:
        try:
            self._holder.checkpoint(value, subseq)
        except ClientError as exc:
            error = CheckpointError(
                f"{self.partition_id}: checkpoint {value} failed: {exc}",
                aws_error_code=aws_error_code(exc),
            )
            if is_throttling(exc):
                error.kcl_error = "ThrottlingException"
            raise error from exc


def _as_seq(value: int | str) -> int:
    if isinstance(value, bool):
        raise CheckpointRangeError(f"not a log seq: {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.isascii() and value.isdigit():
        return int(value)
    raise CheckpointRangeError(f"not a log seq (a decimal string): {value!r}")
