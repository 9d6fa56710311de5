"""Model-based test of consumer groups: workers join, leave gracefully, crash, stall past
their lease and come back, while records are produced and partitions split and merge.

Two groups consume the same log (one checkpoints every batch, one every other batch).
After every step, for each group and key, no record is delivered before every earlier
record of its key was (per-key order across reshards, duplicates allowed only as
replays). At the end every record has been delivered to each group: nothing skipped.

The dangerous schedules are reached on purpose, and counted (``TALLY``; the test asserts
each kind happened): a worker paused between any two of its AWS calls, or just before a
take, a checkpoint or a renewal, while its leases expire and the other workers of its
group take them over. Its take, checkpoint or renewal is then refused by the lease's
fence (counted from DynamoDB's answers). scripts/soak.py runs this machine for longer.
"""

from __future__ import annotations

import itertools
import threading
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from shardlog import constants as C
from shardlog.clock import ManualClock
from shardlog.consumer import Checkpointer, ConsumerSettings, RecordProcessor, Worker
from shardlog.format import IncomingRecord, LogRecord
from shardlog.local.kinesis_fidelity import SEQUENCE_BASE
from shardlog.tables import Tables
from tests.support.aws import AwsEnv, make_env
from tests.support.factories import append, end_partition, register_partition
from tests.support.schedules import FenceCounter, Pause, Tally, run_model

KEYS = [f"k{i}" for i in range(6)]
GROUPS = {"every-batch": 1, "every-other-batch": 2}  # group -> checkpoint every n batches
SETTINGS = ConsumerSettings(
    lease_duration_ms=6_000,
    renew_interval_ms=2_000,
    take_interval_ms=1,
    idle_poll_interval_ms=0,
    records_per_call=3,
)
TALLY = Tally()
# What every run must reach: each fenced lease write, after a pause mid-cycle.
MUST_REACH = (
    "refused take",
    "refused checkpoint",
    "refused renew",
    "stall before take write",
    "stall before checkpoint write",
    "stall before renew write",
    "stall between calls",
)


@dataclass
class GroupLog:
    """What one group's processors were given, in the order they were given it."""

    delivered: dict[str, set[int]] = field(default_factory=lambda: defaultdict(set))
    violations: list[str] = field(default_factory=list)
    seen: set[tuple[str, int]] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, records: list[LogRecord]) -> None:
        with self.lock:
            for record in records:
                key, number = record.data.decode().split(":")
                values = self.delivered[key]
                if int(number) > len(values):
                    self.violations.append(
                        f"{key}:{number} ({record.partition_id}/{record.seq}) delivered before "
                        f"{key}:{len(values)}"
                    )
                values.add(int(number))
                self.seen.add((record.partition_id, record.seq))


class Recording(RecordProcessor):
    def __init__(self, log: GroupLog, every: int) -> None:
        self.log, self.every, self.batches = log, every, 0

    def process_records(self, records: list[LogRecord], checkpointer: Checkpointer) -> None:
        self.log.add(records)
        self.batches += 1
        if self.batches % self.every == 0:
            checkpointer.checkpoint()


@dataclass
class ModelWorker:
    worker: Worker
    group: str
    pause: Pause
    stalled: bool = False


