"""A model of a Lambda consumer group under wakes, lost wakes, runner crashes, zombies,
timeouts and a reshard: nothing is skipped, redeliveries only repeat from a checkpoint,
each key keeps its produce order, and checkpoints never go backwards. The same model at
parallelization factor 4 (``LambdaConsumerLanesModel``): the same, lane by lane, with
crashes and zombies between the lanes' checkpoints."""

from __future__ import annotations

import threading
from collections import defaultdict
from typing import Any

import hypothesis.strategies as st
from hypothesis import HealthCheck, settings
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from shardlog import constants as C
from shardlog.clock import ManualClock
from shardlog.lambda_consumer.lanes import lane_of
from shardlog.lambda_consumer.runner import Outcome, Runner
from shardlog.tables import Tables
from tests.support.aws import AwsEnv, make_env
from tests.support.factories import append, end_partition, incoming_records, register_partition
from tests.support.lambda_consumers import Recorder, Seen, runner_for
from tests.support.schedules import Tally

ROOT, LEFT, RIGHT = "p0", "c1", "c2"
GROUP = "model"
TALLY = Tally()
# What every run must reach (scripts/soak.py prints the same counts for longer runs).
MUST_REACH = ("crash", str(Outcome.LOST), str(Outcome.STOPPED), str(Outcome.NOT_READY), "split")
LANES_MUST_REACH = (*MUST_REACH, "crash between lanes", "zombie between lanes")


class RunnerKilled(BaseException):
    """The runner's process dies mid-run."""


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


