"""Delivery of a Lambda consumer group's partition while the runner holds its lease: the
position, the batches, and what a failure does (steps 3 and 4 of shardlog/lambda_consumer/
runner.py, whose docstring states the whole protocol).

This module owns every delivery decision: the batch (``batch_size``, the batching window,
``filter_criteria``, ``maximum_record_age_s``), the invocation and its answer (partial
batch responses), the retry policy (bisect, attempts, backoff,
``maximum_retry_attempts``), the give-up and its on-failure record, and when to stop
before the runner's timeout. Batching changes (parallel lanes, filters, tumbling windows)
belong here.

It does not own the lease protocol (the runner takes, releases and re-checks) nor a
request: every write is fenced on the lease and made by the data-access layer
(``LambdaProgress`` in shardlog/dal/consumers.py: checkpoint, retry state, give-up; the
lease's own SHARD_END checkpoint in shardlog/lease.py). A refused write raises
LeaseLostError, which stops the session at once.

Order (why it is safe): the retry state is written before each retry, so a restart
resumes it; a give-up is written before its on-failure record is sent, so a runner that
lost its lease is refused before it sends anything, and a give-up found pending is sent
(uninvoked) by the next runner; the checkpoint passes a record only once it was delivered,
given up on, or filtered out (shardlog/lambda_consumer/filters.py: the filters apply to
each batch the feed returns; a batch none of whose records is kept invokes nothing and is
checkpointed past, one fenced write, as a delivered batch).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from shardlog import constants as C
from shardlog.dal.consumers import PendingFailure, RetryState
from shardlog.format import LogRecord
from shardlog.lambda_consumer.destinations import (
    RECORD_AGE_EXCEEDED,
    RETRIES_EXHAUSTED,
    FailedBatch,
)
from shardlog.lambda_consumer.events import Answer, interpret, kinesis_event
from shardlog.lambda_consumer.feed import FedRecord, LogFeed
from shardlog.lambda_consumer.filters import BatchFilter
from shardlog.lambda_consumer.report import Outcome, RunReport
from shardlog.tables import Lease, PartitionInfo

if TYPE_CHECKING:
    from shardlog.lambda_consumer.runner import Runner

logger = logging.getLogger("shardlog.lambda_consumer")

# Time kept free before the runner's own timeout, beyond one invocation of the function.
STOP_MARGIN_MS = 5_000


class Session:
    """The runner's work while it holds the lease (steps 3 and 4, and the SHARD_END
    checkpoint of step 5)."""

    def __init__(
        self, runner: Runner, lease: Lease, report: RunReport, remaining_ms: Callable[[], int]
    ) -> None:
        self.runner = runner
        self.consumer = runner.consumer
        self.clock = runner.clock
        self.lease = lease
        self.report = report
        self.remaining_ms = remaining_ms
        self.partition_id = lease.partition_id
        self.feed: LogFeed
        self.retry: RetryState | None = None
        self.pending: PendingFailure | None = None
        self.shard_end = False
        self.progress = runner.progress
        self.filter = BatchFilter(self.consumer.criteria())

    # --- 3. position ---------------------------------------------------------------------
    def start(self, partition: PartitionInfo) -> None:
        checkpoint = self.lease.checkpoint
        if checkpoint == C.SHARD_END:
            self.shard_end = True
            position = partition.next_seq
        elif checkpoint is not None:
            position = int(checkpoint)
        else:  # not in the group's creation positions: it appeared later, read it all
            position = 0
        self.feed = LogFeed(
            self.runner.reader.store, self.runner.tables, self.partition_id, position
        )
        if checkpoint is None:  # durable before anything is invoked: a takeover starts here too
            self._checkpoint(position, clear_retry=False)
        elif not self.shard_end:
            self.retry, self.pending = self.progress.read(self.runner.group, self.partition_id)

    # --- 4. batches ----------------------------------------------------------------------
    def deliver(self) -> None:
        try:
            self._deliver()
        except _Stop:
            self.report.outcome = Outcome.STOPPED

    def _deliver(self) -> None:
        if self.pending is not None:  # a previous runner gave up and may not have sent it
            self._send_pending(self.pending)
        while not self.shard_end:
            if self.remaining_ms() < self.consumer.function_timeout_ms + STOP_MARGIN_MS:
                self.report.outcome = Outcome.STOPPED
                return
            batch = self._next_batch()
            if batch is None:
                return  # caught up, waiting on the window past the deadline, or finished
            end = batch[-1].seq + 1
            batch = self._drop_expired(self._kept(batch))
            if batch:
                self._invoke(batch, end)
            elif self.feed.position < end:  # all filtered out (or given up): move past them
                self._advance(end)

    def _next_batch(self) -> list[LogRecord] | None:
        if self.retry is not None:
            self.feed.seek(self.retry.start)
            fed = self.feed.peek(min(self.retry.size, self.retry.end - self.retry.start))
            return [f.record for f in fed]
        while True:
            fed = self.feed.peek(self.consumer.batch_size)
            if not fed:
                if self.feed.at_end:
                    self._finish_shard()
                self.report.outcome = Outcome.FINISHED if self.shard_end else Outcome.CAUGHT_UP
                return None
            if len(fed) >= self.consumer.batch_size or self.feed.ended:
                return [f.record for f in fed]
            wait_ms = self._window_left(fed)
            if wait_ms <= 0:
                return [f.record for f in fed]
            if self.remaining_ms() - wait_ms < self.consumer.function_timeout_ms + STOP_MARGIN_MS:
                self.report.outcome = Outcome.STOPPED
                return None
            self.clock.sleep(min(wait_ms, 1_000) / 1000)  # then look for more commits

    def _window_left(self, fed: Sequence[FedRecord]) -> int:
        window = self.consumer.batching_window_ms
        return 0 if window == 0 else fed[0].committed_at_ms + window - self.clock.now_ms()

    def _kept(self, batch: list[LogRecord]) -> list[LogRecord]:
        """The records the group's filters keep (all of them without filters)."""
        kept = self.filter.keep(batch)
        self.report.filtered_out = self.filter.filtered_out
        return kept

    def _drop_expired(self, batch: list[LogRecord]) -> list[LogRecord]:
        """Records past the maximum record age go to the destination, uninvoked."""
        max_age_s = self.consumer.maximum_record_age_s
        if max_age_s < 0:
            return batch
        oldest_allowed = self.clock.now_ms() - max_age_s * 1000
        expired = [r for r in batch if r.arrival_ms < oldest_allowed]
        if not expired:
            return batch
        expired = batch[: batch.index(expired[-1]) + 1]  # a prefix: arrival never decreases
        self._give_up(expired, RECORD_AGE_EXCEEDED, attempts=0, function_error=None)
        return batch[len(expired) :]

    def _invoke(self, batch: list[LogRecord], end: int) -> None:
        """Invoke the function with ``batch``: the kept records of the fed ones before
        ``end``; a success checkpoints at ``end``, past the filtered-out ones too."""
        runner = self.runner
        event = kinesis_event(
            batch,
            event_source_arn=runner.settings.event_source_arn,
            region=runner.settings.region,
            invoke_identity_arn=f"shardlog:lambda-consumer:{self.runner.group}",
        )
        self.report.invocations += 1
        result = runner.invoker.invoke(event, self.consumer.function_timeout_ms)
        answer = interpret(
            result, batch, partial_responses=self.consumer.report_batch_item_failures
        )
        if answer.ok:
            self.report.delivered += len(batch)
            self._advance(end)
            return
        self.report.failed_invocations += 1
        self._failed(batch, answer, result.function_error)

    def _failed(self, batch: list[LogRecord], answer: Answer, function_error: str | None) -> None:
        assert answer.failed_from is not None
        logger.warning(
            "%s/%s: batch [%d, %d] failed: %s",
            self.runner.group,
            self.partition_id,
            batch[0].seq,
            batch[-1].seq,
            answer.reason,
        )
        done, rest = batch[: answer.failed_from], batch[answer.failed_from :]
        self.report.delivered += len(done)
        previous = self.retry or RetryState(batch[0].seq, batch[-1].seq + 1, len(batch), 0)
        split = (
            answer.failed_from == 0
            and self.consumer.bisect_batch_on_function_error
            and len(rest) > 1
        )
        if split:  # a split counts no attempt (Lambda's rule)
            state = RetryState(rest[0].seq, previous.end, len(rest) // 2, previous.attempts)
        else:
            state = RetryState(rest[0].seq, previous.end, len(rest), previous.attempts + 1)
        limit = self.consumer.maximum_retry_attempts
        if limit >= 0 and state.attempts > limit:
            self.retry = state
            self._give_up(
                rest, RETRIES_EXHAUSTED, attempts=state.attempts, function_error=function_error
            )
            return
        self._write_retry(state, checkpoint=rest[0].seq if done else None)
        self._backoff(state.attempts)

    def _backoff(self, attempts: int) -> None:
        if attempts == 0:
            return
        delay_ms = min(
            self.consumer.retry_max_delay_ms,
            self.consumer.retry_base_delay_ms * 2 ** (attempts - 1),
        )
        if self.remaining_ms() - delay_ms < self.consumer.function_timeout_ms + STOP_MARGIN_MS:
            raise _Stop  # the retry state is saved: the next run resumes it
        self.clock.sleep(delay_ms / 1000)

    def _give_up(
        self, records: list[LogRecord], condition: str, *, attempts: int, function_error: str | None
    ) -> None:
        """Fenced first, then the destination: a runner that lost its lease (a zombie) is
        refused before it sends anything, and a give-up once recorded is sent by whichever
        runner holds the lease (at least once: a crash after sending sends it again)."""
        pending = PendingFailure(
            records[0].seq, records[-1].seq + 1, condition, attempts, function_error
        )
        self._record_give_up(pending)
        self._send_pending(pending, records)

    def _record_give_up(self, pending: PendingFailure) -> None:
        self._holding(self.progress.record_give_up(self.lease, pending))
        self.pending = pending

    def _send_pending(
        self, pending: PendingFailure, records: list[LogRecord] | None = None
    ) -> None:
        runner = self.runner
        if records is None:  # its records once more, without those filtered out
            self.feed.seek(pending.start)
            fed = [f.record for f in self.feed.peek(pending.end - pending.start)]
            records = self._kept(fed) or fed  # none kept: the filters changed since; send all
        if runner.destination is not None:
            runner.destination.send(
                FailedBatch(
                    runner.group,
                    self.partition_id,
                    records,
                    pending.condition,
                    pending.attempts,
                    pending.function_error,
                    runner.function_arn,
                ),
                self.clock.now_ms(),
            )
        logger.error(
            "%s/%s: gave up on seqs [%d, %d] (%s after %d attempts)%s; moving on",
            runner.group,
            self.partition_id,
            pending.start,
            pending.end - 1,
            pending.condition,
            pending.attempts,
            "" if runner.destination else " with no on-failure destination",
        )
        self.report.sent_to_destination += len(records)
        self._advance(pending.end)

    def _advance(self, next_seq: int) -> None:
        """Everything before ``next_seq`` is done: checkpoint it, and go on retrying the
        rest of a failed batch (a fresh sub-batch, no attempt yet) or batch normally."""
        retry = self.retry
        if retry is not None and next_seq < retry.end:
            self._write_retry(RetryState(next_seq, retry.end, retry.size, 0), checkpoint=next_seq)
        else:
            self._checkpoint(next_seq, clear_retry=True)

    # --- fenced writes (shardlog/dal/consumers.py) ------------------------------------
    def _checkpoint(self, next_seq: int, *, clear_retry: bool) -> None:
        self._holding(self.progress.checkpoint(self.lease, str(next_seq), clear_retry=clear_retry))
        self.pending = None
        if clear_retry:
            self.retry = None
        self.feed.seek(next_seq)

    def _write_retry(self, retry: RetryState, *, checkpoint: int | None) -> None:
        self._holding(self.progress.record_retry_state(self.lease, retry, checkpoint=checkpoint))
        self.retry, self.pending = retry, None
        if checkpoint is not None:
            self.feed.seek(checkpoint)

    def _holding(self, lease: Lease) -> None:
        self.lease = lease
        self.report.checkpoint = lease.checkpoint

    # --- 5. end --------------------------------------------------------------------------
    def _finish_shard(self) -> None:
        self._holding(self.runner.leases.checkpoint(self.lease, C.SHARD_END))
        self.shard_end = True
        logger.info("%s/%s: SHARD_END; waking its children", self.runner.group, self.partition_id)


class _Stop(Exception):
    """Stop delivering (the retry state is saved); handled by ``deliver``'s caller."""
