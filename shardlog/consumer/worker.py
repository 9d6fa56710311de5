"""A consumer group worker: leases, balancing and one processor per held partition.

``run_once()`` is one deterministic cycle (tests drive it with a ManualClock):

1. renew each held lease once renew_interval_ms passed since its last write;
2. every take_interval_ms: create missing lease items from the partitions table,
   then take (and at most one move) per coordinator.plan_takes;
3. one step per held partition that is due (a batch, the shard end, a lease loss, a
   handoff), on a thread pool, and wait for them.

Moves are graceful (KCL 3's lease handoff): the worker asks the owner for the lease
(``LeaseManager.request_transfer``) and waits; the owner, at its next renewal,
checkpoint or listing, finishes the batch in flight, lets its processor checkpoint, and
transfers the lease to it; the next listing shows the lease as this worker's, and it
takes it at that checkpoint. A request not honoured within ``handoff_timeout_ms`` (the
owner hung) becomes a steal; a dead owner's lease expires and is taken as before. So
liveness never waits on the old owner, and safety rests on leaseCounter alone.

``run(stop)`` loops the same without waiting for slow partitions, so a slow
processor never delays renewals or other partitions; on stop it hands every
partition off gracefully (``shutdown()``): to a worker that asked for it, else released.
"""

from __future__ import annotations

import logging
import os
import random
import socket
import threading
import uuid
from collections.abc import Mapping
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from shardlog.aws import Clients
from shardlog.clock import Clock, SystemClock
from shardlog.config import ShardlogConfig
from shardlog.consumer.checkpointer import LeaseHolder
from shardlog.consumer.coordinator import TakePlan, eligible_leases, plan_takes
from shardlog.consumer.creation import WORKERS, GroupCreator, GroupRecord, read_group
from shardlog.consumer.exceptions import CheckpointLeaseLostError
from shardlog.consumer.partition import Outcome, PartitionConsumer, State, StepResult
from shardlog.consumer.processor import ProcessorFactory, processor_factory
from shardlog.consumer.settings import ConsumerSettings, validate_group
from shardlog.exceptions import LeaseLostError
from shardlog.lease import LeaseManager
from shardlog.partitions import lineage_known
from shardlog.reader import LogReader
from shardlog.tables import Lease, PartitionInfo, Tables

logger = logging.getLogger("shardlog.consumer")


def default_worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


@dataclass
class WorkerStats:
    delivered: int = 0
    taken: int = 0
    stolen: int = 0  # live leases taken without a handoff (handoff off, or not honoured)
    lost: int = 0
    finished: int = 0
    failed: int = 0
    requested: int = 0  # handoffs this worker asked for
    received: int = 0  # leases handed over to this worker
    handed_off: int = 0  # leases this worker handed over or released after a checkpoint


@dataclass(frozen=True)
class CycleReport:
    delivered: int
    held: tuple[str, ...]