class LambdaConsumerModel(RuleBasedStateMachine):
    endpoint_url: str = ""
    FACTOR = 1
    KEYS: tuple[str, ...] = ("a", "b", "c")
    CHILD_KEYS: dict[str, tuple[str, ...]] = {LEFT: ("a",), RIGHT: ("b",)}  # after the split

    def __init__(self) -> None:
        super().__init__()
        self.lock = threading.Lock()  # the function is called from the runners' lanes
        self.lane_seqs: dict[tuple[str, int], list[int]] = defaultdict(list)
        self.run_from = 0  # the recorder's calls before the current run
        self.aws: AwsEnv = make_env(self.endpoint_url, 1)
        self.clock = ManualClock()
        self.produced: dict[str, int] = defaultdict(int)  # key -> records produced
        self.committed: dict[str, int] = defaultdict(int)  # partition -> head
        self.counters: dict[str, int] = defaultdict(int)
        self.split = False
        self.ended: set[str] = set()
        self.recorder = Recorder(self._answer)
        self.runners = [
            runner_for(
                self.aws,
                self.clock,
                self.recorder,
                GROUP,
                batch_size=b,
                parallelization_factor=self.FACTOR,
            )[0]
            for b in (2, 5)
        ]
        self.killers = [Killer(r) for r in self.runners]
        self.zombie_pending = False
        self.max_checkpoint: dict[str, int] = defaultdict(int)
        self.runs = 0
        register_partition(self.aws, ROOT, ())
        TALLY.add("schedules")

    # --- the function ----------------------------------------------------------------------
    def _answer(self, batch: list[Seen]) -> Any:
        with self.lock:
            zombie, self.zombie_pending = self.zombie_pending, False
        if zombie:  # this invocation outlives its runner's lease
            if len(self._lanes_invoked()) > 1 or self._lanes_waiting(batch[0].partition_id) > 1:
                TALLY.add("zombie between lanes")
            self.killers[0].thawed.clear()  # the whole runner is frozen, not this lane only
            try:
                self.clock.advance(self.runners[0].consumer.lease_ms + 1)
                report = self.runners[1].run(
                    batch[0].partition_id, request_id="successor", remaining_ms=lambda: 900_000
                )
            finally:
                self.killers[0].thawed.set()
            TALLY.add(f"successor {report.outcome}")
        return None

    # --- the world ---------------------------------------------------------------------------
    def _open(self) -> list[str]:
        return [LEFT, RIGHT] if self.split else [ROOT]

    @rule(count=st.integers(1, 6), which=st.integers(0, 1))
    def commit(self, count: int, which: int) -> None:
        open_partitions = self._open()
        partition = open_partitions[which % len(open_partitions)]
        records = []
        for i, record in enumerate(incoming_records(count, keys=self.KEYS)):
            if self.split:
                child_keys = self.CHILD_KEYS[partition]
                key = child_keys[i % len(child_keys)]
            else:
                key = record.partition_key
            self.lane_seqs[partition, lane_of(key, self.FACTOR)].append(
                self.committed[partition] + i
            )
            n = self.counters[key]
            self.counters[key] += 1
            records.append(
                type(record)(
                    key, f"{key}:{n}".encode(), record.kinesis_sequence_number, record.arrival_ms
                )
            )
        append(self.aws, partition, records, segment_max_records=3)
        self.committed[partition] += count

    @precondition(lambda self: not self.split)
    @rule()
    def reshard(self) -> None:
        for child in (LEFT, RIGHT):
            register_partition(self.aws, child, (ROOT,))
        self.split = True
        TALLY.add("split")

    @precondition(lambda self: self.split and ROOT not in self.ended)
    @rule()
    def end_parent(self) -> None:
        end_partition(self.aws, ROOT)
        self.ended.add(ROOT)

    # --- runners -----------------------------------------------------------------------------
    def _run(self, partition: str, runner_index: int, time_left_ms: tuple[int, ...] = ()) -> None:
        """One wake; ``time_left_ms``: what the runner's first checks of its remaining time
        answer (then 0), else plenty."""
        runner = self.runners[runner_index]
        answers = iter(time_left_ms)

        def remaining_ms() -> int:
            return next(answers, 0) if time_left_ms else 900_000

        self.run_from = len(self.recorder.calls)
        try:
            report = runner.run(partition, request_id=f"r{self.runs}", remaining_ms=remaining_ms)
        except RunnerKilled:
            TALLY.add("crash")
            if len(self._lanes_invoked()) > 1:
                TALLY.add("crash between lanes")
            return
        finally:
            self.runs += 1
            TALLY.add("runs")
        TALLY.add(str(report.outcome))

    @rule(which=st.sampled_from([ROOT, LEFT, RIGHT]), runner=st.integers(0, 1))
    def wake(self, which: str, runner: int) -> None:
        self._run(which, runner)

    @rule(count=st.integers(1, 6), calls=st.integers(1, 12))
    def crash_mid_run(self, count: int, calls: int) -> None:
        partition = self._open()[0]
        self.commit(count, 0)
        self.killers[0].calls_left = calls
        self._run(partition, 0)
        self.killers[0].calls_left = None

    @rule(count=st.integers(1, 6))
    def zombie(self, count: int) -> None:
        """A runner whose invocation outlives its lease while a successor takes over."""
        partition = self._open()[-1]
        self.commit(count, 1)
        self.clock.advance(self.runners[0].consumer.lease_ms + 1)  # no live lease in the way
        self.zombie_pending = True
        self._run(partition, 0)
        self.zombie_pending = False

    @rule(count=st.integers(3, 8))
    def runner_short_of_time(self, count: int) -> None:
        partition = self._open()[0]
        self.commit(count, 0)
        self.clock.advance(self.runners[0].consumer.lease_ms + 1)
        self._run(partition, 1, time_left_ms=(70_000,))  # one invocation's worth, then out

    @rule(ms=st.sampled_from([1_000, 100_000]))
    def time_passes(self, ms: int) -> None:
        self.clock.advance(ms)

    def _lanes_invoked(self) -> set[int]:
        """The lanes the current run invoked so far."""
        with self.recorder.lock:
            calls = self.recorder.calls[self.run_from :]
        return {lane_of(batch[0].key, self.FACTOR) for batch in calls}

    def _lanes_waiting(self, partition: str) -> int:
        delivered = set(self._deliveries(partition))
        return sum(
            1
            for (p, _), seqs in self.lane_seqs.items()
            if p == partition and not delivered >= set(seqs)
        )

    # --- what must always hold ---------------------------------------------------------------
    def _deliveries(self, partition: str) -> list[int]:
        return self.recorder.seqs(partition)

    @invariant()
    def nothing_is_skipped_and_redeliveries_repeat_from_a_checkpoint(self) -> None:
        """Lane by lane (one lane at factor 1): a delivery is at most one record past the
        furthest delivered before it in its lane, in the lane's log order."""
        TALLY.add("steps")  # invariants run once per schedule, then after every step
        for (partition, lane), seqs in self.lane_seqs.items():
            place = {seq: i for i, seq in enumerate(seqs)}
            seen = -1
            for seq in self._deliveries(partition):
                if seq not in place:
                    continue
                assert place[seq] <= seen + 1, (
                    f"{partition} lane {lane}: delivered {seq} after at most "
                    f"{seqs[seen] if seen >= 0 else None}: a skip"
                )
                seen = max(seen, place[seq])

    @invariant()
    def checkpoints_never_go_backwards(self) -> None:
        tables = Tables(self.aws.clients, self.aws.config.tables)
        for lease in tables.list_leases(GROUP):
            value = lease.checkpoint
            position = 10**9 if value == C.SHARD_END else int(value or 0)
            assert position >= self.max_checkpoint[lease.partition_id]
            self.max_checkpoint[lease.partition_id] = position

    @invariant()
    def children_wait_for_their_parent(self) -> None:
        if self._deliveries(LEFT) or self._deliveries(RIGHT):
            assert ROOT in self.ended
            assert set(self._deliveries(ROOT)) >= set(range(self.committed[ROOT]))

    def teardown(self) -> None:
        # Drain: time passes (leases of crashed runners expire) and every partition is woken
        # until nothing is left; then every committed record was delivered, each key in order.
        self.clock.advance(self.runners[0].consumer.lease_ms + 1)
        if self.split and ROOT not in self.ended:
            end_partition(self.aws, ROOT)
            self.ended.add(ROOT)
        for _ in range(4):  # each round wakes every partition; stop once all is delivered
            for partition in (ROOT, LEFT, RIGHT):
                self._run(partition, 1)
            if all(
                set(self._deliveries(p)) >= set(range(self.committed[p]))
                for p in (ROOT, LEFT, RIGHT)
            ):
                break
        for partition in (ROOT, LEFT, RIGHT):
            assert set(self._deliveries(partition)) == set(range(self.committed[partition])), (
                partition
            )
        first_seen: dict[str, list[int]] = defaultdict(list)
        delivered: set[tuple[str, int]] = set()
        for batch in self.recorder.calls:
            for s in batch:
                if (s.partition_id, s.seq) not in delivered:
                    delivered.add((s.partition_id, s.seq))
                    first_seen[s.key].append(int(s.data.decode().split(":")[1]))
        for key, numbers in first_seen.items():
            assert numbers == sorted(numbers), f"key {key} out of produce order: {numbers}"


