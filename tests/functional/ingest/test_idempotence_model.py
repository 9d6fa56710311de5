"""Model-based test of idempotent produce: records with ids, resent flagged and not, before
and after splits and merges, before and after shard sync, inside the deduplication window,
at its edge and past it; batches delivered by fresh and warm writers, crashed after their
S3 write, redelivered, and failed by a lost or throttled answer.

The topology is a real stream's: splits and merges go to the embedded Kinesis, so the
writer's look-up meets exactly the ListShards answer of AWS (children listed with their
parents before shard sync has recorded them). Records are the model's own (it routes each
key by a fixed hash, as Kinesis routes by the key's MD5), so their arrival times are too:
the window is crossed without waiting. Shard sync's part (lineage recorded, closed shards
closed in the partitions table) is a rule of its own, so a resend reaches a child before or
after it.

The invariant is the documented guarantee (docs/API.md, "Idempotent produce"), computed
from the shard's records alone, never from how they were batched: a resent record is
dropped exactly when its id reached its partition (an earlier record of it) or any
ancestor, at most the window (``WINDOW_MS``) before it; every other record is kept, an
unflagged copy or one past the window included. After every step each partition's log is
a prefix of that expected log (dense, in order); a partition is ENDED only with its whole
shard in; a batch that reaches the end of a shard already CLOSED in the table ends it. At
the end, everything delivered, each log is its expected log whole. ``TALLY`` counts what
the schedules reached; ``MUST_REACH`` must all be reached. scripts/soak.py runs this
machine for longer.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from botocore.exceptions import BotoCoreError, ClientError
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    rule,
)

from shardlog import constants as C
from shardlog.clock import ManualClock
from shardlog.dal.partitions import close
from shardlog.exceptions import CommitConflictError, LeaseLostError
from shardlog.format import IncomingRecord
from shardlog.local.kinesis_fidelity import SEQUENCE_BASE
from shardlog.reader import LogReader
from shardlog.shardsync import list_shards, parents_of
from shardlog.tables import Tables
from shardlog.writer import AppendResult, LogWriter
from tests.support.aws import AwsEnv, make_env
from tests.support.factories import ModelWriters, register_partition
from tests.support.schedules import ANSWER_LOST, THROTTLED, CallFault, Tally, run_model

WINDOW_MS = 60_000
LEASE_MS = 30_000
BASE_ARRIVAL_MS = 1_700_000_000_000
# Six keys spread evenly over the hash space: after a split or two some children hold none
# (a shard split again before it took a record: no partition item ever).
KEYS = {f"k{i}": (2 * i + 1) * (2**128 // 12) for i in range(6)}
MAX_SHARDS = 12
TALLY = Tally()
MUST_REACH = (
    "resend into a child before shard sync",
    "resend into a child after shard sync",
    "resend after a merge",
    "resend through a shard with no item",
    "resend dropped",
    "resend past the window",
    "resend at the window's edge",
    "resend in the batch of its original",
    "unflagged resend",
    "resend in a batch crashed after its S3 write",
    "closed shard ended by a batch with nothing new",
)
# Calls whose answer is lost or throttled: the commit, and the look-up's own reads.
FAULTY_CALLS = ("TransactWriteItems", "ListShards", "ListObjectsV2", "GetObject")
CRASHED = "crashed after the S3 write"
REDELIVERED = "redelivered"
NONE = "none"
FAULTS = (NONE, NONE, NONE, CRASHED, ANSWER_LOST, THROTTLED, REDELIVERED)
NEW, WITHOUT_ID, RESENT, UNFLAGGED = "new", "without an id", "resent", "unflagged"
SENDS = (NEW, NEW, WITHOUT_ID, RESENT, RESENT, UNFLAGGED)


@dataclass
class Shard:
    shard_id: str
    hash_range: tuple[int, int]
    parents: tuple[str, ...] = ()
    records: list[IncomingRecord] = field(default_factory=list)
    closed: bool = False
    synced: bool = False  # shard sync recorded its lineage
    closed_in_table: bool = False  # shard sync closed it (OPEN -> CLOSED)
    position: int = 0  # the event source's: advances only on success

    def holds(self, key: str) -> bool:
        return self.hash_range[0] <= KEYS[key] <= self.hash_range[1]


class IdempotenceMachine(RuleBasedStateMachine):
    endpoint_url = ""

    def __init__(self) -> None:
        super().__init__()
        self.aws: AwsEnv = make_env(self.endpoint_url, shard_count=1)
        kinesis = self.aws.clients.kinesis
        summary = kinesis.describe_stream_summary(StreamName=self.aws.config.stream_name)
        self.stream_arn: str = summary["StreamDescriptionSummary"]["StreamARN"]
        self.clock = ManualClock()  # the writers' (leases)
        self.now_ms = 0  # arrival times, past BASE_ARRIVAL_MS
        self.sequence = itertools.count(1)
        self.ids = itertools.count()
        self.shards: dict[str, Shard] = {}
        self.sent: list[IncomingRecord] = []  # every record with an id, for resends
        self.writers = ModelWriters(self.aws, self.clock, LEASE_MS, dedupe_window_ms=WINDOW_MS)
        self.checked: dict[str, int] = {}
        self._expected: dict[tuple[str, int], list[IncomingRecord]] = {}
        self.tables_written = True  # a writer or shard sync ran since the last check
        self.tables = Tables(self.aws.clients, self.aws.config.tables)
        self.reader = LogReader(self.aws.clients, self.aws.config.bucket, self.aws.config.tables)
        self.fault = CallFault(self.aws.clients)
        self.discover()
        TALLY.add("schedules")

    # --- the stream ----------------------------------------------------------------------
    def discover(self) -> None:
        """New shards from ListShards (after a split or merge), with their parents."""
        for shard in list_shards(self.aws.clients.kinesis, self.aws.config.stream_name):
            if shard["ShardId"] not in self.shards:
                low, high = (
                    int(shard["HashKeyRange"][k]) for k in ("StartingHashKey", "EndingHashKey")
                )
                self.shards[shard["ShardId"]] = Shard(
                    shard["ShardId"], (low, high), parents_of(shard)
                )

    def open_shards(self) -> list[Shard]:
        return sorted((s for s in self.shards.values() if not s.closed), key=lambda s: s.hash_range)

    def shard_for(self, key: str) -> Shard:
        return next(s for s in self.open_shards() if s.holds(key))

    def writer(self, container: int) -> LogWriter:
        """A fresh writer (container 0), or the one a warm container keeps (ModelWriters)."""
        self.tables_written = True
        return self.writers.writer(container)

    # --- the spec --------------------------------------------------------------------------
    def ancestors(self, shard: Shard) -> list[Shard]:
        found: list[Shard] = []
        pending = list(shard.parents)
        while pending:
            parent = self.shards[pending.pop()]
            if parent not in found:
                found.append(parent)
                pending.extend(parent.parents)
        return found

    def expected(self, shard: Shard) -> list[IncomingRecord]:
        """The shard's records as the documented guarantee keeps them (module doc). Records
        are only ever appended to a shard, and a parent's are final once it has children."""
        key = (shard.shard_id, len(shard.records))
        if key not in self._expected:
            reached, kept = self.reached_in_ancestors(shard), []
            for record in shard.records:
                if not _dropped(record, reached):
                    kept.append(record)
                    _note(reached, record)
            self._expected[key] = kept
        return self._expected[key]

    def reached_in_ancestors(self, shard: Shard) -> dict[str, int]:
        """Each id's latest arrival among the records the ancestors kept."""
        reached: dict[str, int] = {}
        for ancestor in self.ancestors(shard):
            for record in self.expected(ancestor):
                _note(reached, record)
        return reached

    def pick(self, data: st.DataObject) -> Shard | None:
        ready = [s for s in self.shards.values() if self.deliverable(s)]
        return (
            data.draw(st.sampled_from(sorted(ready, key=lambda s: s.shard_id))) if ready else None
        )

    def deliverable(self, shard: Shard) -> bool:
        """Lambda reads a parent to its end before its children."""
        return self.parents_done(shard) and shard.position < len(shard.records)

    def parents_done(self, shard: Shard) -> bool:
        """Every parent read to its end, and so were its parents (an empty shard too waits
        for its parents: Lambda starts it only after them)."""
        for parent_id in shard.parents:
            parent = self.shards[parent_id]
            if not parent.closed or parent.position < len(parent.records):
                return False
            if not self.parents_done(parent):
                return False
        return True

    # --- rules: producers ------------------------------------------------------------------
    def send(self, record_id: str | None, key: str, data: bytes, resent: bool) -> IncomingRecord:
        record = IncomingRecord(
            key,
            data,
            str(SEQUENCE_BASE + 10 * next(self.sequence)),
            BASE_ARRIVAL_MS + self.now_ms,
            record_id,
            resent,
        )
        self.shard_for(key).records.append(record)
        if record_id is not None:
            self.sent.append(record)
        return record

    @rule(
        data=st.data(),
        kind=st.sampled_from(SENDS),
        key=st.sampled_from(sorted(KEYS)),
        count=st.integers(1, 3),
    )
    def produce(self, data: st.DataObject, kind: str, key: str, count: int) -> None:
        """New records (with ids, or a few without); or the same record again (same key,
        id and payload), flagged after an unknown outcome or unflagged by a producer that
        does not know it is one (often a recent one: its original may be in the same batch)."""
        if kind in (NEW, WITHOUT_ID) or not self.sent:
            for _ in range(count):
                number = next(self.ids)
                record_id = f"r{number}" if kind != WITHOUT_ID else None
                self.send(record_id, key, f"{key}:{number}".encode(), False)
            return
        recent = data.draw(st.booleans())
        original = data.draw(st.sampled_from(self.sent[-3:] if recent else self.sent))
        self.send(original.record_id, original.partition_key, original.data, kind == RESENT)
        TALLY.add("resend sent" if kind == RESENT else "unflagged resend")

    @rule(elapsed=st.sampled_from((1, 1_000, WINDOW_MS // 2, WINDOW_MS, WINDOW_MS + 1)))
    def time_passes(self, elapsed: int) -> None:
        self.now_ms += elapsed

    # --- rules: resharding and shard sync ----------------------------------------------------
    @rule(data=st.data(), change=st.sampled_from(("split", "merge", "shard sync")))
    def topology(self, data: st.DataObject, change: str) -> None:
        """Kinesis splits an open shard in two halves of its range, or merges two adjacent
        open shards (the parents close, new records go to the children); or shard sync
        runs."""
        shards = self.open_shards()
        if change == "shard sync":
            self.shard_sync()
        elif change == "merge" and len(shards) > 1:
            index = data.draw(st.integers(0, len(shards) - 2))
            self.merge(shards[index], shards[index + 1])
        else:
            self.split(data.draw(st.sampled_from(shards)))

    @rule(
        data=st.data(),
        change=st.sampled_from(("split", "merge", "split twice")),
        copy_in_parent=st.booleans(),
        sync_first=st.booleans(),
        crash_first=st.booleans(),
        container=st.integers(0, 2),
    )
    def resend_across_reshard(
        self,
        data: st.DataObject,
        change: str,
        copy_in_parent: bool,
        sync_first: bool,
        crash_first: bool,
        container: int,
    ) -> None:
        """The schedule this guarantee is about, on purpose: a record of an open shard
        (delivered, then resent there too: a copy at the shard's tail, when
        ``copy_in_parent``), then a split of its shard (or two, the first child split again
        before it took a record), or a merge with a neighbour; the record resent flagged, so
        it hashes to a child; shard sync before the delivery or not; then everything
        delivered, parents first (the resend's first batch crashed after its S3 write
        before, when ``crash_first``: a leftover with or without the copy to adopt)."""
        key = data.draw(st.sampled_from(sorted(KEYS)))
        number = next(self.ids)
        original = self.send(f"r{number}", key, f"{key}:{number}".encode(), False)
        shard = self.shard_for(key)
        if copy_in_parent:
            self.deliver_all(container)
            self.send(original.record_id, key, original.data, True)
        if change == "merge":
            shards = self.open_shards()
            if len(shards) < 2:
                return
            index = shards.index(shard)
            pair = shards[index : index + 2] if index + 1 < len(shards) else shards[index - 1 :]
            self.merge(*pair)
        else:
            self.split(shard)
            if change == "split twice":
                self.split(self.shard_for(key))
        self.now_ms += data.draw(st.sampled_from((1, WINDOW_MS, WINDOW_MS + 1)))
        resend = self.send(original.record_id, key, original.data, True)
        TALLY.add("resend sent")
        if sync_first:
            self.shard_sync()
        self.deliver_all(container, crash_before=resend if crash_first else None)

    def split(self, shard: Shard) -> None:
        if len(self.shards) > MAX_SHARDS - 2:
            return
        low, high = shard.hash_range
        self.aws.clients.kinesis.split_shard(
            StreamName=self.aws.config.stream_name,
            ShardToSplit=shard.shard_id,
            NewStartingHashKey=str((low + high) // 2 + 1),
        )
        shard.closed = True
        self.discover()
        TALLY.add("split")

    def merge(self, first: Shard, second: Shard) -> None:
        if len(self.shards) > MAX_SHARDS - 1:
            return
        self.aws.clients.kinesis.merge_shards(
            StreamName=self.aws.config.stream_name,
            ShardToMerge=first.shard_id,
            AdjacentShardToMerge=second.shard_id,
        )
        first.closed = second.closed = True
        self.discover()
        TALLY.add("merge")

    def shard_sync(self) -> None:
        """Shard sync's part: lineage recorded for every shard, closed shards CLOSED."""
        self.tables_written = True
        for shard in self.shards.values():
            if not shard.synced:
                register_partition(self.aws, shard.shard_id, shard.parents)
                shard.synced = True
            if shard.closed and not shard.closed_in_table:
                ending = (
                    shard.records[-1].kinesis_sequence_number
                    if shard.records
                    else str(SEQUENCE_BASE)
                )
                close(self.aws.clients, self.aws.config.partitions_table, shard.shard_id, ending)
                shard.closed_in_table = True
        TALLY.add("shard sync")

    # --- rules: ingest -----------------------------------------------------------------------
    @rule(
        data=st.data(),
        size=st.integers(1, 8),
        container=st.integers(0, 2),
        fault=st.sampled_from(FAULTS),
        operation=st.sampled_from(FAULTY_CALLS),
    )
    def deliver(
        self, data: st.DataObject, size: int, container: int, fault: str, operation: str
    ) -> None:
        """A batch of a shard whose parents are done, by a fresh or a warm writer: it is
        committed; or (a fault) the invocation crashes after its S3 write (a leftover for
        the next to adopt), or one call's answer is lost after AWS applied it, or is
        throttled past its retries, and the batch comes again (the position does not
        move); or Kinesis delivers records again from a few back."""
        if fault == REDELIVERED:
            self.redeliver(data, size)
            return
        shard = self.pick(data)
        if shard is None:  # nothing pending: a record with an id and a resent copy of it
            key = data.draw(st.sampled_from(sorted(KEYS)))
            number = next(self.ids)
            original = self.send(f"r{number}", key, f"{key}:{number}".encode(), False)
            self.send(original.record_id, key, original.data, True)
            shard = self.pick(data)
        if shard is None:
            return
        self.clock.advance(LEASE_MS)  # no crashed writer's live lease in the way
        if fault == CRASHED:
            self.crash(shard, size, container)
        elif fault == NONE:
            self.append(shard, size, container)
        else:
            self.faulty_append(shard, size, container, fault, operation)

    def crash(self, shard: Shard, size: int, container: int) -> None:
        """The shard's next ``size`` records prepared (segments in S3), never committed."""
        batch = shard.records[shard.position : shard.position + size]
        self.writer(container).prepare(shard.shard_id, batch, stream=self.stream_arn)
        if any(r.resent for r in batch):
            TALLY.add("resend in a batch crashed after its S3 write")

    def append(self, shard: Shard, size: int, container: int) -> None:
        """The shard's next ``size`` records, delivered: they are committed (or dropped)."""
        batch = shard.records[shard.position : shard.position + size]
        closed_before = shard.closed_in_table  # CLOSED, or ENDED already
        self.tally_resends(shard, shard.position, batch)
        result = self.writer(container).append(shard.shard_id, batch, stream=self.stream_arn)
        shard.position += len(batch)
        self.count(result)
        if closed_before and shard.position == len(shard.records):
            # The batch reached the end of a shard the table knew CLOSED: it ends it.
            assert self.state(shard) == C.STATE_ENDED, f"{shard.shard_id} left CLOSED at its end"
            if not result.committed:
                TALLY.add("closed shard ended by a batch with nothing new")

    def faulty_append(
        self, shard: Shard, size: int, container: int, fault: str, operation: str
    ) -> None:
        batch = shard.records[shard.position : shard.position + size]
        self.fault.arm(fault, operation)
        try:
            self.count(self.writer(container).append(shard.shard_id, batch, stream=self.stream_arn))
            shard.position += len(batch)
        except (BotoCoreError, ClientError, LeaseLostError, CommitConflictError) as exc:
            TALLY.add(f"invocation failed ({type(exc).__name__})")
        finally:
            injected = self.fault.disarm()
        if injected is not None:
            TALLY.add(injected)

    def redeliver(self, data: st.DataObject, back: int) -> None:
        started = sorted(
            (s for s in self.shards.values() if s.position > 0), key=lambda s: s.shard_id
        )
        if started:
            shard = data.draw(st.sampled_from(started))
            shard.position = max(0, shard.position - back)
            TALLY.add("redelivery")

    # --- helpers -----------------------------------------------------------------------------
    def state(self, shard: Shard) -> str | None:
        partition = self.tables.get_partition(shard.shard_id)
        return None if partition is None else partition.state

    def tally_resends(self, shard: Shard, start: int, batch: list[IncomingRecord]) -> None:
        """What kind of resend each flagged record of the batch is, and what the guarantee
        does with it (for MUST_REACH)."""
        before_sync = not shard.synced
        in_ancestors = self.reached_in_ancestors(shard)
        in_shard: dict[str, int] = {}
        for record in shard.records[:start]:
            if not _dropped(record, _merged(in_ancestors, in_shard)):
                _note(in_shard, record)
        batch_ids: set[str] = set()
        for record in batch:
            if record.resent and record.record_id is not None:
                self.tally_one(shard, record, in_ancestors, in_shard, batch_ids, before_sync)
            if record.record_id is not None and not _dropped(
                record, _merged(in_ancestors, in_shard)
            ):
                _note(in_shard, record)
                batch_ids.add(record.record_id)

    def tally_one(
        self,
        shard: Shard,
        record: IncomingRecord,
        in_ancestors: dict[str, int],
        in_shard: dict[str, int],
        batch_ids: set[str],
        before_sync: bool,
    ) -> None:
        record_id = record.record_id or ""
        latest = _merged(in_ancestors, in_shard).get(record_id)
        if latest is None:
            return  # its original is still on its way (or was never sent with this id)
        age = record.arrival_ms - latest
        TALLY.add("resend dropped" if age <= WINDOW_MS else "resend past the window")
        if age == WINDOW_MS:
            TALLY.add("resend at the window's edge")
        if record_id in batch_ids:
            TALLY.add("resend in the batch of its original")
        only_in_ancestors = in_shard.get(record_id, -1) < record.arrival_ms - WINDOW_MS
        if age <= WINDOW_MS and only_in_ancestors:
            TALLY.add(f"resend into a child {'before' if before_sync else 'after'} shard sync")
            if len(shard.parents) == 2:
                TALLY.add("resend after a merge")
            ancestors = self.ancestors(shard)
            if any(self.tables.get_partition(a.shard_id) is None for a in ancestors):
                TALLY.add("resend through a shard with no item")

    def count(self, result: AppendResult) -> None:
        TALLY.add("batch committed" if result.committed else "batch with nothing new")
        TALLY.add("copy dropped by ingest", result.deduplicated)
        TALLY.add("segment adopted", result.segments_adopted)
        TALLY.add("redelivered record dropped", result.redelivered)
        if result.ended:
            TALLY.add("partition ended by the commit")

    # --- checks ----------------------------------------------------------------------------
    @invariant()
    def each_log_is_a_prefix_of_its_expected_log(self) -> None:
        """After every step: what each head grew by is, dense, exactly the expected log's
        next records (segments are write-once: records verified once are not re-read); a
        partition is ENDED only with its whole shard in its log."""
        TALLY.add("steps")
        if not self.tables_written:
            return  # nothing wrote the tables or the log since the last check
        self.tables_written = False
        for partition in self.tables.list_partitions():  # one consistent Scan
            shard = self.shards[partition.partition_id]
            checked, head = self.checked.get(shard.shard_id, 0), partition.next_seq
            assert head >= checked, f"{shard.shard_id}: the head went back {checked} -> {head}"
            if partition.state == C.STATE_ENDED:
                assert shard.closed, f"{shard.shard_id}: ENDED while its shard is open"
                assert head == len(self.expected(shard)), f"{shard.shard_id}: ENDED early"
            if head == checked:
                continue
            logged = list(self.reader.store.records(shard.shard_id, checked, head))
            expected = self.expected(shard)[checked:head]
            assert [(r.kinesis_sequence_number, r.record_id) for r in logged] == [
                (r.kinesis_sequence_number, r.record_id) for r in expected
            ], f"{shard.shard_id}: the log is not a prefix of what the guarantee keeps"
            self.checked[shard.shard_id] = head

    def deliver_all(self, container: int, crash_before: IncomingRecord | None = None) -> None:
        """Every record delivered, parents first, batches of up to 5 records; the batch
        holding ``crash_before`` crashed once after its S3 write before it is delivered."""
        self.clock.advance(LEASE_MS)
        for _ in range(100):
            pending = sorted(
                (s for s in self.shards.values() if self.deliverable(s)), key=lambda s: s.shard_id
            )
            if not pending:
                return
            for shard in pending:
                if crash_before is not None and crash_before in shard.records[shard.position :][:5]:
                    self.crash(shard, 5, container)
                    self.clock.advance(LEASE_MS)
                    crash_before = None
                self.append(shard, 5, container)
        raise AssertionError("records left undelivered")

    def teardown(self) -> None:
        self.shard_sync()
        self.deliver_all(0)
        for shard in self.shards.values():
            logged = [
                (r.kinesis_sequence_number, r.record_id)
                for r in self.reader.records(shard.shard_id)
            ]
            expected = [(r.kinesis_sequence_number, r.record_id) for r in self.expected(shard)]
            assert logged == expected, f"{shard.shard_id}: the log is not what the guarantee keeps"


def _dropped(record: IncomingRecord, reached: dict[str, int]) -> bool:
    """The guarantee: a resent record whose id reached the log at most the window before."""
    if not record.resent or record.record_id is None:
        return False
    return reached.get(record.record_id, -1) >= record.arrival_ms - WINDOW_MS


def _note(reached: dict[str, int], record: IncomingRecord) -> None:
    if record.record_id is not None:
        reached[record.record_id] = max(reached.get(record.record_id, -1), record.arrival_ms)


def _merged(first: dict[str, int], second: dict[str, int]) -> dict[str, int]:
    merged = dict(first)
    for record_id, arrival in second.items():
        merged[record_id] = max(merged.get(record_id, -1), arrival)
    return merged


def test_idempotence_model(endpoint_url: str) -> None:
    run_model(IdempotenceMachine, endpoint_url, TALLY, MUST_REACH, examples=8, steps=25)