class Worker:
    def __init__(
        self,
        group: str,
        processor: Any = None,
        config: ShardlogConfig | None = None,
        *,
        settings: ConsumerSettings | None = None,
        clock: Clock | None = None,
        worker_id: str | None = None,
        clients: Clients | None = None,
        factory: ProcessorFactory | None = None,
        threads: int | None = None,
    ) -> None:
        """``processor``: a callable f(records, checkpointer), a processor class (one
        instance per partition) or instance; or give ``factory(partition_id)`` instead."""
        self.group = validate_group(group)
        if (processor is None) == (factory is None):
            raise TypeError("give a processor or a factory (exactly one)")
        self.config = config or ShardlogConfig.resolve()
        self.clients = clients or self.config.clients()
        self.settings = settings or ConsumerSettings()
        self.clock: Clock = clock or SystemClock()
        self.worker_id = worker_id or default_worker_id()
        self.tables = Tables(self.clients, self.config.tables)
        self.leases = LeaseManager(
            self.clients,
            self.config.consumers_table,
            clock=self.clock,
            lease_duration_ms=self.settings.lease_duration_ms,
        )
        # Up to 2 segments fetched ahead per partition: overlap without holding much memory
        # (a segment can reach 16 MiB).
        self.reader = LogReader(self.clients, self.config.bucket, self.config.tables, prefetch=2)
        self.factory = factory or processor_factory(processor)
        self._creator = GroupCreator(self.clients, self.tables, self.reader, self.leases)
        self._group: GroupRecord | None = None
        self.stats = WorkerStats()
        self._consumers: dict[str, PartitionConsumer] = {}
        self._running: dict[str, Future[StepResult]] = {}
        self._failures: dict[str, tuple[int, int]] = {}  # partition -> (failures, retake at ms)
        self._asked: tuple[str, int] | None = None  # (partition, when) of our pending request
        self._last_take_ms: int | None = None
        self._rng = random.Random(self.worker_id)
        self._pool = ThreadPoolExecutor(
            max_workers=threads or min(32, self.settings.max_leases),
            thread_name_prefix=f"shardlog-consumer-{self.group}",
        )
        self._closed = False

    # --- public --------------------------------------------------------------------------
    @property
    def held(self) -> tuple[str, ...]:
        """Partitions this worker is processing now (safe to read from another thread)."""
        return tuple(sorted(self._consumers.copy()))

    def run_once(self) -> CycleReport:
        """One cycle: renew, balance (when due), one step per due partition; waits for them."""
        before = self.stats.delivered
        now = self.clock.now_ms()
        self._housekeeping(now)
        self._dispatch(now)
        wait(list(self._running.values()))
        self._collect()
        return CycleReport(self.stats.delivered - before, self.held)

    def run(self, stop: threading.Event) -> None:
        """Consume until ``stop`` is set, then hand every partition off (graceful shutdown)."""
        try:
            while not stop.is_set():
                now = self.clock.now_ms()
                self._housekeeping(now)
                self._dispatch(now)
                timeout_s = self._next_wake_ms(self.clock.now_ms()) / 1000
                running = list(self._running.values())
                if running:
                    wait(running, timeout=timeout_s, return_when=FIRST_COMPLETED)
                else:
                    stop.wait(timeout_s)
                self._collect()
        finally:
            self.shutdown()

    def shutdown(self) -> None:
        """Graceful: our pending handoff request is withdrawn; each processor finishes its
        batch and is asked to checkpoint, then its lease goes to a worker that asked for it,
        or is released."""
        if self._closed:
            return
        self._settle_request()
        for consumer in self._consumers.values():
            consumer.shutdown_requested = True
        wait(list(self._running.values()))
        self._collect()
        self._dispatch(self.clock.now_ms())
        wait(list(self._running.values()))
        self._collect()
        self._close_pool()

    def close(self) -> None:
        """Stop without handing off: leases are left to expire, as if the process died."""
        if self._closed:
            return
        wait(list(self._running.values()))
        for consumer in self._consumers.values():
            try:
                consumer.processor.close()
            except Exception:
                logger.exception("%s: closing %s raised", self.worker_id, consumer.partition_id)
            consumer.cursor.close()
        self._consumers.clear()
        self._running.clear()
        self._close_pool()

    # --- the cycle -----------------------------------------------------------------------
    def _housekeeping(self, now: int) -> None:
        for consumer in self._consumers.values():
            try:
                consumer.holder.renew_if_due(now, self.settings.renew_interval_ms)
            except (BotoCoreError, ClientError) as exc:  # transient: retried next cycle
                logger.warning("%s: renewing %s failed: %s", self.worker_id, consumer, exc)
        due = (
            self._last_take_ms is None or now - self._last_take_ms >= self.settings.take_interval_ms
        )
        if due:
            self._last_take_ms = now
            try:
                self._balance(now)
            except (BotoCoreError, ClientError) as exc:
                logger.warning("%s: listing or taking leases failed: %s", self.worker_id, exc)

    def _dispatch(self, now: int) -> None:
        for partition_id, consumer in self._consumers.items():
            if partition_id not in self._running and consumer.ready(now):
                self._running[partition_id] = self._pool.submit(consumer.step)

    def _collect(self) -> None:
        for partition_id, future in list(self._running.items()):
            if not future.done():
                continue
            del self._running[partition_id]
            consumer = self._consumers[partition_id]
            try:
                result = future.result()
            except Exception:  # step() catches everything; this is a bug guard
                logger.exception("%s: step of %s raised", self.worker_id, partition_id)
                continue
            self.stats.delivered += result.delivered
            if result.delivered:
                self._failures.pop(partition_id, None)
            if consumer.state is State.DONE:
                del self._consumers[partition_id]
                self._count(partition_id, result.outcome)

    def _count(self, partition_id: str, outcome: Outcome) -> None:
        if outcome is Outcome.LOST:
            self.stats.lost += 1
        elif outcome is Outcome.FINISHED:
            self.stats.finished += 1
        elif outcome is Outcome.HANDED_OFF:
            self.stats.handed_off += 1
        elif outcome is Outcome.FAILED:
            self.stats.failed += 1
            failures = self._failures.get(partition_id, (0, 0))[0] + 1
            delay = min(
                self.settings.failure_backoff_ms * 2 ** (failures - 1),
                self.settings.max_failure_backoff_ms,
            )
            self._failures[partition_id] = (failures, self.clock.now_ms() + delay)
            logger.error(
                "%s: %s/%s will be taken again in %.1f s at the earliest (failure %d in a row); "
                "any other worker may take it now",
                self.worker_id,
                self.group,
                partition_id,
                delay / 1000,
                failures,
            )

    def _next_wake_ms(self, now: int) -> int:
        waits = [self.settings.renew_interval_ms, self.settings.idle_poll_interval_ms]
        if self._last_take_ms is not None:
            waits.append(self._last_take_ms + self.settings.take_interval_ms - now)
        waits += [
            c.next_poll_ms - now for p, c in self._consumers.items() if p not in self._running
        ]
        return max(5, min(waits))

    # --- leases --------------------------------------------------------------------------
    def _balance(self, now: int) -> None:
        # The live set and its parents, and the group's leases on them: never the history.
        lineage = self.tables.live_lineage()
        partitions = lineage.known
        leases = list(self.tables.leases_on(self.group, partitions).values())
        known = {lease.partition_id for lease in leases}
        # Lease items copy parentPartitionIds: create them once shard sync recorded lineage.
        group = self._group_record(leases)
        missing = [p for p in lineage.live if p.partition_id not in known and lineage_known(p)]
        if missing:
            self._creator.ensure_leases(group, missing)
            leases = list(self.tables.leases_on(self.group, partitions).values())
        for lease in leases:  # a listed owner other than us: taken, whatever our copy says
            consumer = self._consumers.get(lease.partition_id)
            if consumer is not None and lease.owner != self.worker_id:
                consumer.holder.mark_lost(f"the table shows owner {lease.owner}")
            elif consumer is not None and lease.transfer_requested_by is not None:
                consumer.holder.note_transfer_request(lease)
        blocked = {p for p, (_, at) in self._failures.items() if at > now}
        plan = plan_takes(
            eligible_leases(leases, partitions),
            self.worker_id,
            now,
            tracked=set(self._consumers),
            blocked=blocked,
            max_leases=self.settings.max_leases,
            rng=self._rng,
        )
        for lease in plan.take:
            self._take(lease, partitions, plan.target, steal=False)
        self._move(plan.steal, {lease.partition_id: lease for lease in leases}, partitions, plan)

    def _move(
        self,
        candidate: Lease | None,
        listed: Mapping[str, Lease],
        partitions: Mapping[str, PartitionInfo],
        plan: TakePlan,
    ) -> None:
        """Ask for ``candidate`` (graceful handoff), keep waiting for a pending request, or
        steal once the request is older than handoff_timeout_ms."""
        now = self.clock.now_ms()
        timeout_ms = self.settings.effective_handoff_timeout_ms
        if self._asked is not None:
            partition_id, asked_at = self._asked
            lease = listed.get(partition_id)
            pending = (
                lease is not None
                and lease.owner not in (None, self.worker_id)
                and lease.is_live(now)
                and lease.transfer_requested_by == self.worker_id
            )
            if not pending:
                self._asked = None  # handed over (taken above), or settled otherwise
            elif candidate is None:
                self._asked = None  # balanced meanwhile: we do not need it any more
                self.leases.withdraw_transfer(self.group, partition_id, self.worker_id)
                return
            elif now - asked_at < timeout_ms:
                return
            else:
                assert lease is not None
                self._asked = None
                logger.warning(
                    "%s: %s did not hand over %s/%s within %d ms of our request: stealing it",
                    self.worker_id,
                    lease.owner,
                    self.group,
                    partition_id,
                    timeout_ms,
                )
                self._take(lease, partitions, plan.target, steal=True)
                return
        if candidate is None:
            return
        if not self.settings.graceful_handoff:
            self._take(candidate, partitions, plan.target, steal=True)
            return
        asked = self.leases.request_transfer(candidate, self.worker_id, stale_after_ms=timeout_ms)
        if asked is None:
            logger.debug("%s: could not ask for %s (changed meanwhile)", self.worker_id, candidate)
            return
        self._asked = (candidate.partition_id, now)
        self.stats.requested += 1
        logger.info(
            "%s: asked %s to hand over %s/%s (it holds more than the target of %d)",
            self.worker_id,
            candidate.owner,
            self.group,
            candidate.partition_id,
            plan.target,
        )

    def _settle_request(self) -> None:
        """Leaving: take back our pending request, so no lease is handed to a worker that
        is gone; if the owner handed it over first, release it at once (it was not
        processed here, so its checkpoint stands) instead of leaving it to expire."""
        if self._asked is None:
            return
        partition_id, _ = self._asked
        self._asked = None
        try:
            if self.leases.withdraw_transfer(self.group, partition_id, self.worker_id):
                return
            lease = self.tables.get_lease(self.group, partition_id)
            if (
                lease is not None
                and lease.owner == self.worker_id
                and partition_id not in self._consumers
            ):
                self.leases.release(lease)  # fenced on the counter it was handed over with
                logger.info(
                    "%s: released %s/%s, handed over to us while we were leaving",
                    self.worker_id,
                    self.group,
                    partition_id,
                )
        except LeaseLostError:
            pass  # written meanwhile (taken by another worker): nothing of ours to settle
        except (BotoCoreError, ClientError) as exc:
            logger.warning("%s: withdrawing our handoff request failed: %s", self.worker_id, exc)

    def _take(
        self, seen: Lease, partitions: Mapping[str, PartitionInfo], target: int, *, steal: bool
    ) -> None:
        try:
            lease = self.leases.take(seen, self.worker_id)
        except LeaseLostError:
            logger.debug("%s: %s was taken by another worker first", self.worker_id, seen)
            return
        if steal:
            self.stats.stolen += 1
            logger.info(
                "%s: stole lease %s/%s from %s (it held more than the target of %d)",
                self.worker_id,
                self.group,
                seen.partition_id,
                seen.owner,
                target,
            )
        elif seen.owner == self.worker_id and seen.is_live(self.clock.now_ms()):
            self.stats.received += 1
            logger.info(
                "%s: took lease %s/%s (handed over to us) at checkpoint %s",
                self.worker_id,
                self.group,
                seen.partition_id,
                lease.checkpoint,
            )
        else:
            self.stats.taken += 1
            how = "unowned" if seen.owner is None else f"expired, was {seen.owner}"
            logger.info(
                "%s: took lease %s/%s (%s) at checkpoint %s",
                self.worker_id,
                self.group,
                seen.partition_id,
                how,
                lease.checkpoint,
            )
        holder = LeaseHolder(self.leases, lease, self.settings.effective_handoff_timeout_ms)
        if lease.checkpoint is not None and not lease.checkpoint.isdigit():
            logger.error(
                "%s: %s/%s has checkpoint %r, not a log seq: not consuming it",
                self.worker_id,
                self.group,
                lease.partition_id,
                lease.checkpoint,
            )
            holder.release()
            self._failures[lease.partition_id] = (1, self.clock.now_ms() + 3_600_000)
            return
        try:
            start = self._start_seq(holder, partitions.get(lease.partition_id))
        except CheckpointLeaseLostError:
            return
        consumer = PartitionConsumer(
            self.worker_id,
            holder,
            self.factory(lease.partition_id),
            self.reader,
            start,
            self.settings,
            self.clock,
        )
        self._consumers[lease.partition_id] = consumer

    def _start_seq(self, holder: LeaseHolder, partition: PartitionInfo | None) -> int:
        """The checkpoint, else 0: a partition the group had at its creation got its start
        position then (shardlog/consumer/creation.py); one without appeared later."""
        checkpoint = holder.lease.checkpoint
        return int(checkpoint) if checkpoint is not None else 0

    def _group_record(self, leases: list[Lease]) -> GroupRecord:
        """The group's creation record (read once): created now when the group is new."""
        if self._group is not None:
            return self._group
        record = read_group(self.clients, self.config.consumers_table, self.group)
        if record is None and leases:  # a group from before creation records: as it is
            record = GroupRecord(self.group, WORKERS, 0, "", positioned=False)
        if record is None:
            record = self._creator.create(
                self.group,
                WORKERS,
                self.settings.start_position,
                self.clock.now_ms(),
                strict=False,
            )
        if record.start and record.start != self.settings.start_position.describe():
            logger.info(
                "%s: group %s was created at %s; this worker's start position %s is not used",
                self.worker_id,
                self.group,
                record.start,
                self.settings.start_position.describe(),
            )
        self._group = record
        return record

    def _close_pool(self) -> None:
        self._closed = True
        self._pool.shutdown(wait=True)

    def __enter__(self) -> Worker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
