"""One partition held by one worker: its lease, cursor, checkpointer and processor.

``step()`` advances it by one unit of work (initialize, one batch, the shard end, a
lease loss or a handoff) and runs on the worker's pool, one step at a time per
partition; the worker's own thread only renews the lease through the shared
``LeaseHolder``.

A handoff (the worker stops, or another worker asked for the lease) happens between
two steps, so the batch in flight is finished first; then the processor's
``shutdown_requested`` checkpoints, and the lease goes, in one fenced write, to the
worker that asked for it, or is released for anyone to take. Either way the next owner
starts at that checkpoint and delivers nothing twice.
"""

from __future__ import annotations

import enum
import logging
from dataclasses import dataclass

from shardlog.clock import Clock
from shardlog.consumer.checkpointer import Checkpointer, LeaseHolder
from shardlog.consumer.cursor import PartitionCursor
from shardlog.consumer.exceptions import CheckpointLeaseLostError, ProcessorFailedError
from shardlog.consumer.processor import PartitionProcessor
from shardlog.consumer.settings import ConsumerSettings
from shardlog.exceptions import LeaseLostError
from shardlog.reader import LogReader

logger = logging.getLogger("shardlog.consumer")


class State(enum.Enum):
    NEW = "new"
    PROCESSING = "processing"
    SHARD_ENDING = "shard ending"
    DONE = "done"


class Outcome(enum.Enum):
    RUNNING = "running"
    FINISHED = "finished"  # checkpointed SHARD_END and released
    LOST = "lost"  # another worker took the lease
    FAILED = "failed"  # the processor died: lease released, retake after a backoff
    HANDED_OFF = "handed off"  # checkpointed, then handed to a requester or released


@dataclass
class StepResult:
    delivered: int = 0
    outcome: Outcome = Outcome.RUNNING


