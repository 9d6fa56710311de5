"""Model of group start positions: worker groups and Lambda groups created before, during
and after a split and a merge, at every start position, get exactly the records their
position promises (docs/CONSUMERS.md, "Start positions"), each key in produce order.

The world: keys ``a`` and ``b`` go to ``p0``; a split closes it into ``c1`` (key a) and
``c2`` (key b); a merge closes those into ``m3``. Records are produced, then committed
(at once or later: ingest lag), so a closed partition can still receive the records that
were produced before it closed; it becomes ENDED once they are committed. Groups are
created at any time: Lambda groups at TRIM_HORIZON, LATEST or AT_TIMESTAMP (registered as
at deploy), worker groups at those and AT_SEQUENCE (created at their first worker's first
cycle). The model notes what each partition was at the group's creation (state, head, the
arrival of each committed record) and derives the promise from that alone:

- a partition absent at creation: all of it;
- TRIM_HORIZON: all of it;
- LATEST: an OPEN partition from its head at creation; a CLOSED or ENDED one, nothing;
- AT_TIMESTAMP T: from the first record committed at creation that arrived at or after T
  (else the head at creation); an ENDED partition without such a record, nothing;
- AT_SEQUENCE: from min(listed seq, head at creation).

After every step no group has a record outside its promise, and each key's records reach
a group in produce order; at the end (everything committed, every closed partition
ENDED, every group drained) each group has every record of its promise.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from shardlog import constants as C
from shardlog.clock import ManualClock
from shardlog.consumer import StartPosition, Worker
from shardlog.dal.partitions import close
from shardlog.format import IncomingRecord
from shardlog.lambda_consumer.runner import Runner
from shardlog.local.kinesis_fidelity import SEQUENCE_BASE
from tests.support.aws import AwsEnv, make_env
from tests.support.factories import (
    FAST,
    Journal,
    append,
    end_partition,
    recording_worker,
    register_partition,
    run_until_idle,
)
from tests.support.lambda_consumers import Recorder, runner_for
from tests.support.schedules import Tally, run_model

TALLY = Tally()
MID_RESHARD = "group created mid-reshard"
AFTER_SPLIT = "group created after a split"
LATEST_CLOSED = "LATEST group created while a closed partition still receives records"
WOKEN_LATE = "LATEST group woken by records produced after creation but before its first run"
# What every run must reach: the edges, and each kind of group at each of its positions.
MUST_REACH = (
    MID_RESHARD,
    AFTER_SPLIT,
    WOKEN_LATE,
    "group created after a merge",
    LATEST_CLOSED,
    *(f"lambda {p}" for p in ("TRIM_HORIZON", "LATEST", "AT_TIMESTAMP")),
    *(f"workers {p}" for p in ("TRIM_HORIZON", "LATEST", "AT_TIMESTAMP", "AT_SEQUENCE")),
)
KEYS = ("a", "b")
ROUTES = (  # key -> partition, per phase: before the split, after it, after the merge
    {"a": "p0", "b": "p0"},
    {"a": "c1", "b": "c2"},
    {"a": "m3", "b": "m3"},
)
PARENTS = {"p0": (), "c1": ("p0",), "c2": ("p0",), "m3": ("c1", "c2")}
NEVER_ENDS = "9" * 70  # an ending Kinesis sequence number no commit reaches


@dataclass(frozen=True)
class Produced:
    key: str
    number: int  # the key's produce order
    arrival_ms: int
    kinesis_seq: str

    def incoming(self) -> IncomingRecord:
        data = f"{self.key}:{self.number}".encode()
        return IncomingRecord(self.key, data, self.kinesis_seq, self.arrival_ms)


@dataclass(frozen=True)
class AtCreation:
    state: str
    head: int
    arrivals: tuple[int, ...]  # of the committed records, by seq


@dataclass
class Group:
    name: str
    kind: str  # "lambda" or "workers"
    position: StartPosition
    seen: dict[str, AtCreation]
    created_ms: int
    phase: int
    journal: Journal = field(default_factory=Journal)
    recorder: Recorder = field(default_factory=Recorder)
    worker: Worker | None = None
    runner: Runner | None = None
    ran: bool = False
    woken: set[str] = field(default_factory=set)  # a Lambda group's partitions with a wake
    produced_since_creation: int = 0  # and committed

    def promise(self, partition: str, head: int) -> set[int]:
        """The seqs of ``partition`` (now at ``head``) the position promises."""
        at = self.seen.get(partition)
        if at is None:
            return set(range(head))  # appeared later: all of it
        kind = self.position.kind
        first = 0
        if kind == "LATEST":
            if at.state != C.STATE_OPEN:
                return set()
            first = at.head
        elif kind == "AT_TIMESTAMP":
            assert self.position.timestamp_ms is not None
            first = next(
                (s for s, t in enumerate(at.arrivals) if t >= self.position.timestamp_ms), at.head
            )
            if at.state == C.STATE_ENDED and first >= at.head:
                return set()
        elif kind == "AT_SEQUENCE":
            first = min(self.position.sequences.get(partition, 0), at.head)
        return set(range(first, head))

    def delivered(self) -> dict[str, set[int]]:
        if self.kind == "workers":
            return self.journal.by_partition()
        seen: dict[str, set[int]] = defaultdict(set)
        for batch in self.recorder.calls:
            for s in batch:
                seen[s.partition_id].add(s.seq)
        return seen

    def first_deliveries(self) -> list[tuple[str, int, str]]:
        """(partition, seq, data) of each record's first delivery, in delivery order."""
        if self.kind == "workers":
            records = [(d.partition_id, d.seq, d.data.decode()) for d in self.journal.deliveries]
        else:
            records = [
                (s.partition_id, s.seq, s.data.decode()) for b in self.recorder.calls for s in b
            ]
        out, done = [], set()
        for partition, seq, data in records:
            if (partition, seq) not in done:
                done.add((partition, seq))
                out.append((partition, seq, data))
        return out