class ConsumerMachine(RuleBasedStateMachine):
    endpoint_url = ""

    def __init__(self) -> None:
        super().__init__()
        self.aws: AwsEnv = make_env(self.endpoint_url, shard_count=1)
        self.clock = ManualClock()
        self.logs = {group: GroupLog() for group in GROUPS}
        self.workers: list[ModelWorker] = []
        self.names = itertools.count()
        self.kinesis_seq = itertools.count(1)
        self.per_key = dict.fromkeys(KEYS, 0)
        self.open: dict[str, set[str]] = {"p0": set(KEYS[:4]), "q0": set(KEYS[4:])}
        self.partitions: dict[str, int] = {"p0": 0, "q0": 0}  # committed records
        self.phase = 0
        self.fences = FenceCounter()
        for partition_id in self.open:
            register_partition(self.aws, partition_id)
        TALLY.add("schedules")

    @initialize()
    def first_workers(self) -> None:
        for group in GROUPS:
            self.join(group)

    # --- rules ------------------------------------------------------------------------------
    @rule(key=st.sampled_from(KEYS), count=st.integers(1, 5), segment=st.integers(1, 3))
    def produce(self, key: str, count: int, segment: int) -> None:
        partition_id = next(p for p, keys in self.open.items() if key in keys)
        records = []
        for _ in range(count):
            number = self.per_key[key]
            self.per_key[key] += 1
            records.append(
                IncomingRecord(
                    key,
                    f"{key}:{number}".encode(),
                    str(SEQUENCE_BASE + 10 * next(self.kinesis_seq)),
                    1_700_000_000_000,
                )
            )
        append(self.aws, partition_id, records, segment_max_records=segment)
        self.partitions[partition_id] += count

    @precondition(lambda self: len(self.workers) < 5)
    @rule(group=st.sampled_from(sorted(GROUPS)))
    def join(self, group: str) -> None:
        name = f"w{next(self.names)}"
        log, every = self.logs[group], GROUPS[group]
        clients = self.aws.fresh_clients()  # its own "process": a pause stalls only it
        self.fences.attach(clients)
        worker = Worker(
            group,
            config=self.aws.config,
            clients=clients,
            settings=SETTINGS,
            clock=self.clock,
            worker_id=name,
            threads=3,
            factory=lambda _partition_id: Recording(log, every),  # type: ignore[arg-type,return-value]
        )
        self.workers.append(ModelWorker(worker, group, Pause(clients)))

    @precondition(lambda self: self.workers)
    @rule(data=st.data())
    def leave_gracefully(self, data: st.DataObject) -> None:
        model = self.workers.pop(data.draw(st.integers(0, len(self.workers) - 1)))
        model.worker.shutdown()
        TALLY.add("graceful leave")

    @precondition(lambda self: self.workers)
    @rule(data=st.data())
    def crash(self, data: st.DataObject) -> None:
        model = self.workers.pop(data.draw(st.integers(0, len(self.workers) - 1)))
        model.worker.close()
        TALLY.add("crash")

    @precondition(lambda self: self.workers)
    @rule(data=st.data())
    def stall(self, data: st.DataObject) -> None:
        data.draw(st.sampled_from(self.workers)).stalled = True
        TALLY.add("stall between cycles")

    @precondition(lambda self: any(m.stalled for m in self.workers))
    @rule(data=st.data())
    def resume(self, data: st.DataObject) -> None:
        data.draw(st.sampled_from([m for m in self.workers if m.stalled])).stalled = False

    @rule(rounds=st.integers(1, 4), step_ms=st.sampled_from([1, 500, 2_500]))
    def cycle(self, rounds: int, step_ms: int) -> None:
        for _ in range(rounds):
            for model in self.workers:
                if not model.stalled:
                    model.worker.run_once()
            self.clock.advance(step_ms)

    @rule()
    def leases_expire(self) -> None:
        self.clock.advance(SETTINGS.lease_duration_ms)
        TALLY.add("lease expired")

    @precondition(lambda self: any(not m.stalled for m in self.workers))
    @rule(data=st.data(), nth=st.integers(1, 12))
    def stall_between_calls(self, data: st.DataObject, nth: int) -> None:
        """A worker pauses just before the ``nth`` AWS call of its next cycle (listing,
        taking, reading, checkpointing, renewing) past its leases' expiry."""
        model = data.draw(st.sampled_from([m for m in self.workers if not m.stalled]))
        self.paused_cycle(model, lambda: model.pause.before_call(nth, self.successors(model)))

    @precondition(lambda self: any(not m.stalled for m in self.workers))
    @rule(data=st.data(), kind=st.sampled_from(["take", "checkpoint", "renew"]))
    def stall_before_write(self, data: st.DataObject, kind: str) -> None:
        """A worker pauses just before a take, a checkpoint or a renewal past its leases'
        expiry, while the other workers of its group take them: the write is fenced."""
        model = data.draw(st.sampled_from([m for m in self.workers if not m.stalled]))
        if kind == "take":  # every lease is expired: the worker has leases to take
            self.clock.advance(SETTINGS.lease_duration_ms + 1)
        elif kind == "renew":
            self.clock.advance(SETTINGS.renew_interval_ms)
        else:  # records to process, hence to checkpoint
            for keys in list(self.open.values()):
                self.produce(sorted(keys)[0], 2, 3)
        self.paused_cycle(model, lambda: model.pause.before_write(kind, self.successors(model)))

    def paused_cycle(self, model: ModelWorker, arm: Callable[[], None]) -> None:
        arm()
        try:
            model.worker.run_once()
        finally:
            preceded = model.pause.disarm()
        if preceded is not None:
            TALLY.add("stall between calls")
            TALLY.add(f"stall before {preceded}")

    def successors(self, paused: ModelWorker) -> Callable[[], None]:
        """What happens while ``paused`` is paused: its leases expire and the other workers
        of its group (one joins if there is none) run a cycle, taking them over."""

        def act() -> None:
            self.clock.advance(SETTINGS.lease_duration_ms + 1)
            others = [m for m in self.workers if m.group == paused.group and m is not paused]
            if not others:
                self.join(paused.group)
                others = [self.workers[-1]]
            for model in others:
                if not model.stalled:
                    model.worker.run_once()

        return act

    @precondition(lambda self: self.phase == 0)
    @rule()
    def split(self) -> None:
        self.reshard(["p0"], {"c1": set(KEYS[:2]), "c2": set(KEYS[2:4])})
        self.phase = 1
        TALLY.add("split")

    @precondition(lambda self: self.phase == 1)
    @rule()
    def merge(self) -> None:
        self.reshard(["c1", "c2"], {"m3": set(KEYS[:4])})
        self.phase = 2
        TALLY.add("merge")

    def reshard(self, parents: list[str], children: dict[str, set[str]]) -> None:
        for parent in parents:
            del self.open[parent]
            end_partition(self.aws, parent)  # every record of it is in the log already
        for child, keys in children.items():
            register_partition(self.aws, child, tuple(parents))
            self.open[child] = keys
            self.partitions[child] = 0

    # --- checks ----------------------------------------------------------------------------
    @invariant()
    def per_key_order_holds_in_every_group(self) -> None:
        TALLY.add("steps")  # invariants run once per schedule, then after every step
        for group, log in self.logs.items():
            assert not log.violations, f"{group}: {log.violations[:3]}"

    def teardown(self) -> None:
        try:
            self.finish()
        finally:
            for model in self.workers:
                model.worker.close()
            TALLY.merge(self.fences.refused, prefix="refused ")

    def finish(self) -> None:
        for model in self.workers:
            model.stalled = False
        for group in GROUPS:
            if not any(m.group == group for m in self.workers):
                self.join(group)
        self.clock.advance(SETTINGS.lease_duration_ms)
        tables = Tables(self.aws.clients, self.aws.config.tables)
        for _ in range(300):
            if all(self.caught_up(tables, group) for group in GROUPS):
                break
            for model in self.workers:
                model.worker.run_once()
            self.clock.advance(1)
        for group, log in self.logs.items():
            expected = {(p, s) for p, n in self.partitions.items() for s in range(n)}
            assert expected <= log.seen, f"{group} skipped {sorted(expected - log.seen)[:5]}"
            assert self.caught_up(tables, group), f"{group}: an ended partition is not SHARD_END"
            assert not log.violations, log.violations[:3]

    def caught_up(self, tables: Tables, group: str) -> bool:
        """Ended partitions checkpointed SHARD_END, every record delivered."""
        checkpoints = {lease.partition_id: lease.checkpoint for lease in tables.list_leases(group)}
        ended = [p for p in self.partitions if p not in self.open]
        expected = {(p, s) for p, n in self.partitions.items() for s in range(n)}
        return all(checkpoints.get(p) == C.SHARD_END for p in ended) and expected <= (
            self.logs[group].seen
        )


def test_consumer_groups_model(endpoint_url: str) -> None:
    run_model(ConsumerMachine, endpoint_url, TALLY, MUST_REACH, examples=6, steps=30)