class PartitionConsumer:
    def __init__(
        self,
        worker_id: str,
        holder: LeaseHolder,
        processor: PartitionProcessor,
        reader: LogReader,
        start_seq: int,
        settings: ConsumerSettings,
        clock: Clock,
    ) -> None:
        self.worker_id = worker_id
        self.holder = holder
        self.partition_id = holder.lease.partition_id
        self.group = holder.lease.group
        self.processor = processor
        self.reader = reader
        self.settings = settings
        self.clock = clock
        self.cursor = PartitionCursor(reader, self.partition_id, start_seq)
        self.checkpointer = Checkpointer(
            holder, start_seq, lambda seq: self.cursor.segment_offset(seq)
        )
        self.start_seq = start_seq
        self._batch_start = start_seq
        self.state = State.NEW
        self.outcome = Outcome.RUNNING
        self.next_poll_ms = 0
        self.shutdown_requested = False
        self.delivered = 0
        self._delivered_at_ms: int | None = None  # when records were last delivered

    def __repr__(self) -> str:
        return f"{self.group}/{self.partition_id}"

    def ready(self, now_ms: int) -> bool:
        return self.state is not State.DONE and (
            now_ms >= self.next_poll_ms
            or self.holder.lost
            or self.shutdown_requested
            or self.holder.requested_by() is not None
        )

    def step(self) -> StepResult:
        if self.state is State.DONE:
            return StepResult(0, self.outcome)
        try:
            if self.holder.lost:
                return self._lost()
            requester = self.holder.requested_by()
            if self.shutdown_requested or requester is not None:
                return self._hand_off(requester)
            if self.state is State.NEW:
                self.processor.initialize(self.partition_id, self.start_seq)
                self.state = State.PROCESSING
            if self.state is State.PROCESSING:
                delivered = self._deliver()
                if delivered or self.state is not State.SHARD_ENDING:
                    return StepResult(delivered)
            return self._shard_end()
        except (CheckpointLeaseLostError, LeaseLostError):
            self.holder.lost = True
            return self._lost()
        except ProcessorFailedError as exc:
            return self._failed(exc)
        except Exception:
            logger.exception(
                "%s: the processor of %s/%s raised; the batch will be delivered again",
                self.worker_id,
                self.group,
                self.partition_id,
            )
            if self.state is State.PROCESSING:
                self._rewind()
            self._idle()
            return StepResult(0)

    # --- the units of work -------------------------------------------------------------
    def _deliver(self) -> int:
        try:
            records = self.cursor.next_batch(self.settings.records_per_call)
        except Exception:  # AWS errors, and a corrupt log: loud, retried, never skipped
            logger.exception(
                "%s: reading %s/%s at seq %d failed; retrying",
                self.worker_id,
                self.group,
                self.partition_id,
                self.cursor.position,
            )
            self._idle()
            return 0
        if not records:
            if self.cursor.ended and self.cursor.caught_up:
                self.state = State.SHARD_ENDING
            else:  # caught up: poll again sooner while the partition is busy
                now = self.clock.now_ms()
                since = None if self._delivered_at_ms is None else now - self._delivered_at_ms
                self.next_poll_ms = now + self.settings.poll_interval_ms(since)
            return 0
        self.checkpointer.largest_delivered = records[-1].seq
        self.checkpointer.millis_behind_latest = (
            0 if self.cursor.caught_up else max(0, self.clock.now_ms() - records[-1].arrival_ms)
        )
        self._batch_start = records[0].seq
        self.processor.process_records(records, self.checkpointer)
        self.delivered += len(records)
        self._delivered_at_ms = self.clock.now_ms()
        return len(records)

    def _shard_end(self) -> StepResult:
        self.checkpointer.shard_end_permitted = True
        self.processor.shard_ended(self.checkpointer)
        if not self.checkpointer.at_shard_end:
            logger.error(
                "%s: the processor of %s/%s did not checkpoint SHARD_END in shard_ended; "
                "the partition's children stay blocked; retrying",
                self.worker_id,
                self.group,
                self.partition_id,
            )
            self._idle()
            return StepResult(0)
        self.holder.release()
        logger.info(
            "%s: %s/%s finished (SHARD_END); its children may start",
            self.worker_id,
            self.group,
            self.partition_id,
        )
        return self._done(Outcome.FINISHED)

    def _lost(self) -> StepResult:
        self.checkpointer.enabled = False
        logger.warning(
            "%s: lost the lease on %s/%s; another worker resumes from its checkpoint",
            self.worker_id,
            self.group,
            self.partition_id,
        )
        if self.state is not State.NEW:
            try:
                self.processor.lease_lost()
            except Exception:
                logger.exception("%s: lease_lost of %s raised", self.worker_id, self.partition_id)
        return self._done(Outcome.LOST)

    def _hand_off(self, requester: str | None) -> StepResult:
        """Checkpoint (the processor's shutdown_requested), then hand the lease to the
        requester (a request that came meanwhile counts too) or release it."""
        if self.state is not State.NEW:
            try:
                self.processor.shutdown_requested(self.checkpointer)
            except (CheckpointLeaseLostError, LeaseLostError, ProcessorFailedError):
                raise
            except Exception:
                logger.exception(
                    "%s: shutdown_requested of %s raised; releasing the lease at the last "
                    "checkpoint",
                    self.worker_id,
                    self.partition_id,
                )
        requester = requester or self.holder.requested_by()
        if requester is not None and not self.checkpointer.at_shard_end:
            how = self.holder.hand_over(requester)
        else:
            how = "released" if self.holder.release() else "the lease was already lost"
        self.checkpointer.enabled = False
        if self.state is not State.NEW:
            try:
                self.processor.lease_lost()  # as KCL: a requested shutdown ends with leaseLost
            except Exception:
                logger.exception("%s: lease_lost of %s raised", self.worker_id, self.partition_id)
        logger.info(
            "%s: handed off %s/%s at checkpoint %s (%s)",
            self.worker_id,
            self.group,
            self.partition_id,
            self.holder.lease.checkpoint,
            how,
        )
        return self._done(Outcome.HANDED_OFF)

    def _failed(self, exc: ProcessorFailedError) -> StepResult:
        released = self.holder.release()
        self.checkpointer.enabled = False
        logger.error(
            "%s: the processor of %s/%s failed: %s; lease %s; the partition restarts with a "
            "new processor after a backoff",
            self.worker_id,
            self.group,
            self.partition_id,
            exc,
            "released" if released else "already lost",
        )
        return self._done(Outcome.FAILED)

    def _done(self, outcome: Outcome) -> StepResult:
        self.state = State.DONE
        self.outcome = outcome
        try:
            self.processor.close()
        except Exception:
            logger.exception(
                "%s: closing the processor of %s raised", self.worker_id, self.partition_id
            )
        self.cursor.close()
        return StepResult(0, outcome)

    # --- helpers -----------------------------------------------------------------------
    def _idle(self) -> None:
        self.next_poll_ms = self.clock.now_ms() + self.settings.idle_poll_interval_ms

    def _rewind(self) -> None:
        """Deliver the failed batch again, from what the processor has not checkpointed."""
        start = max(self._batch_start, self.checkpointer.checkpointed_next)
        self.cursor.close()
        self.cursor = PartitionCursor(self.reader, self.partition_id, start)
        self.checkpointer.largest_delivered = start - 1
