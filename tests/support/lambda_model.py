"""The world the Lambda consumer models share (tests/functional/lambda_consumer/test_model.py,
test_seek_model.py): one group with two runners of one recording function, over a root
partition that splits once into two children.

- Records are numbered per key (data ``<key>:<n>``, n the key's produce order); before the
  split ``KEYS`` go to the root, after it each child gets its ``CHILD_KEYS``.
- ``reshard`` registers both children (the root stays open and may still be committed to
  until ``end_parent``); the drain ends it.
- ``wake`` runs one runner on one partition; a run killed by a ``Killer`` (the runner's
  process dies before its n-th AWS call, its lease left live) counts as a ``crash``; a
  frozen runner (a zombie) waits until the model thaws it.
- A machine names its module's ``Tally`` (``tally``): scripts/soak.py reads that one.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import Any, ClassVar

import hypothesis.strategies as st
from hypothesis.stateful import RuleBasedStateMachine, precondition, rule

from shardlog.clock import ManualClock
from shardlog.format import IncomingRecord
from shardlog.lambda_consumer.runner import Outcome, Runner
from tests.support.aws import AwsEnv, make_env
from tests.support.factories import (
    BASE_ARRIVAL_MS,
    append,
    end_partition,
    incoming_records,
    register_partition,
)
from tests.support.lambda_consumers import (
    Recorder,
    RunnerKilled,
    Seen,
    plenty_of_time,
    runner_for,
)
from tests.support.schedules import Tally

ROOT, LEFT, RIGHT = "p0", "c1", "c2"
PARTITIONS = (ROOT, LEFT, RIGHT)


class Killer:
    """Kills a runner just before its n-th AWS call, when armed."""

    def __init__(self, runner: Runner) -> None:
        self.calls_left: int | None = None
        # Cleared while the runner is frozen (a zombie): its calls from any thread wait.
        self.thawed = threading.Event()
        self.thawed.set()
        runner.clients.add_hook("before-call", self._before_call)

    def _before_call(self, **_: Any) -> None:
        self.thawed.wait(60)  # bounded: the model thaws it once the successor has run
        if self.calls_left is None:
            return
        self.calls_left -= 1
        if self.calls_left <= 0:
            self.calls_left = None
            raise RunnerKilled


class SplittingGroupModel(RuleBasedStateMachine):
    """The shared world and its rules; a subclass adds its commit rule (its own sizes), its
    faults and what must hold."""

    endpoint_url: str = ""
    tally: ClassVar[Tally]
    GROUP: ClassVar[str]
    BATCH_SIZES: ClassVar[tuple[int, int]]  # of runner 0 and runner 1
    FACTOR = 1  # the runners' parallelization factor
    SEGMENT_MAX_RECORDS = 3
    KEYS: tuple[str, ...] = ("a", "b")
    CHILD_KEYS: dict[str, tuple[str, ...]] = {LEFT: ("a",), RIGHT: ("b",)}  # after the split

    def __init__(self) -> None:
        super().__init__()
        self.aws: AwsEnv = make_env(self.endpoint_url, 1)
        self.clock = ManualClock()
        self.committed: dict[str, int] = defaultdict(int)  # partition -> head
        self.counters: dict[str, int] = defaultdict(int)  # key -> records produced
        self.split = False
        self.ended: set[str] = set()
        self.recorder = Recorder(self._answer)
        self.runners = [
            runner_for(
                self.aws,
                self.clock,
                self.recorder,
                self.GROUP,
                batch_size=b,
                parallelization_factor=self.FACTOR,
            )[0]
            for b in self.BATCH_SIZES
        ]
        self.runs = 0
        self.run_from = 0  # the recorder's calls before the current run
        register_partition(self.aws, ROOT, ())
        self.tally.add("schedules")

    # --- the function ----------------------------------------------------------------------
    def _answer(self, batch: list[Seen]) -> Any:
        """What the recording function answers ``batch`` (and what it does meanwhile)."""
        raise NotImplementedError

    # --- the world ---------------------------------------------------------------------------
    def _open(self) -> list[str]:
        return [LEFT, RIGHT] if self.split else [ROOT]

    def _commit(
        self, count: int, which: int, arrival_ms: int = BASE_ARRIVAL_MS
    ) -> list[tuple[str, int, str]]:
        """Commit ``count`` records (arriving from ``arrival_ms``, 1 ms apart) to the
        ``which``-th open partition (modulo); the (partition, seq, key) of each."""
        open_partitions = self._open()
        partition = open_partitions[which % len(open_partitions)]
        records, placed = [], []
        for i, record in enumerate(incoming_records(count, keys=self.KEYS, arrival_ms=arrival_ms)):
            key = record.partition_key
            if self.split:
                child_keys = self.CHILD_KEYS[partition]
                key = child_keys[i % len(child_keys)]
            n = self.counters[key]
            self.counters[key] += 1
            records.append(
                IncomingRecord(
                    key, f"{key}:{n}".encode(), record.kinesis_sequence_number, record.arrival_ms
                )
            )
            placed.append((partition, self.committed[partition] + i, key))
        append(self.aws, partition, records, segment_max_records=self.SEGMENT_MAX_RECORDS)
        self.committed[partition] += count
        return placed

    @precondition(lambda self: not self.split)
    @rule()
    def reshard(self) -> None:
        for child in (LEFT, RIGHT):
            register_partition(self.aws, child, (ROOT,))
        self.split = True
        self.tally.add("split")

    @precondition(lambda self: self.split and ROOT not in self.ended)
    @rule()
    def end_parent(self) -> None:
        end_partition(self.aws, ROOT)
        self.ended.add(ROOT)

    @rule(ms=st.sampled_from([1_000, 100_000]))
    def time_passes(self, ms: int) -> None:
        self.clock.advance(ms)

    # --- runners -----------------------------------------------------------------------------
    def _run(
        self, partition: str, runner: int, remaining_ms: Callable[[], int] = plenty_of_time
    ) -> Outcome | None:
        """One wake of runner ``runner`` for ``partition``: its outcome, None when killed."""
        self.run_from = len(self.recorder.calls)
        try:
            report = self.runners[runner].run(
                partition, request_id=f"r{self.runs}", remaining_ms=remaining_ms
            )
        except RunnerKilled:
            self.tally.add("crash")
            self._killed()
            return None
        finally:
            self.runs += 1
            self.tally.add("runs")
        self.tally.add(str(report.outcome))
        return report.outcome

    def _killed(self) -> None:
        """A run was killed (counted as a crash); a subclass counts more of it."""

    @rule(which=st.sampled_from(PARTITIONS), runner=st.integers(0, 1))
    def wake(self, which: str, runner: int) -> None:
        self._run(which, runner)

    # --- the end -------------------------------------------------------------------------------
    def _drain(self, done: Callable[[], bool] = lambda: False) -> None:
        """Time passes (leases of crashed runners expire), the parent ends, and runner 1
        wakes every partition, four rounds (parents before children) or until ``done``."""
        self.clock.advance(self.runners[0].consumer.lease_ms + 1)
        if self.split and ROOT not in self.ended:
            end_partition(self.aws, ROOT)
            self.ended.add(ROOT)
        for _ in range(4):
            for partition in PARTITIONS:
                self._run(partition, 1)
            if done():
                return


def assert_each_key_in_produce_order(deliveries: Iterable[Seen]) -> None:
    """The first delivery of each record (redeliveries repeat, they do not count) has each
    key's records in produce order (data ``<key>:<n>``)."""
    first: dict[str, list[int]] = defaultdict(list)
    once: set[tuple[str, int]] = set()
    for s in deliveries:
        if (s.partition_id, s.seq) not in once:
            once.add((s.partition_id, s.seq))
            first[s.key].append(int(s.data.decode().split(":")[1]))
    for key, numbers in first.items():
        assert numbers == sorted(numbers), f"key {key} out of produce order: {numbers}"
