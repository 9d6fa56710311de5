"""A model of group seeks on a Lambda consumer group, among commits, wakes, runner crashes
(leases left live), a seek landing mid-invocation, a split and its parent's end: after each
seek, every delivery starts at the seek's position and skips nothing, children wait for a
parent the seek re-opened, and at the end every record from the last seek's positions on is
delivered, each key in produce order."""

from __future__ import annotations

import math
from typing import Any

import hypothesis.strategies as st
from hypothesis import HealthCheck, settings
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from shardlog import constants as C
from shardlog.clock import ManualClock
from shardlog.consumer.positions import StartPosition
from shardlog.consumer.seek import SeekPlan
from shardlog.lambda_consumer.runner import Outcome
from shardlog.tables import Tables
from tests.functional.lambda_consumer.test_model import Killer, RunnerKilled
from tests.support.aws import AwsEnv, make_env
from tests.support.factories import append, end_partition, incoming_records, register_partition
from tests.support.lambda_consumers import Recorder, Seen, runner_for
from tests.support.schedules import Tally
from tests.support.seek import group_seek

ROOT, LEFT, RIGHT = "p0", "c1", "c2"
PARTITIONS = (ROOT, LEFT, RIGHT)
KEYS = ("a", "b")
GROUP = "seek-model"
TALLY = Tally()
KINDS = ("TRIM_HORIZON", "LATEST", "AT_TIMESTAMP", "AT_SEQUENCE")
# What every run must reach (scripts/soak.py prints the same counts for longer runs).
MUST_REACH = (
    *(f"seek {kind}" for kind in KINDS),
    "seek mid-invocation",
    "seek over a live runner lease",
    "parent re-opened",
    "crash",
    "split",
)