class LambdaConsumerLanesModel(LambdaConsumerModel):
    """Factor 4: the root's keys in three lanes, each child's in two."""

    FACTOR = 4
    KEYS = ("a", "e", "b", "d")  # lanes 1, 2, 3, 1
    CHILD_KEYS = {LEFT: ("a", "e"), RIGHT: ("b", "d")}


def _run(
    machine: type[LambdaConsumerModel],
    endpoint_url: str,
    examples: int,
    must_reach: tuple[str, ...],
) -> None:
    machine.endpoint_url = endpoint_url
    TALLY.reset()
    run = machine.TestCase
    run.settings = settings(
        max_examples=examples,
        stateful_step_count=16,
        deadline=None,
        derandomize=True,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )
    run().runTest()
    # The model reaches the dangerous schedules, not only the happy path.
    assert not TALLY.missing(must_reach), f"never reached {TALLY.missing(must_reach)}: {TALLY}"
    print(f"{machine.__name__}: {dict(TALLY.counts)}")


def test_lambda_consumer_model(endpoint_url: str) -> None:
    _run(LambdaConsumerModel, endpoint_url, 20, MUST_REACH)


def test_lambda_consumer_lanes_model(endpoint_url: str) -> None:
    _run(LambdaConsumerLanesModel, endpoint_url, 8, LANES_MUST_REACH)