def _creates(kind: str, position_kind: str) -> Any:
    """The rule that creates a group of ``kind`` at ``position_kind`` (one per phase)."""

    @precondition(lambda self: self._may_create())
    @rule(data=st.data())
    def create_group(self: StartPositionModel, data: st.DataObject) -> None:
        self.create(kind, position_kind, data)

    return create_group


class StartPositionModel(RuleBasedStateMachine):
    endpoint_url: str = ""

    def __init__(self) -> None:
        super().__init__()
        self.aws: AwsEnv = make_env(self.endpoint_url, 1)
        self.clock = ManualClock()
        self.phase = 0
        self.states: dict[str, str] = {"p0": C.STATE_OPEN}
        self.pending: dict[str, list[Produced]] = defaultdict(list)  # produced, not committed
        self.committed: dict[str, list[Produced]] = defaultdict(list)
        self.numbers: dict[str, int] = defaultdict(int)
        self.kinesis = itertools.count()
        self.groups: list[Group] = []
        register_partition(self.aws, "p0", ())
        TALLY.add("schedules")

    @initialize(position_kind=st.sampled_from(["LATEST", "AT_TIMESTAMP", "TRIM_HORIZON"]))
    def a_lambda_group_before_any_record(self, position_kind: str) -> None:
        """Deployed with the stream: its first records wake it (or the minute's sweep)."""
        self.create("lambda", position_kind, None)

    @initialize(
        position_kind=st.sampled_from(["TRIM_HORIZON", "LATEST", "AT_TIMESTAMP", "AT_SEQUENCE"]),
        data=st.data(),
    )
    def a_worker_group_before_any_record(self, position_kind: str, data: st.DataObject) -> None:
        self.create("workers", position_kind, data)

    # --- the world -----------------------------------------------------------------------
    @rule(key=st.sampled_from(KEYS), count=st.integers(1, 4), commit_now=st.booleans())
    def produce(self, key: str, count: int, commit_now: bool) -> None:
        partition = ROUTES[self.phase][key]
        for _ in range(count):
            number = self.numbers[key]
            self.numbers[key] += 1
            seq = str(SEQUENCE_BASE + 7 * next(self.kinesis))
            self.pending[partition].append(Produced(key, number, self.clock.now_ms(), seq))
        self.clock.advance(1_000)
        if commit_now:
            self.commit(partition)

    def commit(self, partition: str) -> None:
        records, self.pending[partition] = self.pending[partition], []
        if not records:
            return
        append(self.aws, partition, [r.incoming() for r in records], segment_max_records=2)
        self.committed[partition] += records
        for group in self.groups:  # a commit wakes every Lambda group for the partition
            group.produced_since_creation += sum(r.arrival_ms >= group.created_ms for r in records)
            group.woken.add(partition)

    @rule(data=st.data())
    def ingest_catches_up(self, data: st.DataObject) -> None:
        behind = sorted(p for p, records in self.pending.items() if records)
        if behind:
            self.commit(data.draw(st.sampled_from(behind)))

    @precondition(lambda self: self.phase < 2)
    @rule()
    def reshard(self) -> None:
        """Split p0, or merge c1 and c2: the parents close (each key's last record before it
        still in flight to ingest), the children open."""
        for key in KEYS:
            self.produce(key, 1, commit_now=False)
        closing = sorted({p for p in ROUTES[self.phase].values()})
        self.phase += 1
        for parent in closing:
            close(self.aws.clients, self.aws.config.partitions_table, parent, NEVER_ENDS)
            self.states[parent] = C.STATE_CLOSED
        for child in sorted(set(ROUTES[self.phase].values())):
            register_partition(self.aws, child, PARENTS[child])
            self.states[child] = C.STATE_OPEN
        TALLY.add("split" if self.phase == 1 else "merge")

    @rule(data=st.data())
    def end(self, data: st.DataObject) -> None:
        """A closed partition whose records are all committed becomes ENDED."""
        done = sorted(
            p for p, s in self.states.items() if s == C.STATE_CLOSED and not self.pending[p]
        )
        if done:
            partition = data.draw(st.sampled_from(done))
            end_partition(self.aws, partition)
            self.states[partition] = C.STATE_ENDED

    @rule(ms=st.sampled_from([500, 5_000, 60_000]))
    def time_passes(self, ms: int) -> None:
        """A minute brings the sweep: every Lambda group's runner, for every partition."""
        self.clock.advance(ms)
        if ms >= 60_000:
            for group in self.groups:
                if group.runner is not None:
                    self._run(group)

    # --- groups ----------------------------------------------------------------------------
    def _snapshot(self) -> dict[str, AtCreation]:
        return {
            p: AtCreation(s, len(self.committed[p]), tuple(r.arrival_ms for r in self.committed[p]))
            for p, s in self.states.items()
        }

    def _tally_creation(self, group: Group) -> None:
        TALLY.add(f"{group.kind} {group.position.kind}")
        children = [p for p in self.states if PARENTS[p]]
        if children:
            TALLY.add(AFTER_SPLIT)
        if any(self.states[parent] != C.STATE_ENDED for c in children for parent in PARENTS[c]):
            TALLY.add(MID_RESHARD)
        if "m3" in self.states:
            TALLY.add("group created after a merge")
        receiving = [p for p, s in self.states.items() if s == C.STATE_CLOSED and self.pending[p]]
        if receiving and group.position.kind == "LATEST":
            TALLY.add(LATEST_CLOSED)

    def _position(self, kind: str, data: st.DataObject | None, lambda_group: bool) -> StartPosition:
        if kind == "LATEST" or data is None:
            return StartPosition.latest()
        if kind == "AT_TIMESTAMP":
            back = data.draw(st.sampled_from([0, 1_500, 4_000, 60_000, -2_000]), label="back")
            return StartPosition.at_timestamp(self.clock.now_ms() - back)
        if kind == "AT_SEQUENCE" and not lambda_group:
            seqs = {p: data.draw(st.integers(0, 4), label=p) for p in sorted(self.states)}
            return StartPosition.at_sequence(seqs)
        return StartPosition.trim_horizon()

    def _may_create(self) -> bool:
        """One new group per phase (before the split, after it, after the merge)."""
        return all(g.phase != self.phase for g in self.groups)

    def create(self, kind: str, position_kind: str, data: st.DataObject | None) -> None:
        """A Lambda group is registered, as at deploy, and its runner wakes later; a worker
        group is created by its first worker's first cycle."""
        position = self._position(position_kind, data, lambda_group=kind == "lambda")
        group = self._new_group(kind, position)
        if kind == "lambda":
            settings: dict[str, Any] = {"starting_position": str(position.kind), "batch_size": 3}
            if position.timestamp_ms is not None:
                settings["starting_position_timestamp_ms"] = position.timestamp_ms
            runner = runner_for(self.aws, self.clock, group.recorder, group.name, **settings)
            group.runner = runner[0]
            return
        group.worker = recording_worker(
            self.aws,
            group.journal,
            f"{group.name}-w",
            self.clock,
            group.name,
            settings=dataclasses.replace(FAST, start_position=position),
        )
        group.worker.run_once()
        group.ran = True

    # One rule per kind of group and position, so each is as likely as the others.
    create_lambda_trim_horizon = _creates("lambda", "TRIM_HORIZON")
    create_lambda_latest = _creates("lambda", "LATEST")
    create_lambda_at_timestamp = _creates("lambda", "AT_TIMESTAMP")
    create_workers_trim_horizon = _creates("workers", "TRIM_HORIZON")
    create_workers_latest = _creates("workers", "LATEST")
    create_workers_at_timestamp = _creates("workers", "AT_TIMESTAMP")
    create_workers_at_sequence = _creates("workers", "AT_SEQUENCE")

    def _new_group(self, kind: str, position: StartPosition) -> Group:
        group = Group(
            f"g{len(self.groups)}",
            kind,
            position,
            self._snapshot(),
            self.clock.now_ms(),
            self.phase,
        )
        self._tally_creation(group)
        self.groups.append(group)
        return group

    def _run(self, group: Group, partitions: set[str] | None = None) -> None:
        """A worker group's cycles, or a Lambda group's runs of the given partitions (all: a
        sweep), parents first; a run that finished a partition wakes its children."""
        if group.worker is not None:
            for _ in range(3):
                group.worker.run_once()
                self.clock.advance(1)
            return
        assert group.runner is not None
        if not group.ran and group.position.kind == "LATEST" and group.produced_since_creation:
            TALLY.add(WOKEN_LATE)
        group.ran = True
        for partition in [p for p in PARENTS if p in self.states]:
            if partitions is not None and partition not in partitions:
                continue
            group.woken.discard(partition)
            report = group.runner.run(
                partition, request_id=f"{partition}-run", remaining_ms=lambda: 900_000
            )
            group.woken.update(report.woke)

    @precondition(lambda self: any(g.worker for g in self.groups))
    @rule(data=st.data())
    def worker_cycles(self, data: st.DataObject) -> None:
        self._run(data.draw(st.sampled_from([g for g in self.groups if g.worker])))

    @precondition(lambda self: any(g.runner and g.woken for g in self.groups))
    @rule(data=st.data())
    def wake(self, data: st.DataObject) -> None:
        group = data.draw(st.sampled_from([g for g in self.groups if g.runner and g.woken]))
        self._run(group, set(group.woken))

    # --- what must hold ----------------------------------------------------------------------
    def _heads(self) -> dict[str, int]:
        return {p: len(self.committed[p]) for p in self.states}

    @invariant()
    def nothing_outside_the_promise_and_each_key_in_order(self) -> None:
        TALLY.add("steps")
        heads = self._heads()
        for group in self.groups:
            for partition, seqs in group.delivered().items():
                extra = seqs - group.promise(partition, heads[partition])
                assert not extra, (
                    f"{group.name} ({group.position.describe()}) got {partition} {sorted(extra)}"
                )
            numbers: dict[str, int] = {}
            for _partition, _seq, data in group.first_deliveries():
                key, number = data.split(":")
                assert int(number) > numbers.get(key, -1), f"{group.name}: key {key} out of order"
                numbers[key] = int(number)

    def teardown(self) -> None:
        try:
            self._drain()
            heads = self._heads()
            for group in self.groups:
                delivered = group.delivered()
                for partition, head in heads.items():
                    promised = group.promise(partition, head)
                    got = delivered.get(partition, set())
                    assert got == promised, (
                        f"{group.name} ({group.kind}, {group.position.describe()}) {partition}: "
                        f"missing {sorted(promised - got)}, extra {sorted(got - promised)}"
                    )
                TALLY.add("records checked", sum(len(s) for s in delivered.values()))
        finally:
            for group in self.groups:
                if group.worker is not None:
                    group.worker.shutdown()

    def _drain(self) -> None:
        for partition in sorted(self.pending):
            self.commit(partition)
        for partition, state in sorted(self.states.items()):
            if state == C.STATE_CLOSED:
                end_partition(self.aws, partition)
                self.states[partition] = C.STATE_ENDED
        for group in self.groups:
            if group.worker is not None:
                run_until_idle([group.worker], self.clock)
            else:
                for _ in range(3):  # parents, then children, then grandchildren
                    self._run(group)
        self.nothing_outside_the_promise_and_each_key_in_order()


def test_start_position_model(endpoint_url: str) -> None:
    run_model(StartPositionModel, endpoint_url, TALLY, MUST_REACH, examples=12, steps=16)