class SeekModel(RuleBasedStateMachine):
    endpoint_url: str = ""

    def __init__(self) -> None:
        super().__init__()
        self.aws: AwsEnv = make_env(self.endpoint_url, 1)
        self.clock = ManualClock()
        self.counters: dict[str, int] = dict.fromkeys(KEYS, 0)
        self.committed: dict[str, int] = dict.fromkeys(PARTITIONS, 0)
        self.split = False
        self.ended: set[str] = set()
        self.recorder = Recorder(self._answer)
        self.runners = [
            runner_for(self.aws, self.clock, self.recorder, GROUP, batch_size=b)[0] for b in (2, 3)
        ]
        self.killer = Killer(self.runners[0])
        self.tables = Tables(self.aws.clients, self.aws.config.tables)
        self.seek_in_answer: StartPosition | None = None
        # The last seek: where each partition starts (None: SHARD_END, nothing to deliver),
        # and how many deliveries there were before it returned.
        self.starts: dict[str, int | None] = dict.fromkeys(PARTITIONS, 0)
        self.mark = 0
        self.runs = 0
        register_partition(self.aws, ROOT, ())
        TALLY.add("schedules")

    # --- the function ----------------------------------------------------------------------
    def _answer(self, _batch: list[Seen]) -> Any:
        if self.seek_in_answer is not None:  # the seek lands while this batch is invoked
            position, self.seek_in_answer = self.seek_in_answer, None
            self._seek(position)
            TALLY.add("seek mid-invocation")
        return {"batchItemFailures": []}

    # --- the world ---------------------------------------------------------------------------
    def _open(self) -> list[str]:
        return [LEFT, RIGHT] if self.split else [ROOT]

    @rule(count=st.integers(1, 5), which=st.integers(0, 1))
    def commit(self, count: int, which: int) -> None:
        partition = self._open()[which % len(self._open())]
        records = []
        self.clock.advance(10)  # arrivals never go back: AT_TIMESTAMP can find its record
        for record in incoming_records(count, keys=KEYS, arrival_ms=self.clock.now_ms()):
            key = record.partition_key if not self.split else KEYS[PARTITIONS.index(partition) - 1]
            n = self.counters[key]
            self.counters[key] += 1
            records.append(
                type(record)(
                    key, f"{key}:{n}".encode(), record.kinesis_sequence_number, record.arrival_ms
                )
            )
        append(self.aws, partition, records, segment_max_records=2)
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

    @rule(ms=st.sampled_from([1_000, 100_000]))
    def time_passes(self, ms: int) -> None:
        self.clock.advance(ms)

    # --- runners -----------------------------------------------------------------------------
    def _run(self, partition: str, runner: int) -> Outcome | None:
        try:
            report = self.runners[runner].run(
                partition, request_id=f"r{self.runs}", remaining_ms=lambda: 900_000
            )
        except RunnerKilled:
            TALLY.add("crash")
            return None
        finally:
            self.runs += 1
        TALLY.add(str(report.outcome))
        return report.outcome

    @rule(which=st.sampled_from(PARTITIONS), runner=st.integers(0, 1))
    def wake(self, which: str, runner: int) -> None:
        self._run(which, runner)

    @rule(calls=st.integers(1, 10))
    def crash_mid_run(self, calls: int) -> None:
        self.killer.calls_left = calls
        self._run(self._open()[0], 0)
        self.killer.calls_left = None

    # --- seeks -------------------------------------------------------------------------------
    def _position(self, kind: str, seq: int, back_ms: int) -> StartPosition:
        if kind == "LATEST":
            return StartPosition.latest()
        if kind == "AT_TIMESTAMP":
            return StartPosition.at_timestamp(self.clock.now_ms() - back_ms)
        if kind == "AT_SEQUENCE":
            return StartPosition.at_sequence({ROOT: min(seq, self.committed[ROOT])})
        return StartPosition.trim_horizon()

    def _seek(self, position: StartPosition) -> SeekPlan:
        now = self.clock.now_ms()
        if any(lease.is_live(now) for lease in self.tables.list_leases(GROUP)):
            TALLY.add("seek over a live runner lease")  # a crashed runner's, or one mid-run
        plan: SeekPlan = group_seek(self.aws, self.clock).seek(GROUP, position, "model")
        TALLY.add(f"seek {position.kind}")
        for move in plan.moves:
            start = None if move.new == C.SHARD_END else int(move.new)
            if position.kind == "TRIM_HORIZON":
                assert start in (0, None), move
            if position.kind == "AT_SEQUENCE" and move.partition_id == ROOT:
                assert start == position.sequences[ROOT] or move.new == C.SHARD_END, move
            if move.partition_id == ROOT and move.old == C.SHARD_END and start is not None:
                TALLY.add("parent re-opened")
            self.starts[move.partition_id] = start
        moved = {move.partition_id for move in plan.moves}
        leases = {lease.partition_id: lease for lease in self.tables.list_leases(GROUP)}
        for partition in set(PARTITIONS) - moved:  # not moved: it goes on from its checkpoint
            checkpoint = leases[partition].checkpoint if partition in leases else None
            self.starts[partition] = None if checkpoint == C.SHARD_END else int(checkpoint or 0)
        self.mark = len(self._delivered())
        return plan

    @rule(kind=st.sampled_from(KINDS), seq=st.integers(0, 12), back_ms=st.integers(0, 400))
    def seek(self, kind: str, seq: int, back_ms: int) -> None:
        self._seek(self._position(kind, seq, back_ms))

    @rule(kind=st.sampled_from(KINDS), seq=st.integers(0, 12), count=st.integers(1, 4))
    def seek_mid_invocation(self, kind: str, seq: int, count: int) -> None:
        self.commit(count, 0)
        self.seek_in_answer = self._position(kind, seq, 50)
        partition = self._open()[0]
        if self.split and ROOT not in self.ended:
            partition = ROOT  # the children wait; the parent has records to invoke
        outcome = self._run(partition, 1)
        if self.seek_in_answer is None:  # it was invoked: the runner's next write was refused
            assert outcome is Outcome.LOST, outcome
        self.seek_in_answer = None

    # --- what must always hold ---------------------------------------------------------------
    def _delivered(self) -> list[tuple[str, int, str, int]]:
        """(partition, seq, key, number of the key's record) of every invoked record."""
        return [
            (s.partition_id, s.seq, s.key, int(s.data.decode().split(":")[1]))
            for batch in self.recorder.calls
            for s in batch
        ]

    @invariant()
    def since_the_last_seek_nothing_before_its_position_nor_skipped(self) -> None:
        TALLY.add("steps")
        seen = {
            p: (start if start is not None else math.inf) - 1 for p, start in self.starts.items()
        }
        for partition, seq, _, _ in self._delivered()[self.mark :]:
            start = self.starts[partition]
            assert start is not None, f"{partition}: delivered {seq} after a seek to its end"
            assert seq >= start, f"{partition}: delivered {seq}, before the seek's {start}"
            assert seq <= seen[partition] + 1, f"{partition}: {seq} after {seen[partition]}: a skip"
            seen[partition] = max(seen[partition], seq)
            if partition != ROOT:
                assert ROOT in self.ended, f"{partition} delivered before its parent ended"
                root_start = self.starts[ROOT]
                if root_start is not None and root_start < self.committed[ROOT]:
                    assert seen[ROOT] >= self.committed[ROOT] - 1, (
                        f"{partition} delivered before its re-opened parent was"
                    )

    def teardown(self) -> None:
        """Drain; then every record from the last seek's positions on was delivered since
        that seek, each key in produce order."""
        self.clock.advance(self.runners[0].consumer.lease_ms + 1)
        if self.split and ROOT not in self.ended:
            end_partition(self.aws, ROOT)
            self.ended.add(ROOT)
        for _ in range(4):
            for partition in PARTITIONS:
                self._run(partition, 1)
        self.since_the_last_seek_nothing_before_its_position_nor_skipped()
        since = self._delivered()[self.mark :]
        for partition, start in self.starts.items():
            got = {seq for p, seq, _, _ in since if p == partition}
            if start is not None:
                assert got >= set(range(start, self.committed[partition])), partition
        first: dict[str, list[int]] = {key: [] for key in KEYS}
        once: set[tuple[str, int]] = set()
        for partition, seq, key, number in since:
            if (partition, seq) not in once:
                once.add((partition, seq))
                first[key].append(number)
        for key, numbers in first.items():
            assert numbers == sorted(numbers), f"key {key} out of produce order: {numbers}"


def test_seek_model(endpoint_url: str) -> None:
    SeekModel.endpoint_url = endpoint_url
    TALLY.reset()
    run = SeekModel.TestCase
    run.settings = settings(
        max_examples=10,
        stateful_step_count=16,
        deadline=None,
        derandomize=True,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )
    run().runTest()
    assert not TALLY.missing(MUST_REACH), f"never reached {TALLY.missing(MUST_REACH)}: {TALLY}"
    print(f"seek model: {dict(TALLY.counts)}")
