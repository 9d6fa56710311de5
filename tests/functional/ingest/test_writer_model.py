"""Model-based test of the write path: many interleavings of produce, deliver, crash,
zombie, lease expiry, redelivery, lost answers, throttling, split and merge. After every
step each partition's log is exactly a prefix of its shard (nothing lost, nothing twice,
dense seqs), and a partition is ENDED only once its whole shard is in the log; at
the end, once everything is delivered, every record is in the log exactly once and
each key's records are in produce order when partitions are read parents-first.

The dangerous schedules are reached on purpose, and counted (``TALLY``; the test asserts
each kind happened): a writer stalled between any two of its AWS calls while its lease
expires and a successor appends (``stall_between_calls``), and a zombie whose successor
moved the head before it commits (``zombie_overtaken``), which both of the commit's
fences (leaseCounter and nextSequenceNumber) must refuse, and a call whose answer is lost
after AWS applied it or that is throttled (``faulty_call``).

Writers are fresh processes (a cold Lambda container) or one of two warm containers that
keep their writer between batches, so the state a writer remembers from its own last commit
(shardlog/writer.py, step 2) is used, and refused when another writer wrote the lease since,
in all the same schedules. Shard sync's part is played as well: lineage is recorded, and a
split or merge closes the parents, so a remembered OPEN partition can go stale.
scripts/soak.py runs this machine for longer.
"""

from __future__ import annotations

import contextlib
import itertools
from dataclasses import dataclass, field

from botocore.exceptions import BotoCoreError, ClientError
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
)

from shardlog import constants as C
from shardlog.clock import ManualClock
from shardlog.dal.partitions import close
from shardlog.exceptions import CommitConflictError, LeaseHeldError, LeaseLostError
from shardlog.format import IncomingRecord
from shardlog.local.kinesis_fidelity import SEQUENCE_BASE
from shardlog.reader import LogReader
from shardlog.tables import Tables, cancelled_items
from shardlog.writer import AppendResult, LogWriter, PreparedBatch
from tests.support.aws import AwsEnv, make_env
from tests.support.factories import ModelWriters, register_partition
from tests.support.schedules import ANSWER_LOST, THROTTLED, CallFault, Pause, Tally, run_model

KEYS = [f"k{i}" for i in range(6)]
LEASE_MS = 30_000
TALLY = Tally()
# What every run must reach: a stall before each of the write path's requests after the
# first, a stalled writer fenced, a zombie refused after its successor moved the head,
# ambiguous answers (the segment written, the commit applied) and a throttled commit.
# The write path's requests in order (shardlog/writer.py): lease, head, segments, commit.
WRITE_PATH_CALLS = ("UpdateItem", "TransactGetItems", "PutObject", "TransactWriteItems")
MUST_REACH = (
    "stall before TransactGetItems",
    "stall before PutObject",
    "stall before TransactWriteItems",
    "stalled writer fenced",
    "zombie fenced after the head moved",
    "segment adopted",
    "redelivered record dropped",
    "answer lost on PutObject",
    "answer lost on TransactWriteItems",
    "throttled on TransactWriteItems",
    "state remembered from the writer's own commit",
    "remembered state refused: the lease was written since",
)
# 0: a fresh writer (a cold container); 1 and 2: warm containers, which keep theirs.
CONTAINERS = st.integers(0, 2)


@dataclass
class ModelShard:
    shard_id: str
    keys: set[str]
    parents: tuple[str, ...] = ()
    records: list[IncomingRecord] = field(default_factory=list)
    closed: bool = False
    position: int = 0  # the event source's position: advances only on success


