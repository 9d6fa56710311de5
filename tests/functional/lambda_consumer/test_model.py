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
from hypothesis.stateful import invariant, rule

from shardlog import constants as C
from shardlog.lambda_consumer.lanes import lane_of
from shardlog.lambda_consumer.runner import Outcome
from shardlog.tables import Tables
from tests.support.lambda_consumers import Seen, plenty_of_time
from tests.support.lambda_model import (
    LEFT,
    PARTITIONS,
    RIGHT,
    ROOT,
    Killer,
    SplittingGroupModel,
    assert_each_key_in_produce_order,
)
from tests.support.schedules import Tally, run_model

TALLY = Tally()
# What every run must reach (scripts/soak.py prints the same counts for longer runs).
MUST_REACH = ("crash", str(Outcome.LOST), str(Outcome.STOPPED), str(Outcome.NOT_READY), "split")
LANES_MUST_REACH = (*MUST_REACH, "crash between lanes", "zombie between lanes")


class LambdaConsumerModel(SplittingGroupModel):
    tally = TALLY
    GROUP = "model"
    BATCH_SIZES = (2, 5)
    KEYS: tuple[str, ...] = ("a", "b", "c")

    def __init__(self) -> None:
        self.lock = threading.Lock()  # the function is called from the runners' lanes
        self.lane_seqs: dict[tuple[str, int], list[int]] = defaultdict(list)
        self.zombie_pending = False
        super().__init__()
        self.killers = [Killer(r) for r in self.runners]
        self.max_checkpoint: dict[str, int] = defaultdict(int)

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
                    batch[0].partition_id, request_id="successor", remaining_ms=plenty_of_time
                )
            finally:
                self.killers[0].thawed.set()
            TALLY.add(f"successor {report.outcome}")
        return None

    # --- the world ---------------------------------------------------------------------------
    @rule(count=st.integers(1, 6), which=st.integers(0, 1))
    def commit(self, count: int, which: int) -> None:
        for partition, seq, key in self._commit(count, which):
            self.lane_seqs[partition, lane_of(key, self.FACTOR)].append(seq)

    # --- runners -----------------------------------------------------------------------------
    def _run_short(self, partition: str, runner: int, time_left_ms: tuple[int, ...]) -> None:
        """One wake whose runner's first checks of its remaining time answer
        ``time_left_ms``, then 0."""
        answers = iter(time_left_ms)

        def remaining_ms() -> int:
            return next(answers, 0)

        self._run(partition, runner, remaining_ms)

    def _killed(self) -> None:
        if len(self._lanes_invoked()) > 1:
            TALLY.add("crash between lanes")

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
        self._run_short(partition, 1, time_left_ms=(70_000,))  # one invocation's worth, then out

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
        for lease in tables.list_leases(self.GROUP):
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
        # Drain until nothing is left; then every committed record was delivered, each key in
        # order.
        self._drain(
            lambda: all(
                set(self._deliveries(p)) >= set(range(self.committed[p])) for p in PARTITIONS
            )
        )
        for partition in PARTITIONS:
            assert set(self._deliveries(partition)) == set(range(self.committed[partition])), (
                partition
            )
        assert_each_key_in_produce_order(s for batch in self.recorder.calls for s in batch)


class LambdaConsumerLanesModel(LambdaConsumerModel):
    """Factor 4: the root's keys in three lanes, each child's in two."""

    FACTOR = 4
    KEYS = ("a", "e", "b", "d")  # lanes 1, 2, 3, 1
    CHILD_KEYS = {LEFT: ("a", "e"), RIGHT: ("b", "d")}


def test_lambda_consumer_model(endpoint_url: str) -> None:
    run_model(LambdaConsumerModel, endpoint_url, TALLY, MUST_REACH, examples=10, steps=16)


def test_lambda_consumer_lanes_model(endpoint_url: str) -> None:
    run_model(LambdaConsumerLanesModel, endpoint_url, TALLY, LANES_MUST_REACH, examples=5, steps=16)
