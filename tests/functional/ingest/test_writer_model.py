"""Model-based test of the write path: many interleavings of produce, deliver, crash,
zombie, lease expiry, redelivery, split and merge. After every step each partition's
log is exactly a prefix of its shard (nothing lost, nothing twice, dense seqs); at
the end, once everything is delivered, every record is in the log exactly once and
each key's records are in produce order when partitions are read parents-first."""

from __future__ import annotations

import contextlib
import itertools
from dataclasses import dataclass, field

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from shardlog.clock import ManualClock
from shardlog.exceptions import CommitConflictError, LeaseHeldError, LeaseLostError
from shardlog.format import IncomingRecord
from shardlog.local.kinesis_fidelity import SEQUENCE_BASE
from shardlog.reader import LogReader
from shardlog.writer import LogWriter, PreparedBatch, WriterSettings
from tests.support.aws import AwsEnv, make_env

KEYS = [f"k{i}" for i in range(6)]
LEASE_MS = 30_000


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

    def writer(self, segment_max_records: int = 3) -> LogWriter:
        return LogWriter(
            self.aws.clients,
            WriterSettings(
                bucket=self.aws.config.bucket,
                tables=self.aws.config.tables,
                lease_duration_ms=LEASE_MS,
                segment_max_records=segment_max_records,
            ),
            clock=self.clock,
        )

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

    @rule(data=st.data(), size=st.integers(1, 8), segment=st.integers(1, 4))
    def deliver(self, data: st.DataObject, size: int, segment: int) -> None:
        shard = self.pick(data)
        if shard is None:
            return
        batch = shard.records[shard.position : shard.position + size]
        try:
            self.writer(segment).append(shard.shard_id, batch)
        except LeaseHeldError:
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
        with contextlib.suppress(LeaseLostError, CommitConflictError):
            writer.commit(prepared)  # fine if it still holds the lease and the head

    @rule()
    def leases_expire(self) -> None:
        self.clock.advance(LEASE_MS)

    @rule(data=st.data(), back=st.integers(1, 10))
    def redeliver(self, data: st.DataObject, back: int) -> None:
        started = [s for s in self.shards.values() if s.position > 0]
        if started:
            shard = data.draw(st.sampled_from(started))
            shard.position = max(0, shard.position - back)

    @precondition(lambda self: self.phase == 0)
    @rule()
    def split(self) -> None:
        parent = self.shards["p0"]
        parent.closed = True
        self.shards["c1"] = ModelShard("c1", {k for k in KEYS if int(k[1:]) % 2 == 0}, ("p0",))
        self.shards["c2"] = ModelShard("c2", {k for k in KEYS if int(k[1:]) % 2 == 1}, ("p0",))
        self.phase = 1

    @precondition(lambda self: self.phase == 1)
    @rule()
    def merge(self) -> None:
        self.shards["c1"].closed = self.shards["c2"].closed = True
        self.shards["m3"] = ModelShard("m3", set(KEYS), ("c1", "c2"))
        self.phase = 2

    # --- checks ------------------------------------------------------------------------
    @invariant()
    def log_is_a_prefix_of_each_shard(self) -> None:
        for shard in self.shards.values():
            logged = [r.kinesis_sequence_number for r in self.reader.records(shard.shard_id)]
            expected = [r.kinesis_sequence_number for r in shard.records[: len(logged)]]
            assert logged == expected, f"{shard.shard_id}: log is not a prefix of the shard"

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
    WritePathMachine.endpoint_url = endpoint_url
    run_state_machine_as_test(
        WritePathMachine,
        settings=settings(
            max_examples=40,
            stateful_step_count=30,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        ),
    )
