"""The Lambda consumer runner: one wake of one (group, partition), to the head or its timeout.

Protocol (every write fenced on the group's ``leaseCounter``, as for worker groups):

0. **Delivered already?** A wake that names a head (a commit's, or a runner's own, for an
   OPEN partition) when the group's checkpoint is at or past it: every record it announced
   was delivered, so the run ends after that one read (``Outcome.DELIVERED``). Records
   committed after that head have wakes of their own (and the sweep finds a lost one);
   a checkpoint moved back (a seek) is read here, so it is not skipped.
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

   With ``tumbling_window_s``, a batch holds records of one window, the function gets and
   returns the window's state, written with the checkpoint in the same fenced write, and
   a final invocation closes each window (shardlog/lambda_consumer/windows.py).

   The retry state is written (fenced) before each retry, so a runner restart resumes it.
   Before each invocation the runner checks it can finish one more (the function's
   timeout) before its own timeout; else it stops.

   With ``parallelization_factor`` N above 1, the records are split into N lanes by
   partition key hash (shardlog/lambda_consumer/lanes.py) and each lane does the above
   for its own records, up to N invocations in flight at once, one per lane: each key's
   records in order. The checkpoint is the lowest seq not done over the lanes, so it never
   passes a record not delivered (or given up on); each lane's retry state and pending
   give-up are written with it (``laneProgress``), fenced, after every answer.
5. **End.** Caught up with an ENDED partition: checkpoint ``SHARD_END``, then wake the
   children. Release the lease, **then** re-read the head: behind (stopped early, a retry
   pending, or a commit that raced the release): wake itself again. Release first, then
   re-check: a commit is either seen by the re-check or its wake finds the lease free.

A lease lost at any write (a zombie past its lease, a duplicate runner) stops the runner
at once: the new owner resumes from the last checkpoint, so only the batch in flight can
be delivered twice; nothing is ever skipped.

Who owns what: this module owns the lease protocol of a wake (steps 1, 2 and 5: ready,
acquire, release, re-check, wakes); shardlog/lambda_consumer/delivery.py owns every
delivery decision (steps 3 and 4: position, batches, retries, bisect, give-ups); the
requests are the data-access layer's (shardlog/lease.py for the lease,
shardlog/dal/consumers.py for the group item, retry state and give-up records).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from shardlog.aws import Clients
from shardlog.clock import Clock, SystemClock
from shardlog.consumer.creation import LAMBDA, GroupRecord, read_group
from shardlog.dal.consumers import LambdaProgress
from shardlog.exceptions import ConfigurationError, LeaseHeldError, LeaseLostError
from shardlog.lambda_consumer.delivery import Session
from shardlog.lambda_consumer.destinations import OnFailureDestination
from shardlog.lambda_consumer.invoke import Invoker
from shardlog.lambda_consumer.report import Outcome, RunReport
from shardlog.lambda_consumer.settings import RunnerSettings
from shardlog.lambda_consumer.wake import PARENT_ENDED, REWAKE, Wake, WakeSender
from shardlog.lease import LeaseManager
from shardlog.partitions import lineage_known, parents_done
from shardlog.reader import LogReader
from shardlog.tables import PartitionInfo, Tables

__all__ = ["Outcome", "RunReport", "Runner"]

logger = logging.getLogger("shardlog.lambda_consumer")


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
        self.progress = LambdaProgress(self.leases)
        self._group: GroupRecord | None = None
        self._ensured: set[str] = set()  # lease items this runner (a warm Lambda) created

    # --- one wake ------------------------------------------------------------------------
    def run(
        self,
        partition_id: str,
        *,
        request_id: str,
        remaining_ms: Callable[[], int],
        head: int | None = None,
    ) -> RunReport:
        """One wake; ``head``: the committed head the wake announced (None: any)."""
        report = RunReport(self.group, partition_id)
        if head is not None and self._delivered_to(partition_id, head):
            report.outcome = Outcome.DELIVERED
            report.head = head
            return report
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
        session = Session(self, lease, report, remaining_ms)
        try:
            session.start(partition)
            session.deliver()
        except LeaseLostError as exc:
            logger.warning(
                "%s/%s: lease lost (%s); the new owner resumes", self.group, partition_id, exc
            )
            report.outcome = Outcome.LOST
            return report
        return self._finish(session, request_id)

    # --- helpers -------------------------------------------------------------------------
    def _delivered_to(self, partition_id: str, head: int) -> bool:
        """Every record below ``head`` delivered: the group's checkpoint (one consistent
        read) is a seq at or past it. SHARD_END is not: that run wakes the children."""
        lease = self.tables.get_lease(self.group, partition_id)
        checkpoint = lease.checkpoint if lease is not None else None
        return checkpoint is not None and checkpoint.isdigit() and int(checkpoint) >= head

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

    # --- 5. end --------------------------------------------------------------------------
    def _finish(self, session: Session, request_id: str) -> RunReport:
        """Release, then re-check the head: wake the children of a finished partition, or
        this partition again when it is behind (or stopped early)."""
        report, feed = session.report, session.feed
        try:
            session.lease = self.leases.release(session.lease)
        except LeaseLostError:
            report.outcome = Outcome.LOST
            return report
        report.checkpoint = session.lease.checkpoint
        head = feed.refresh()
        report.head = head
        if session.shard_end:
            children = [
                p.partition_id
                for p in self.tables.live_partitions()  # a child outlives its parents there
                if session.partition_id in p.parents
            ]
            self.wakes.send(
                Wake(
                    self.group,
                    child,
                    PARENT_ENDED,
                    f"{child}:parent-ended:{session.partition_id}",
                )
                for child in children
            )
            report.woke = children
            return report
        report.lag_records = max(0, head - session.position)
        if report.lag_records:
            oldest = session.oldest_undelivered()
            if oldest is not None:
                report.lag_ms = max(0, self.clock.now_ms() - oldest.arrival_ms)
        behind = report.lag_records > 0 or session.retrying or feed.at_end
        if behind or report.outcome is Outcome.STOPPED:
            self.wakes.send(
                [
                    Wake(
                        self.group,
                        session.partition_id,
                        REWAKE,
                        f"{session.partition_id}:rewake:{request_id}",
                        None if feed.ended else head,  # an ENDED one must reach SHARD_END
                    )
                ]
            )
            report.woke = [session.partition_id]
        return report