class WritePathMachine(RuleBasedStateMachine):
    endpoint_url = ""

    def __init__(self) -> None:
        super().__init__()
        self.aws: AwsEnv = make_env(self.endpoint_url, shard_count=1)
        self.clock = ManualClock()
        self.sequence = itertools.count(1)
        self.per_key = dict.fromkeys(KEYS, 0)
        self.shards = {"p0": ModelShard("p0", set(KEYS))}
        self.zombies: list[tuple[LogWriter, PreparedBatch]] = []
        self.phase = 0
        self.reader = LogReader(self.aws.clients, self.aws.config.bucket, self.aws.config.tables)
        self.checked: dict[str, int] = {}  # per shard: the committed head already verified
        self.pause = Pause(self.aws.clients)
        self.fault = CallFault(self.aws.clients)
        self.writers = ModelWriters(self.aws, self.clock, LEASE_MS)
        self.tables = Tables(self.aws.clients, self.aws.config.tables)
        register_partition(self.aws, "p0")  # shard sync's part: lineage recorded
        TALLY.add("schedules")

    def writer(self, segment_max_records: int = 3, container: int = 0) -> LogWriter:
        """A fresh writer (container 0), or the one a warm container keeps between batches
        (its settings are its own: container ``c`` cuts segments of ``c + 1`` records)."""
        return self.writers.writer(container, segment_max_records)

    def open_shard_for(self, key: str) -> ModelShard:
        return next(s for s in self.shards.values() if not s.closed and key in s.keys)

    def deliverable(self, shard: ModelShard) -> bool:
        parents_done = all(
            self.shards[p].closed and self.shards[p].position == len(self.shards[p].records)
            for p in shard.parents
        )
        return parents_done and shard.position < len(shard.records)

    def pick(self, data: st.DataObject) -> ModelShard | None:
        ready = [s for s in self.shards.values() if self.deliverable(s)]
        return data.draw(st.sampled_from(ready)) if ready else None

    # --- rules -----------------------------------------------------------------------
    @rule(key=st.sampled_from(KEYS), count=st.integers(1, 6))
    def produce(self, key: str, count: int) -> None:
        shard = self.open_shard_for(key)
        for _ in range(count):
            number = self.per_key[key]
            self.per_key[key] += 1
            shard.records.append(
                IncomingRecord(
                    key,
                    f"{key}:{number}".encode(),
                    str(SEQUENCE_BASE + 10 * next(self.sequence)),
                    1_700_000_000_000,
                )
            )

    @rule(data=st.data(), size=st.integers(1, 8), segment=st.integers(1, 4), container=CONTAINERS)
    def deliver(self, data: st.DataObject, size: int, segment: int, container: int) -> None:
        shard = self.pick(data)
        if shard is None:
            return
        batch = shard.records[shard.position : shard.position + size]
        writer = self.writer(segment, container)
        remembers = writer.remembers(shard.shard_id)
        try:
            result = writer.append(shard.shard_id, batch)
            self.count(result)
            if remembers and result.state_read:
                TALLY.add("remembered state refused: the lease was written since")
        except LeaseHeldError:
            TALLY.add("lease held")
            return  # Lambda retries later
        shard.position += len(batch)

    @rule(data=st.data(), size=st.integers(1, 8))
    def crash_after_s3_write(self, data: st.DataObject, size: int) -> None:
        shard = self.pick(data)
        if shard is None:
            return
        batch = shard.records[shard.position : shard.position + size]
        with contextlib.suppress(LeaseHeldError):
            self.writer().prepare(shard.shard_id, batch)  # and never commits
            TALLY.add("crash after the S3 write")

    @rule(data=st.data(), size=st.integers(1, 8))
    def start_zombie(self, data: st.DataObject, size: int) -> None:
        shard = self.pick(data)
        if shard is None:
            return
        writer = self.writer()
        batch = shard.records[shard.position : shard.position + size]
        with contextlib.suppress(LeaseHeldError):
            self.zombies.append((writer, writer.prepare(shard.shard_id, batch)))

    @precondition(lambda self: self.zombies)
    @rule(data=st.data())
    def zombie_wakes_up(self, data: st.DataObject) -> None:
        writer, prepared = self.zombies.pop(data.draw(st.integers(0, len(self.zombies) - 1)))
        try:
            writer.commit(prepared)  # fine if it still holds the lease and the head
            TALLY.add("zombie committed (still held its lease)")
        except (LeaseLostError, CommitConflictError) as exc:
            TALLY.add(f"zombie fenced ({type(exc).__name__})")

    @rule(
        data=st.data(),
        container=st.integers(1, 2),
        first=st.integers(1, 4),
        other=st.integers(0, 4),
        then=st.integers(1, 4),
    )
    def warm_writer_overtaken(
        self, data: st.DataObject, container: int, first: int, other: int, then: int
    ) -> None:
        """A warm container commits and remembers the partition; another writer then writes
        the lease (appending the next ``other`` records, or, with 0, only redelivered ones);
        the warm container's next batch must not trust what it remembers: it reads the state
        again and commits its records exactly once."""
        shard = self.pending_shard(data)
        self.clock.advance(LEASE_MS)  # no earlier writer's live lease in the way
        warm = self.writer(container=container)
        first_batch = shard.records[shard.position : shard.position + first]
        self.count(warm.append(shard.shard_id, first_batch))
        shard.position += len(first_batch)
        remembered = warm.remembers(shard.shard_id)
        # Another writer: the last two records again (redelivered), then ``other`` new ones.
        start = max(0, shard.position - 2)
        others = shard.records[start : shard.position + other]
        self.count(self.writer().append(shard.shard_id, others))
        shard.position = max(shard.position, start + len(others))
        start = shard.position - 1
        last = shard.records[start : shard.position + then]
        result = warm.append(shard.shard_id, last)
        self.count(result)
        shard.position = max(shard.position, start + len(last))
        if not remembered:
            return  # a closed partition is never remembered
        if not result.state_read:
            raise AssertionError("a warm writer trusted its memory after another lease write")
        TALLY.add("remembered state refused: the lease was written since")

    @rule(data=st.data(), size=st.integers(1, 8), successor_size=st.integers(1, 8))
    def zombie_overtaken(self, data: st.DataObject, size: int, successor_size: int) -> None:
        """A writer prepares, stalls past its lease; a successor appends (moving the head);
        the zombie commits: both fences must refuse it (the lease counter moved, and so
        did the head), and nothing of its batch may count."""
        shard = self.pending_shard(data)
        self.clock.advance(LEASE_MS)  # no live lease in the way (start_zombie's)
        zombie, start = self.writer(), shard.position
        prepared = zombie.prepare(shard.shard_id, shard.records[start : start + size])
        self.clock.advance(LEASE_MS)
        head_before = self.reader.head(shard.shard_id)
        successor_batch = shard.records[start : start + successor_size]
        self.count(self.writer().append(shard.shard_id, successor_batch))
        shard.position = max(shard.position, start + len(successor_batch))
        head_moved = self.reader.head(shard.shard_id) > head_before
        try:
            zombie.commit(prepared)
        except LeaseLostError as exc:
            if head_moved and prepared.new_head > prepared.head:
                # The commit transaction was refused by both of its conditions.
                assert cancelled_items(exc.__cause__ or exc) == [True, True], (
                    f"zombie refused by {cancelled_items(exc.__cause__ or exc)}: "
                    "both the head and the lease fence must refuse it"
                )
                TALLY.add("zombie fenced after the head moved")
            return
        raise AssertionError("a zombie past its lease committed after its successor")

    @rule(
        data=st.data(),
        size=st.integers(1, 8),
        segment=st.integers(1, 3),
        before=st.sampled_from(WRITE_PATH_CALLS),
        nth=st.integers(1, 2),
        expire=st.booleans(),
        successor_size=st.integers(0, 8),
        container=CONTAINERS,
    )
    def stall_between_calls(
        self,
        data: st.DataObject,
        size: int,
        segment: int,
        before: str,
        nth: int,
        expire: bool,
        successor_size: int,
        container: int,
    ) -> None:
        """A writer pauses just before the ``nth`` call of ``before`` (GC, a frozen Lambda)
        (a second PutObject exists when the batch spans segments); meanwhile
        its lease may expire and a successor append the same records. Whatever the
        pause preceded, the log stays a prefix of the shard (the invariant)."""
        shard = self.pending_shard(data)
        self.clock.advance(LEASE_MS)  # no earlier writer's live lease in the way
        start = shard.position
        batch = shard.records[start : start + size]
        succeeded: list[int] = []

        def stall() -> None:
            if expire:
                self.clock.advance(LEASE_MS)
            if successor_size:
                successor_batch = shard.records[start : start + successor_size]
                try:
                    self.count(self.writer().append(shard.shard_id, successor_batch))
                    succeeded.append(len(successor_batch))
                    TALLY.add("successor appended during a stall")
                except LeaseHeldError:
                    TALLY.add("successor met the stalled writer's live lease")

        self.pause.before_call(nth, stall, operation=before)
        try:
            result = self.writer(segment, container).append(shard.shard_id, batch)
            self.count(result)
            succeeded.append(len(batch))
        except (LeaseLostError, CommitConflictError) as exc:
            TALLY.add("stalled writer fenced")
            TALLY.add(f"stalled writer fenced ({type(exc).__name__})")
        except LeaseHeldError:
            TALLY.add("lease held")
        finally:
            preceded = self.pause.disarm()
        if preceded is not None:
            TALLY.add(f"stall before {preceded}")
        if succeeded:
            shard.position = max(shard.position, start + max(succeeded))

    @rule(
        data=st.data(),
        size=st.integers(1, 8),
        segment=st.integers(1, 3),
        fault=st.sampled_from((ANSWER_LOST, THROTTLED)),
        operation=st.sampled_from(WRITE_PATH_CALLS),
        container=CONTAINERS,
    )
    def faulty_call(
        self,
        data: st.DataObject,
        size: int,
        segment: int,
        fault: str,
        operation: str,
        container: int,
    ) -> None:
        """One call of the write path has its answer lost after AWS applied it (ambiguous),
        or is throttled past its retries: the invocation fails and its batch comes again
        (the event source's position does not move), and the log stays exact."""
        shard = self.pending_shard(data)
        self.clock.advance(LEASE_MS)  # no earlier writer's live lease in the way
        batch = shard.records[shard.position : shard.position + size]
        self.fault.arm(fault, operation)
        try:
            self.count(self.writer(segment, container).append(shard.shard_id, batch))
            shard.position += len(batch)
        except (BotoCoreError, ClientError, LeaseLostError, CommitConflictError) as exc:
            TALLY.add(f"invocation failed ({type(exc).__name__})")
        except LeaseHeldError:
            TALLY.add("lease held")
        finally:
            injected = self.fault.disarm()
        if injected is not None:
            TALLY.add(injected)

    @rule()
    def leases_expire(self) -> None:
        self.clock.advance(LEASE_MS)
        TALLY.add("lease expired")

    @rule(data=st.data(), back=st.integers(1, 10))
    def redeliver(self, data: st.DataObject, back: int) -> None:
        started = [s for s in self.shards.values() if s.position > 0]
        if started:
            shard = data.draw(st.sampled_from(started))
            shard.position = max(0, shard.position - back)
            TALLY.add("redelivery")

    @precondition(lambda self: self.phase == 0)
    @rule()
    def split(self) -> None:
        self.close_shard("p0")
        self.shards["c1"] = ModelShard("c1", {k for k in KEYS if int(k[1:]) % 2 == 0}, ("p0",))
        self.shards["c2"] = ModelShard("c2", {k for k in KEYS if int(k[1:]) % 2 == 1}, ("p0",))
        register_partition(self.aws, "c1", ("p0",))
        register_partition(self.aws, "c2", ("p0",))
        self.phase = 1
        TALLY.add("split")

    @precondition(lambda self: self.phase == 1)
    @rule()
    def merge(self) -> None:
        self.close_shard("c1")
        self.close_shard("c2")
        self.shards["m3"] = ModelShard("m3", set(KEYS), ("c1", "c2"))
        register_partition(self.aws, "m3", ("c1", "c2"))
        self.phase = 2
        TALLY.add("merge")

    # --- helpers -------------------------------------------------------------------------
    def close_shard(self, shard_id: str) -> None:
        """Kinesis closed the shard; shard sync records where it ends (OPEN -> CLOSED). A
        shard closed empty ends below any record (shard sync ends such a one by itself)."""
        shard = self.shards[shard_id]
        shard.closed = True
        ending = shard.records[-1].kinesis_sequence_number if shard.records else str(SEQUENCE_BASE)
        close(self.aws.clients, self.aws.config.partitions_table, shard_id, ending)

    def pending_shard(self, data: st.DataObject) -> ModelShard:
        """A deliverable shard, producing a few records first when none is."""
        shard = self.pick(data)
        if shard is None:  # then the new records are deliverable: every parent is done
            self.produce(data.draw(st.sampled_from(KEYS)), 3)
            shard = self.pick(data)
        assert shard is not None
        return shard

    def count(self, result: AppendResult) -> None:
        TALLY.add("batch committed" if result.committed else "batch with nothing new")
        if not result.state_read:
            TALLY.add("state remembered from the writer's own commit")
        if result.ended:
            TALLY.add("partition ended by the commit")
        TALLY.add("segment adopted", result.segments_adopted)
        TALLY.add("redelivered record dropped", result.redelivered)

    # --- checks ------------------------------------------------------------------------
    @invariant()
    def log_is_a_prefix_of_each_shard(self) -> None:
        """After every step: each committed head only grows, and what it grew by is, dense,
        exactly the shard's next records. Records verified once are not re-read each step
        (segments are write-once); the teardown re-reads every log in full."""
        TALLY.add("steps")  # invariants run once per schedule, then after every step
        for shard in self.shards.values():
            checked, head = self.checked.get(shard.shard_id, 0), self.reader.head(shard.shard_id)
            assert head >= checked, f"{shard.shard_id}: the head went back {checked} -> {head}"
            if head == checked:
                continue
            logged = [
                r.kinesis_sequence_number
                for r in self.reader.store.records(shard.shard_id, checked, head)
            ]
            expected = [r.kinesis_sequence_number for r in shard.records[checked:head]]
            assert logged == expected, f"{shard.shard_id}: log is not a prefix of the shard"
            self.checked[shard.shard_id] = head

    @invariant()
    def a_partition_ends_only_with_its_whole_shard_in_the_log(self) -> None:
        """ENDED lets its children be consumed: the shard must be closed and all in the log."""
        for shard in self.shards.values():
            partition = self.tables.get_partition(shard.shard_id)
            if partition is not None and partition.state == C.STATE_ENDED:
                assert shard.closed, f"{shard.shard_id}: ENDED while its shard is open"
                assert partition.next_seq == len(shard.records), (
                    f"{shard.shard_id}: ENDED at head {partition.next_seq} of "
                    f"{len(shard.records)} records"
                )

    def teardown(self) -> None:
        self.clock.advance(LEASE_MS)
        for _ in range(200):
            pending = [s for s in self.shards.values() if self.deliverable(s)]
            if not pending:
                break
            for shard in pending:
                self.writer(5).append(shard.shard_id, shard.records[shard.position :])
                shard.position = len(shard.records)
        seen: dict[str, list[int]] = {k: [] for k in KEYS}
        for shard_id in ("p0", "c1", "c2", "m3"):  # parents first
            if shard_id not in self.shards:
                continue
            logged = list(self.reader.records(shard_id))
            assert [r.kinesis_sequence_number for r in logged] == [
                r.kinesis_sequence_number for r in self.shards[shard_id].records
            ]
            assert [r.seq for r in logged] == list(range(len(logged)))
            for record in logged:
                key, number = record.data.decode().split(":")
                seen[key].append(int(number))
        assert seen == {k: list(range(n)) for k, n in self.per_key.items()}


def test_write_path_model(endpoint_url: str) -> None:
    run_model(WritePathMachine, endpoint_url, TALLY, MUST_REACH, examples=10, steps=30)
