"""The Lambda consumer runner: one wake of one (group, partition), to the head or its timeout.

Protocol (every write fenced on the group's ``leaseCounter``, as for worker groups):

1. **Ready?** The partition's lineage is recorded and every parent is ENDED and
   checkpointed ``SHARD_END`` by the group (parents before children). Else: nothing to
   do; the parent's runner wakes its children when it finishes.
2. **Lease.** ``acquire`` the group's lease on the partition (owner ``lambda:<request
   id>``). Held by a live runner: another wake is at work; it re-checks the head after
   releasing, so nothing is lost. The lease outlasts one invocation plus a checkpoint.
3. **Position.** The checkpoint (the next seq to deliver). The group's start position was
   fixed per partition when the group was registered (shardlog/consumer/creation.py, at
   deploy or `shardlog local up`; an unregistered group reads nothing); a partition that
   appeared later starts at seq 0, written before anything is invoked. A batch
   being retried (``retryStartSeq``, ``retryEndSeq``, ``retryBatchSize``, ``retryAttempts``
   on the lease item)
   is taken up again where a previous runner left it.
4. **Batches.** Up to ``batch_size`` committed records from the position; while fewer
   are there, wait up to ``batching_window_ms`` from the first one's commit. Records older
   than ``maximum_record_age_s`` go to the on-failure destination uninvoked. Invoke the
   function synchronously with the Kinesis event shape; then:

   - success: checkpoint after the batch (fenced; it also renews the lease);
   - partial failure (``batchItemFailures``): checkpoint before the first failed record,
     retry from it (one attempt counted);
   - whole failure: with bisect and more than one record, retry in halves (a split counts
     no attempt), else retry the batch (one attempt counted). The failed batch's records
     are then delivered in sub-batches of the current size until they are all through;
   - attempts past ``maximum_retry_attempts`` (unless -1): the sub-batch goes to the
     on-failure destination as one failed-batch record, the checkpoint moves past it.
     The give-up is written first (``pendingOnFailure``, fenced), then the record is sent,
     then the checkpoint clears it: a runner that lost its lease is refused before it
     sends anything, and a runner that finds a give-up pending sends it (uninvoked).

   The retry state is written (fenced) before each retry, so a runner restart resumes it.
   Before each invocation the runner checks it can finish one more (the function's
   timeout) before its own timeout; else it stops.
5. **End.** Caught up with an ENDED partition: checkpoint ``SHARD_END``, then wake the
   children. Release the lease, **then** re-read the head: behind (stopped early, a retry
   pending, or a commit that raced the release): wake itself again. Release first, then
   re-check: a commit is either seen by the re-check or its wake finds the lease free.

A lease lost at any write (a zombie past its lease, a duplicate runner) stops the runner
at once: the new owner resumes from the last checkpoint, so only the batch in flight can
be delivered twice; nothing is ever skipped.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from shardlog import constants as C
from shardlog.aws import Clients
from shardlog.clock import Clock, SystemClock
from shardlog.consumer.creation import LAMBDA, GroupRecord, read_group
from shardlog.exceptions import ConfigurationError, LeaseHeldError, LeaseLostError
from shardlog.format import LogRecord
from shardlog.lambda_consumer.destinations import (
    RECORD_AGE_EXCEEDED,
    RETRIES_EXHAUSTED,
    FailedBatch,
    OnFailureDestination,
)
from shardlog.lambda_consumer.events import Answer, interpret, kinesis_event
from shardlog.lambda_consumer.feed import FedRecord, LogFeed
from shardlog.lambda_consumer.invoke import Invoker
from shardlog.lambda_consumer.settings import RunnerSettings
from shardlog.lambda_consumer.wake import PARENT_ENDED, REWAKE, Wake, WakeSender
from shardlog.lease import LeaseManager
from shardlog.partitions import lineage_known, parents_done
from shardlog.reader import LogReader
from shardlog.tables import (
    Lease,
    PartitionInfo,
    Tables,
    Update,
    consumer_key,
    from_ddb,
    n,
    s,
    update_item,
)

logger = logging.getLogger("shardlog.lambda_consumer")

# Time kept free before the runner's own timeout, beyond one invocation of the function.
STOP_MARGIN_MS = 5_000
_RETRY_ATTRIBUTES = ("#rstart", "#rend", "#rsize", "#rattempts")


class Outcome(StrEnum):
    CAUGHT_UP = "caught up"  # delivered to the head
    FINISHED = "finished"  # an ENDED partition, checkpointed SHARD_END
    STOPPED = "stopped"  # out of time (or waiting to retry): woke itself again
    BUSY = "busy"  # another runner holds the lease
    NOT_READY = "not ready"  # lineage unknown or parents not finished
    LOST = "lost"  # the lease was taken over mid-run


@dataclass(frozen=True)
class RetryState:
    """The records [start, end) of a batch that failed are being retried, in sub-batches of
    at most ``size`` records; the current one has failed ``attempts`` times."""

    start: int
    end: int
    size: int
    attempts: int


@dataclass(frozen=True)
class PendingFailure:
    """The group gave up on the records [start, end) (recorded, fenced, before the on-failure
    record is sent); the next runner sends the record if this one could not."""

    start: int
    end: int
    condition: str
    attempts: int
    function_error: str | None

    def attribute(self) -> dict[str, Any]:
        value: dict[str, Any] = {
            "start": n(self.start),
            "end": n(self.end),
            "condition": s(self.condition),
            "attempts": n(self.attempts),
        }
        if self.function_error is not None:
            value["functionError"] = s(self.function_error)
        return {"M": value}

    @classmethod
    def from_value(cls, value: Mapping[str, Any]) -> PendingFailure:
        error = value.get("functionError")
        return cls(
            int(value["start"]),
            int(value["end"]),
            str(value["condition"]),
            int(value["attempts"]),
            str(error) if error is not None else None,
        )


@dataclass
class RunReport:
    group: str
    partition_id: str
    outcome: Outcome = Outcome.CAUGHT_UP
    delivered: int = 0  # records the function processed successfully
    invocations: int = 0
    failed_invocations: int = 0
    sent_to_destination: int = 0  # records given up on
    checkpoint: str | None = None
    head: int = 0
    lag_records: int = 0
    lag_ms: int = 0  # age (by arrival) of the oldest undelivered record; 0 when caught up
    woke: list[str] = field(default_factory=list)  # partitions this run woke

    def as_dict(self) -> dict[str, Any]:
        return {
            "group": self.group,
            "partitionId": self.partition_id,
            "outcome": str(self.outcome),
            "delivered": self.delivered,
            "invocations": self.invocations,
            "failedInvocations": self.failed_invocations,
            "sentToOnFailure": self.sent_to_destination,
            "checkpoint": self.checkpoint,
            "head": self.head,
            "lagRecords": self.lag_records,
            "lagMs": self.lag_ms,
            "woke": self.woke,
        }


class Runner:
    def __init__(
        self,
        clients: Clients,
        settings: RunnerSettings,
        invoker: Invoker,
        wakes: WakeSender,
        *,
        clock: Clock | None = None,
        function_arn: str = "",
    ) -> None:
        self.clients = clients
        self.settings = settings
        self.consumer = settings.consumer
        self.group = self.consumer.group
        self.invoker = invoker
        self.wakes = wakes
        self.clock = clock or SystemClock()
        self.function_arn = function_arn or self.consumer.function_name
        names = settings.tables
        self.tables = Tables(clients, names)
        self.reader = LogReader(clients, settings.bucket, names, prefetch=2)
        self.leases = LeaseManager(
            clients,
            settings.consumers_table,
            clock=self.clock,
            lease_duration_ms=self.consumer.lease_ms,
        )
        self.destination = (
            OnFailureDestination(clients, self.consumer.on_failure_destination)
            if self.consumer.on_failure_destination
            else None
        )
        self._group: GroupRecord | None = None
        self._ensured: set[str] = set()  # lease items this runner (a warm Lambda) created

    # --- one wake ------------------------------------------------------------------------
    def run(
        self, partition_id: str, *, request_id: str, remaining_ms: Callable[[], int]
    ) -> RunReport:
        report = RunReport(self.group, partition_id)
        partition = self.tables.get_partition(partition_id)
        if not self._ready(partition):
            report.outcome = Outcome.NOT_READY
            return report
        assert partition is not None
        group = self._group_record()
        if group is None or not group.positioned:
            logger.error(
                "%s: the group is not registered (its start positions are fixed when it is "
                "created: deploy, or `shardlog local up`); nothing is read",
                self.group,
            )
            report.outcome = Outcome.NOT_READY
            return report
        if partition_id not in self._ensured:  # once per warm runner: a request saved a wake
            self.leases.ensure(
                self.group, partition_id, partition.parents, checkpoint=group.position(partition_id)
            )
            self._ensured.add(partition_id)
        try:
            lease = self.leases.acquire(self.group, partition_id, f"lambda:{request_id}")
        except LeaseHeldError as exc:
            logger.info(
                "%s/%s: held by %s; that runner re-checks", self.group, partition_id, exc.owner
            )
            report.outcome = Outcome.BUSY
            return report
        session = _Session(self, lease, report, remaining_ms)
        try:
            session.start(partition)
            session.deliver()
        except LeaseLostError as exc:
            logger.warning(
                "%s/%s: lease lost (%s); the new owner resumes", self.group, partition_id, exc
            )
            report.outcome = Outcome.LOST
            return report
        return session.finish(request_id)

    # --- helpers -------------------------------------------------------------------------
    def _ready(self, partition: PartitionInfo | None) -> bool:
        if partition is None or not lineage_known(partition):
            return False
        if not partition.parents:
            return True
        parents = {p: self.tables.get_partition(p) for p in partition.parents}
        known = {p: info for p, info in parents.items() if info is not None}
        leases = {p: lease for p in known if (lease := self.tables.get_lease(self.group, p))}
        return parents_done(partition.parents, known, leases)

    def _group_record(self) -> GroupRecord | None:
        """The group's creation record (kept by a warm runner once positioned: it never
        changes). None: not registered yet (deploy and `shardlog local up` register it)."""
        if self._group is None:
            record = read_group(self.clients, self.settings.consumers_table, self.group)
            if record is not None and record.kind != LAMBDA:
                raise ConfigurationError(
                    f"consumer group {self.group!r} is not a Lambda consumer group (its "
                    "workers run `shardlog consume`); a group is one or the other: pick "
                    "another group name"
                )
            if record is None or not record.positioned:
                return record  # read again next time: registration may come meanwhile
            self._group = record
        return self._group

    def read_progress(self, partition_id: str) -> tuple[RetryState | None, PendingFailure | None]:
        """A batch being retried, and a give-up whose record may not have been sent."""
        response = self.clients.dynamodb.get_item(
            TableName=self.settings.consumers_table,
            Key=consumer_key(self.group, partition_id),
            ConsistentRead=True,
        )
        item = from_ddb(response.get("Item", {}))
        pending = item.get(C.ATTR_PENDING_FAILURE)
        failure = PendingFailure.from_value(pending) if pending is not None else None
        if C.ATTR_RETRY_START not in item:
            return None, failure
        start, end = int(item[C.ATTR_RETRY_START]), int(item[C.ATTR_RETRY_END])
        retry = RetryState(
            start,
            end,
            int(item.get(C.ATTR_RETRY_SIZE, end - start)),
            int(item.get(C.ATTR_RETRY_ATTEMPTS, 0)),
        )
        return retry, failure


class _Session:
    """The runner's work while it holds the lease (steps 3 to 5)."""

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
            self.retry, self.pending = self.runner.read_progress(self.partition_id)

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
            batch = self._drop_expired(batch)
            if batch:
                self._invoke(batch)

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

    def _invoke(self, batch: list[LogRecord]) -> None:
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
            self._advance(batch[-1].seq + 1)
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
        update = self.runner.leases.checkpoint_update(
            self.lease, str(pending.start), now_ms=self.clock.now_ms()
        )
        self._send(_with(update, sets=("#pf = :pf",), values={":pf": pending.attribute()}))
        self.pending = pending

    def _send_pending(
        self, pending: PendingFailure, records: list[LogRecord] | None = None
    ) -> None:
        runner = self.runner
        if records is None:
            self.feed.seek(pending.start)
            records = [f.record for f in self.feed.peek(pending.end - pending.start)]
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
        self.report.sent_to_destination += pending.end - pending.start
        self._advance(pending.end)

    def _advance(self, next_seq: int) -> None:
        """Everything before ``next_seq`` is done: checkpoint it, and go on retrying the
        rest of a failed batch (a fresh sub-batch, no attempt yet) or batch normally."""
        retry = self.retry
        if retry is not None and next_seq < retry.end:
            self._write_retry(RetryState(next_seq, retry.end, retry.size, 0), checkpoint=next_seq)
        else:
            self._checkpoint(next_seq, clear_retry=True)

    # --- fenced writes -------------------------------------------------------------------
    def _checkpoint(self, next_seq: int, *, clear_retry: bool) -> None:
        update = self.runner.leases.checkpoint_update(
            self.lease, str(next_seq), now_ms=self.clock.now_ms()
        )
        update = _with(update, removes=(*_RETRY_ATTRIBUTES, "#pf") if clear_retry else ("#pf",))
        self._send(update)
        self.pending = None
        if clear_retry:
            self.retry = None
        self.feed.seek(next_seq)

    def _write_retry(self, retry: RetryState, *, checkpoint: int | None) -> None:
        if checkpoint is not None:
            base = self.runner.leases.checkpoint_update(
                self.lease, str(checkpoint), now_ms=self.clock.now_ms()
            )
        else:
            expires = self.clock.now_ms() + self.runner.leases.lease_duration_ms
            base = Update(
                self.runner.settings.consumers_table,
                consumer_key(self.runner.group, self.partition_id),
                ("#expires = :expires",),
                values={":expires": n(expires)},
            ).fenced(self.lease)
        self._send(
            _with(
                base,
                removes=("#pf",),
                sets=(
                    "#rstart = :rstart",
                    "#rend = :rend",
                    "#rsize = :rsize",
                    "#rattempts = :rattempts",
                ),
                values={
                    ":rstart": n(retry.start),
                    ":rend": n(retry.end),
                    ":rsize": n(retry.size),
                    ":rattempts": n(retry.attempts),
                },
            )
        )
        self.retry, self.pending = retry, None
        if checkpoint is not None:
            self.feed.seek(checkpoint)

    def _send(self, update: Update) -> None:
        outcome = update_item(self.runner.clients, update)
        if not outcome.written or outcome.item is None:
            raise LeaseLostError(self.runner.group, self.partition_id, "fenced by leaseCounter")
        self.lease = Lease.from_item(outcome.item)
        self.report.checkpoint = self.lease.checkpoint

    # --- 5. end --------------------------------------------------------------------------
    def _finish_shard(self) -> None:
        self._send(
            self.runner.leases.checkpoint_update(
                self.lease, C.SHARD_END, now_ms=self.clock.now_ms()
            )
        )
        self.shard_end = True
        logger.info("%s/%s: SHARD_END; waking its children", self.runner.group, self.partition_id)

    def finish(self, request_id: str) -> RunReport:
        runner, report = self.runner, self.report
        try:
            self.lease = runner.leases.release(self.lease)
        except LeaseLostError:
            report.outcome = Outcome.LOST
            return report
        report.checkpoint = self.lease.checkpoint
        head = self.feed.refresh()
        report.head = head
        if self.shard_end:
            children = [
                p.partition_id
                for p in runner.tables.list_partitions()
                if self.partition_id in p.parents
            ]
            runner.wakes.send(
                Wake(runner.group, child, PARENT_ENDED, f"{child}:parent-ended:{self.partition_id}")
                for child in children
            )
            report.woke = children
            return report
        position = self.feed.position
        report.lag_records = max(0, head - position)
        if report.lag_records:
            fed = self.feed.peek(1, refresh=False) or self.feed.peek(1)
            if fed:
                report.lag_ms = max(0, self.clock.now_ms() - fed[0].record.arrival_ms)
        behind = report.lag_records > 0 or self.retry is not None or self.feed.at_end
        if behind or report.outcome is Outcome.STOPPED:
            runner.wakes.send(
                [
                    Wake(
                        runner.group,
                        self.partition_id,
                        REWAKE,
                        f"{self.partition_id}:rewake:{request_id}",
                    )
                ]
            )
            report.woke = [self.partition_id]
        return report


class _Stop(Exception):
    """Stop delivering (the retry state is saved); handled by ``deliver``'s caller."""


def _with(
    update: Update,
    *,
    sets: tuple[str, ...] = (),
    removes: tuple[str, ...] = (),
    values: dict[str, Any] | None = None,
) -> Update:
    return Update(
        update.table,
        update.key,
        (*update.sets, *sets),
        (*update.removes, *removes),
        update.condition,
        {**update.values, **(values or {})},
    )
