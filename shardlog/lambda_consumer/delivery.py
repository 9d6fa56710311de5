"""Delivery of a Lambda consumer group's partition while the runner holds its lease: the
position, the lanes, the batches, and what a failure does (steps 3 and 4 of
shardlog/lambda_consumer/runner.py, whose docstring states the whole protocol).

This module owns every delivery decision: the batch (``batch_size``, the batching window,
``filter_criteria``, ``maximum_record_age_s``), the lanes (``parallelization_factor``:
which batches may be in flight at once, shardlog/lambda_consumer/lanes.py), the
invocation and its answer (partial batch responses), the retry policy (bisect, attempts,
backoff, ``maximum_retry_attempts``), the give-up and its on-failure record, and when to
stop before the runner's timeout. Batching changes (tumbling windows) belong here.

It does not own the lease protocol (the runner takes, releases and re-checks) nor a
request: every write is fenced on the lease and made by the data-access layer
(``LambdaProgress`` in shardlog/dal/consumers.py: the checkpoint with every lane's retry
state and pending give-up; the lease's own SHARD_END checkpoint in shardlog/lease.py). A
refused write raises LeaseLostError, which stops the session at once.

One thread decides and writes: the session's. Invocations run in up to
``parallelization_factor`` threads (``InFlight``; at factor 1 in the session's thread),
and their answers come back to the session, which handles them one at a time.

Order (why it is safe): each lane invokes its records in log order, one batch at a time;
the checkpoint is the lowest seq not done over the lanes, written (with the lanes'
progress) after each answer, so it passes a record only once it was delivered or given
up on or filtered out (shardlog/lambda_consumer/filters.py: a record the group's filters
do not keep enters no lane, so the checkpoint passes it with the records around it; when
nothing taken was kept, one fenced checkpoint write moves past them, invoking nothing); a
lane's retry state is written before its retry, so a restart resumes it; a
give-up is written before its on-failure record is sent, so a runner that lost its lease
is refused before it sends anything, and a give-up found pending is sent (uninvoked) by
the next runner.

Tumbling windows (``tumbling_window_s``, shardlog/lambda_consumer/windows.py; factor 1
only): a batch holds records of one window and is invoked with the window's state; the
state each success returns is written in the same fenced write as the checkpoint past its
batch (``WindowState`` in ``LaneProgress``), so a restart resumes the state that goes with
its checkpoint, never one from an invocation whose checkpoint was not written, and a runner
that lost its lease writes neither. A failed batch is retried with the state it had. When
the window is over, the final invocation (no records, ``isFinalInvokeForWindow``) is
retried until it succeeds, then the checkpoint is written with the state dropped. A
returned state past the limit is not stored: the final invocation gets it with
``isWindowTerminatedEarly``, and only after it succeeded does the checkpoint pass the batch
(with an empty state, same window), so a crash in between invokes that batch again with
the state before it.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from shardlog import constants as C
from shardlog.dal.consumers import LaneProgress, PendingFailure, RetryState, WindowState
from shardlog.format import LogRecord
from shardlog.lambda_consumer.destinations import (
    RECORD_AGE_EXCEEDED,
    RETRIES_EXHAUSTED,
    FailedBatch,
)
from shardlog.lambda_consumer.events import (
    Answer,
    InvokeResult,
    interpret,
    kinesis_event,
    window_state,
    with_window,
)
from shardlog.lambda_consumer.feed import FedRecord, LogFeed
from shardlog.lambda_consumer.filters import BatchFilter
from shardlog.lambda_consumer.invoke import InFlight
from shardlog.lambda_consumer.lanes import Lane, Lanes
from shardlog.lambda_consumer.report import Outcome, RunReport
from shardlog.lambda_consumer.windows import (
    Window,
    closed_by_clock,
    encode_state,
    keepable,
    window_of,
)
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
        self.lanes: Lanes
        self.in_flight: InFlight
        self.shard_end = False
        self.progress = runner.progress
        self.filter = BatchFilter(self.consumer.criteria())
        self._saved: tuple[str | None, LaneProgress] | None = None  # as last written
        self._saved_at_ms = 0
        self.window: WindowState | None = None  # the open tumbling window, as last written
        # A batch whose returned state is past the limit: held (not done) until the window's
        # early final invocation succeeds.
        self._early: tuple[list[LogRecord], bytes] | None = None
        self._final_attempts = 0

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
        trimmed = max(0, partition.trim_horizon - position) if not self.shard_end else 0
        if trimmed:  # retention expired them unread (it did not hold for groups): restart
            logger.warning(
                "%s/%s: checkpoint %d is below the trim horizon %d; %d records expired "
                "unread, continuing at the horizon",
                self.runner.group,
                self.partition_id,
                position,
                partition.trim_horizon,
                trimmed,
            )
            self.report.trimmed_unread += trimmed
            position, checkpoint = partition.trim_horizon, None  # progress below it is void
        self.feed = LogFeed(
            self.runner.reader.store,
            self.runner.tables,
            self.partition_id,
            position,
            known=partition,  # read by the runner a moment ago: the first batches need no other
        )
        progress: LaneProgress | None = None
        if checkpoint is not None and not self.shard_end:
            progress = self.progress.of(self.lease)  # as the take wrote the item
        factor = self.consumer.parallelization_factor
        self.lanes = Lanes(factor, self.consumer.batch_size, position, progress)
        self.window = progress.window if progress is not None else None
        self.saved_at = position  # the checkpoint last written
        if self.lanes.dropped:
            logger.warning(
                "%s/%s: retries and give-ups recorded at another parallelization factor are "
                "dropped; their records are delivered again from checkpoint %d",
                self.runner.group,
                self.partition_id,
                position,
            )
        if checkpoint is None:  # durable before anything is invoked: a takeover starts here too
            self._save(checkpoint=True)

    @property
    def position(self) -> int:
        """The checkpoint as it stands: the lowest seq not done."""
        return self.lanes.checkpoint()

    @property
    def retrying(self) -> bool:
        """A batch is being retried, or a give-up waits to be sent."""
        return self.lanes.retrying

    def oldest_undelivered(self) -> LogRecord | None:
        """The record at the checkpoint (read when it is not held), None when there is none."""
        held = self.lanes.oldest()
        if held is not None:
            return held
        fed = self.feed.peek(1, refresh=False) or self.feed.peek(1)
        return fed[0].record if fed else None

    # --- 4. batches ----------------------------------------------------------------------
    def deliver(self) -> None:
        with InFlight(self.runner.invoker, self.lanes.factor) as in_flight:
            self.in_flight = in_flight
            self._deliver()

    def _deliver(self) -> None:
        """Until caught up, finished, or out of time: take records into the lanes, start
        what each idle lane can, handle the answers; wait when nothing can start."""
        while not self.shard_end:
            self._answers(wait_s=0)
            if self.remaining_ms() < self.consumer.function_timeout_ms + STOP_MARGIN_MS:
                if self.in_flight:  # none starts now; those in flight land first
                    self._answers(wait_s=None)
                    continue
                self.report.outcome = Outcome.STOPPED
                return
            self._take()
            waits = [w for lane in self.lanes if (w := self._step(lane)) is not None]
            if self.in_flight:
                self._answers(wait_s=min([*waits, 1_000]) / 1000 if waits else None)
            elif waits and min(waits) > 0:
                if not self._wait(min(waits)):
                    return
            elif not waits:
                if self.lanes.empty and self.feed.at_end:
                    self._finish_shard()
                elif self.lanes.checkpoint() > self.saved_at:
                    self._save(checkpoint=True)  # past records all filtered out
                self.report.outcome = Outcome.FINISHED if self.shard_end else Outcome.CAUGHT_UP
                return

    def _wait(self, wait_ms: int) -> bool:
        """Nothing can start for ``wait_ms`` (a batching window, a backoff): wait, unless the
        wait would leave too little time for one more invocation (then stop: the retry
        state is saved, the next run resumes it)."""
        if self.remaining_ms() - wait_ms < self.consumer.function_timeout_ms + STOP_MARGIN_MS:
            self.report.outcome = Outcome.STOPPED
            return False
        self.clock.sleep(min(wait_ms, 1_000) / 1000)  # then look for more commits
        return True

    def _take(self) -> None:
        """Read ahead from the log into the lanes, while a lane wants records and there is
        room (a lane still reading up to its retried batch's end takes no room: it holds
        at most one batch)."""
        size = self.consumer.batch_size
        room = self.lanes.limit - sum(
            len(lane.waiting) for lane in self.lanes if not self._reading_to_end(lane)
        )
        wanted = any(self._reading_to_end(lane) for lane in self.lanes) or any(
            lane.retry is None
            and lane.pending is None
            and len(lane.waiting) < size * (2 if lane.in_flight else 1)
            for lane in self.lanes
        )
        if room <= 0 or not wanted:
            return
        fed = self.feed.peek(room)
        self.feed.take(len(fed))
        kept = {r.seq for r in self.filter.keep([f.record for f in fed])}
        self.report.filtered_out = self.filter.filtered_out
        for record in fed:
            self.lanes.add(record, kept=record.record.seq in kept)

    def _reading_to_end(self, lane: Lane) -> bool:
        """A retried batch or a pending give-up of the lane is not all read yet."""
        end = lane.pending.end if lane.pending else lane.retry.end if lane.retry else None
        return end is not None and self.lanes.frontier < end

    def _step(self, lane: Lane) -> int | None:
        """Start what the lane can: 0 when it did something, else the ms until it may (a
        window, a backoff), or None when it has nothing to do now."""
        if lane.in_flight:
            return None
        if lane.pending is not None:
            if self._reading_to_end(lane):
                return None
            self._send_pending(lane, lane.pending)
            return 0
        if lane.retry is not None:
            return self._retry(lane, lane.retry)
        fed = lane.records(self.consumer.batch_size)
        if self.consumer.tumbling_window_s:
            if self._early is not None or self._window_over(fed):
                return self._final(lane)
            fed, cut = self._one_window(fed)
        else:
            cut = False
        if not fed:
            return None
        wait_ms = 0 if cut else self._window_left(fed)
        if wait_ms > 0:
            return wait_ms
        self._start(lane, [f.record for f in fed])
        return 0

    def _retry(self, lane: Lane, retry: RetryState) -> int | None:
        wait_ms = lane.not_before_ms - self.clock.now_ms()
        if wait_ms > 0:
            return wait_ms
        fed = lane.records(retry.size, below=retry.end)
        if len(fed) < retry.size and self._reading_to_end(lane):
            return None
        if not fed:  # nothing of the lane left in the range: the retry is over
            lane.retry = None
            return 0
        self._start(lane, [f.record for f in fed])
        return 0

    # --- tumbling windows (shardlog/lambda_consumer/windows.py) -----------------------------
    def _window_over(self, fed: list[FedRecord]) -> bool:
        """The open window gets its final invocation now: a record of another window is
        next, or nothing is (the partition ended and all is read, or the clock passed the
        window's end by the grace)."""
        if self.window is None:
            return False
        window = Window(self.window.start_ms, self.window.end_ms)
        if fed:
            return not window.contains(fed[0].record.arrival_ms)
        return self.feed.at_end or closed_by_clock(window.end_ms, self.clock.now_ms())

    def _one_window(self, fed: list[FedRecord]) -> tuple[list[FedRecord], bool]:
        """The records of the first one's window (and whether a later window's were cut)."""
        if not fed:
            return fed, False
        window = self._window_of(fed[0].record)
        same = [f for f in fed if window.contains(f.record.arrival_ms)]
        return same, len(same) < len(fed)

    def _window_of(self, record: LogRecord) -> Window:
        return window_of(record.arrival_ms, self.consumer.tumbling_window_s)

    def _final(self, lane: Lane) -> int:
        """Start the open window's final invocation (after its backoff, when it failed)."""
        wait_ms = lane.not_before_ms - self.clock.now_ms()
        if wait_ms > 0:
            return wait_ms
        window, state = self._closing()
        event = with_window(
            self._event([]),
            window=window.event(),
            state=json.loads(state),
            shard_id=self.partition_id,
            event_source_arn=self.runner.settings.event_source_arn,
            final=True,
            terminated_early=self._early is not None,
        )
        self.report.invocations += 1
        lane.in_flight = True
        self.in_flight.start((lane, []), event, self.consumer.function_timeout_ms)
        return 0

    def _closing(self) -> tuple[Window, bytes]:
        """The window the final invocation closes, and the state it gets."""
        if self._early is not None:
            return self._window_of(self._early[0][0]), self._early[1]
        assert self.window is not None
        return Window(self.window.start_ms, self.window.end_ms), self.window.state_json

    def _final_answered(self, lane: Lane, result: InvokeResult) -> None:
        """Final: done once it succeeds (any answer but an error; its state is dropped);
        a failure is retried, the partition waiting (Lambda: processing is suspended)."""
        answer = interpret(result, [], partial_responses=False)
        if not answer.ok:
            self.report.failed_invocations += 1
            self._final_attempts += 1
            lane.not_before_ms = self.clock.now_ms() + self._backoff_ms(self._final_attempts)
            logger.warning(
                "%s/%s: the final invocation of a window failed: %s",
                self.runner.group,
                self.partition_id,
                answer.reason,
            )
            return
        self._final_attempts = 0
        lane.not_before_ms = 0
        if self._early is not None:  # the batch is done; the window goes on, state empty
            window, _ = self._closing()
            batch, self._early = self._early[0], None
            self.window = WindowState(window.start_ms, window.end_ms)
            self.report.delivered += len(batch)
            lane.done(len(batch))
            self._advance(lane)
            return
        self.window = None
        self._save(checkpoint=True)

    def _keep_state(
        self, batch: list[LogRecord], result: InvokeResult, answer: Answer
    ) -> Answer | None:
        """A windowed batch's answer: the state it returned is kept (written with the
        checkpoint past what it delivered); no state object is a failed invocation
        (Lambda's rule). None: the state is past the limit, the batch is held until the
        window's early final invocation succeeds."""
        state = window_state(result)
        if state is None and (answer.ok or answer.failed_from):
            answer = Answer(0, "a tumbling window's invocation returned no state object")
        if state is not None and (answer.ok or answer.failed_from):
            window = self._window_of(batch[0])
            encoded = encode_state(state)
            if not keepable(encoded):
                if answer.ok:  # ends the window early, with this state
                    self._early = (batch, encoded)
                    return None
                return Answer(0, f"a state of {len(encoded)} bytes with a partial failure")
            self.window = WindowState(window.start_ms, window.end_ms, encoded)
        return answer

    def _window_left(self, fed: list[FedRecord]) -> int:
        """0 when the batch goes now: full, nothing more can come (the partition ended and
        all is read, or the read-ahead is full), or no window or the window is over."""
        window = self.consumer.batching_window_ms
        if len(fed) >= self.consumer.batch_size or window == 0 or self.lanes.room <= 0:
            return 0
        if self.feed.ended and self.lanes.frontier >= self.feed.head:
            return 0
        return fed[0].committed_at_ms + window - self.clock.now_ms()

    def _drop_expired(self, lane: Lane, batch: list[LogRecord]) -> list[LogRecord]:
        """Records past the maximum record age go to the destination, uninvoked."""
        max_age_s = self.consumer.maximum_record_age_s
        if max_age_s < 0:
            return batch
        oldest_allowed = self.clock.now_ms() - max_age_s * 1000
        expired = [r for r in batch if r.arrival_ms < oldest_allowed]
        if not expired:
            return batch
        expired = batch[: batch.index(expired[-1]) + 1]  # a prefix: arrival never decreases
        self._give_up(lane, expired, RECORD_AGE_EXCEEDED, attempts=0, function_error=None)
        return batch[len(expired) :]

    def _start(self, lane: Lane, batch: list[LogRecord]) -> None:
        batch = self._drop_expired(lane, batch)
        if not batch:
            return
        event = self._event(batch)
        if self.consumer.tumbling_window_s:
            window = self._window_of(batch[0])
            open_window = self.window
            same = open_window is not None and open_window.start_ms == window.start_ms
            event = with_window(
                event,
                window=window.event(),
                state=json.loads(open_window.state_json) if open_window and same else {},
                shard_id=self.partition_id,
                event_source_arn=self.runner.settings.event_source_arn,
            )
        self.report.invocations += 1
        lane.in_flight = True
        self.in_flight.start((lane, batch), event, self.consumer.function_timeout_ms)

    def _event(self, batch: list[LogRecord]) -> dict[str, object]:
        runner = self.runner
        return kinesis_event(
            batch,
            event_source_arn=runner.settings.event_source_arn,
            region=runner.settings.region,
            invoke_identity_arn=f"shardlog:lambda-consumer:{runner.group}",
        )

    def _answers(self, wait_s: float | None) -> None:
        answers = self.in_flight.answers(wait_s)
        for (lane, batch), result in sorted(answers, key=lambda a: a[0][0].index):
            lane.in_flight = False
            self._answered(lane, batch, result)

    def _answered(self, lane: Lane, batch: list[LogRecord], result: InvokeResult) -> None:
        if self.consumer.tumbling_window_s and not batch:
            self._final_answered(lane, result)
            return
        answer = interpret(
            result, batch, partial_responses=self.consumer.report_batch_item_failures
        )
        if self.consumer.tumbling_window_s:
            kept = self._keep_state(batch, result, answer)
            if kept is None:
                return
            answer = kept
        if answer.ok:
            self.report.delivered += len(batch)
            lane.done(len(batch))
            self._advance(lane)
            return
        self.report.failed_invocations += 1
        self._failed(lane, batch, answer, result.function_error)

    def _failed(
        self, lane: Lane, batch: list[LogRecord], answer: Answer, function_error: str | None
    ) -> None:
        assert answer.failed_from is not None
        logger.warning(
            "%s/%s: batch [%d, %d]%s failed: %s",
            self.runner.group,
            self.partition_id,
            batch[0].seq,
            batch[-1].seq,
            f" of lane {lane.index}" if self.lanes.factor > 1 else "",
            answer.reason,
        )
        done, rest = batch[: answer.failed_from], batch[answer.failed_from :]
        self.report.delivered += len(done)
        lane.done(len(done))
        previous = lane.retry or RetryState(batch[0].seq, batch[-1].seq + 1, len(batch), 0)
        split = (
            answer.failed_from == 0
            and self.consumer.bisect_batch_on_function_error
            and len(rest) > 1
        )
        if split:  # a split counts no attempt (Lambda's rule)
            state = RetryState(rest[0].seq, previous.end, len(rest) // 2, previous.attempts)
        else:
            state = RetryState(rest[0].seq, previous.end, len(rest), previous.attempts + 1)
        lane.retry = state
        limit = self.consumer.maximum_retry_attempts
        if limit >= 0 and state.attempts > limit:
            self._give_up(
                lane,
                rest,
                RETRIES_EXHAUSTED,
                attempts=state.attempts,
                function_error=function_error,
            )
            return
        lane.not_before_ms = self.clock.now_ms() + self._backoff_ms(state.attempts)
        self._save(checkpoint=bool(done))

    def _backoff_ms(self, attempts: int) -> int:
        if attempts == 0:
            return 0
        return min(
            self.consumer.retry_max_delay_ms,
            self.consumer.retry_base_delay_ms * 2 ** (attempts - 1),
        )

    def _give_up(
        self,
        lane: Lane,
        records: list[LogRecord],
        condition: str,
        *,
        attempts: int,
        function_error: str | None,
    ) -> None:
        """Fenced first, then the destination: a runner that lost its lease (a zombie) is
        refused before it sends anything, and a give-up once recorded is sent by whichever
        runner holds the lease (at least once: a crash after sending sends it again)."""
        pending = PendingFailure(
            records[0].seq, records[-1].seq + 1, condition, attempts, function_error, lane.index
        )
        self._record_give_up(pending)
        self._send_pending(lane, pending)

    def _record_give_up(self, pending: PendingFailure) -> None:
        self.lanes.lanes[pending.lane].pending = pending
        self._save(checkpoint=True)

    def _send_pending(self, lane: Lane, pending: PendingFailure) -> None:
        """Send the give-up's records (the lane's, from its front to ``pending.end``)."""
        runner = self.runner
        records = [f.record for f in lane.records(len(lane.waiting), below=pending.end)]
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
        lane.done(len(records))
        lane.pending = None
        self._advance(lane)

    def _advance(self, lane: Lane) -> None:
        """The lane's records before its next one are done: checkpoint, and go on retrying
        the rest of a failed batch (a fresh sub-batch, no attempt yet) or batch normally."""
        retry = lane.retry
        next_seq = lane.next_seq(self.lanes.frontier)
        if retry is not None and next_seq < retry.end:
            lane.retry = RetryState(next_seq, retry.end, retry.size, 0)
        else:
            lane.retry = None
        lane.not_before_ms = 0
        self._save(checkpoint=True, unless_unchanged=True)

    # --- fenced writes (shardlog/dal/consumers.py) ------------------------------------
    def _save(self, *, checkpoint: bool, unless_unchanged: bool = False) -> None:
        """The lanes' progress, with the checkpoint (the lowest seq not done) when asked
        for, else with a renewal of the lease. ``unless_unchanged``: not when checkpoint and
        progress are as last written and the lease was written within a third of its
        duration (another lane holds the checkpoint; at factor 1 it always moves)."""
        position = self.lanes.checkpoint() if checkpoint else None
        progress = dataclasses.replace(self.lanes.progress(), window=self.window)
        fresh = self.clock.now_ms() - self._saved_at_ms < self.consumer.lease_ms // 3
        if unless_unchanged and fresh and self._saved == (str(self.lanes.checkpoint()), progress):
            return
        self._holding(self.progress.save(self.lease, progress, checkpoint=position))
        self._saved = (self.lease.checkpoint, progress)
        self._saved_at_ms = self.clock.now_ms()
        if position is not None:
            self.saved_at = position

    def _holding(self, lease: Lease) -> None:
        self.lease = lease
        self.report.checkpoint = lease.checkpoint

    # --- 5. end --------------------------------------------------------------------------
    def _finish_shard(self) -> None:
        self._holding(self.runner.leases.checkpoint(self.lease, C.SHARD_END))
        self.shard_end = True
        logger.info("%s/%s: SHARD_END; waking its children", self.runner.group, self.partition_id)
