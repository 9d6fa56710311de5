"""A model of group seeks on a Lambda consumer group, among commits, wakes, runner crashes
(leases left live), a seek landing mid-invocation, a split and its parent's end, a seek back
into the parent once it was read to its end: after each seek, every delivery starts at the
seek's position and skips nothing, children wait for a parent the seek re-opened, and at the
end every record from the last seek's positions on is delivered, each key in produce order."""

from __future__ import annotations

import math
from typing import Any

import hypothesis.strategies as st
from hypothesis.stateful import invariant, precondition, rule

from shardlog import constants as C
from shardlog.consumer.positions import StartPosition
from shardlog.consumer.seek import SeekPlan
from shardlog.lambda_consumer.runner import Outcome
from shardlog.tables import Tables
from tests.support.lambda_consumers import Seen
from tests.support.lambda_model import (
    PARTITIONS,
    ROOT,
    Killer,
    SplittingGroupModel,
    assert_each_key_in_produce_order,
)
from tests.support.schedules import Tally, run_model
from tests.support.seek import group_seek

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


class SeekModel(SplittingGroupModel):
    tally = TALLY
    GROUP = GROUP
    BATCH_SIZES = (2, 3)
    SEGMENT_MAX_RECORDS = 2
    KEYS = KEYS

    def __init__(self) -> None:
        super().__init__()
        self.killer = Killer(self.runners[0])
        self.tables = Tables(self.aws.clients, self.aws.config.tables)
        self.seek_in_answer: StartPosition | None = None
        # The last seek: where each partition starts (None: SHARD_END, nothing to deliver),
        # and how many deliveries there were before it returned.
        self.starts: dict[str, int | None] = dict.fromkeys(PARTITIONS, 0)
        self.mark = 0

    # --- the function ----------------------------------------------------------------------
    def _answer(self, _batch: list[Seen]) -> Any:
        if self.seek_in_answer is not None:  # the seek lands while this batch is invoked
            position, self.seek_in_answer = self.seek_in_answer, None
            self._seek(position)
            TALLY.add("seek mid-invocation")
        return {"batchItemFailures": []}

    # --- the world ---------------------------------------------------------------------------
    @rule(count=st.integers(1, 5), which=st.integers(0, 1))
    def commit(self, count: int, which: int) -> None:
        self.clock.advance(10)  # arrivals never go back: AT_TIMESTAMP can find its record
        self._commit(count, which, arrival_ms=self.clock.now_ms())

    # --- runners -----------------------------------------------------------------------------
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

    @precondition(lambda self: self.committed[ROOT] > 0)
    @rule(
        kind=st.sampled_from(["TRIM_HORIZON", "AT_TIMESTAMP", "AT_SEQUENCE"]),
        seq=st.integers(0, 12),
    )
    def seek_into_the_finished_parent(self, kind: str, seq: int) -> None:
        """The parent splits and ends (if it has not yet), and is read to its end (SHARD_END)
        once the leases left by crashed runners expire; then a seek back into it re-opens it
        under its children."""
        if not self.split:
            self.reshard()
        if ROOT not in self.ended:
            self.end_parent()
        self.clock.advance(self.runners[0].consumer.lease_ms + 1)
        self._run(ROOT, 1)
        self._seek(self._position(kind, seq, 400))

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
        self._drain()
        self.since_the_last_seek_nothing_before_its_position_nor_skipped()
        since = self._delivered()[self.mark :]
        for partition, start in self.starts.items():
            got = {seq for p, seq, _, _ in since if p == partition}
            if start is not None:
                assert got >= set(range(start, self.committed[partition])), partition
        seen = [s for batch in self.recorder.calls for s in batch]
        assert_each_key_in_produce_order(seen[self.mark :])


def test_seek_model(endpoint_url: str) -> None:
    run_model(SeekModel, endpoint_url, TALLY, MUST_REACH, examples=8, steps=16)
