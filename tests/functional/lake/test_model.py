"""Model-based test of the lake table: compaction and maintenance under every fault of the
catalog and every crash, on the embedded AWS (moto's Glue, with Glue's VersionId check,
and S3), with real pyiceberg and the compaction's own driver steps
(``shardlog.spark.compaction.run_compaction``); the executors' write step is plain pyarrow
(``write_data_files``), as Spark adds nothing to what is checked here.

Each compaction or maintenance run is a process of its own: its own clients and its own
catalog (pyiceberg's Glue client), so a fault touches it alone. The faults, reached on
purpose and counted (``TALLY``; the test asserts each dangerous kind happened):

- **lost catalog answer**: Glue applies the run's ``UpdateTable``, the answer is lost and
  botocore resends it; Glue refuses the resend (its VersionId is no longer current). Once,
  or for every attempt; and with another process acting between the applied request and
  the resend (a racing compaction, maintenance, another engine);
- **refused catalog answer**: another process commits just before one of the run's calls
  (its plan, pyiceberg's GetTable, its UpdateTable): Glue or pyiceberg refuses the commit;
- **racing compaction**, **maintenance racing a compaction** (expiry, or the rewrite of the
  day's small files, commits while the compaction's files wait for its commit), **foreign
  snapshot** (plain pyiceberg appends a file, sets a property or tags a snapshot, without
  shardlog's watermarks);
- **crash** before or after any AWS call of a compaction (plan, write, commit, remove,
  mirror) or a maintenance run (expiry, or the rewrite's commit when there is nothing to
  expire; orphan removal): a ``BaseException`` nothing in the code catches, as a killed
  process.

Checked after every step: the table is readable (a full scan succeeds, and every file any
snapshot references exists); per log partition it holds exactly the records below its
watermark, each once, as the log has them (another engine's rows apart); the watermark
never passes the head. A run's answer is the truth: a run that says it committed has its
snapshot (or its files) in the table, a run that says it lost a race has none. A run
without interference reaches the head. scripts/soak.py runs this machine for longer.
"""

from __future__ import annotations

import io
import itertools
import threading
import uuid
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pyarrow.parquet as pq
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
)

from shardlog.aws import Clients
from shardlog.clock import ManualClock
from shardlog.lake.catalog import open_table
from shardlog.lake.commit import own_snapshot, table_watermarks
from shardlog.lake.exceptions import LakeCommitUnknownError
from shardlog.lake.files import s3_uri, write_data_files
from shardlog.lake.maintenance import maintain
from shardlog.lake.rewrite import RewriteSettings
from shardlog.lake.settings import LakeSettings
from shardlog.reader import LogReader
from shardlog.segments import SegmentStore
from shardlog.spark.compaction import BatchPlan, CompactionReport, run_compaction
from shardlog.spark.jobs import JobArgs
from tests.support.aws import AwsEnv, make_env
from tests.support.factories import incoming_records, register_partition, writer_for
from tests.support.faults import LostAnswer
from tests.support.lake import foreign_add_files
from tests.support.schedules import Tally, run_model

PARTITIONS = ("p0", "p1")
TALLY = Tally()
# What every run must reach.
MUST_REACH = (
    "lost catalog answer",
    "lost catalog answer, resend refused",
    "every catalog answer lost",
    "own commit recognised after a lost answer",
    "refused catalog answer",
    "racing compaction",
    "racing compaction lost the race",
    "maintenance racing a compaction",
    "foreign snapshot",
    "crash in compaction plan",
    "crash in compaction write",
    "crash in compaction commit",
    "crash in compaction remove",
    "crash in compaction mirror",
    "crash in maintenance expiry",
    "crash in maintenance orphan removal",
    "snapshots expired",
    "orphans removed",
    "days rewritten",
)
RACERS = ("compaction", "maintenance", "foreign append", "foreign property", "foreign tag")
FOREIGN = ("foreign append", "foreign property", "foreign tag")
# Maintenance's clock against S3's: objects are seconds old. "Racing" maintenance runs two
# hours ahead: every snapshot is past the 1 h retention, every object within the 3 h grace
# (a compaction in flight is always younger than the grace: docs/LAKE.md). "Late"
# maintenance runs four hours ahead, between runs: orphans are past the grace too.
RETENTION = timedelta(hours=1)
GRACE = timedelta(hours=3)
RACING_AHEAD = timedelta(hours=2)
LATE_AHEAD = timedelta(hours=4)
# Every file here is small: maintenance rewrites each day's files (one per partition per
# compaction run) into one per partition (shardlog.lake.rewrite).
REWRITE = RewriteSettings(target_file_bytes=2**20, small_file_bytes=2**20)


class Crash(BaseException):
    """The process dies here: nothing in the code catches it."""


class AtCall:
    """Actions at the n-th call of an operation by one process, across its clients and its
    catalog's Glue client: before the call (not sent) or after it (applied, answered)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._armed: list[tuple[str, int, str, Callable[[str], None]]] = []
        self.calls: list[str] = []

    def attach(self, target: Any) -> None:
        """On a client's events, or on a ``Clients`` (every client it makes)."""
        register = target.add_hook if isinstance(target, Clients) else target.register
        register("before-call", self._before)
        register("after-call", self._after)

    def arm(self, when: str, operation: str, action: Callable[[str], None], nth: int = 1) -> None:
        with self._lock:
            self._armed.append((operation, nth, when, action))

    def _due(self, when: str, name: str) -> list[Callable[[str], None]]:
        with self._lock:
            if when == "before":
                self.calls.append(name)
            key = (name, self.calls.count(name), when)
            due = [a for o, n, w, a in self._armed if (o, n, w) == key]
            self._armed = [(o, n, w, a) for o, n, w, a in self._armed if (o, n, w) != key]
        return due

    def _before(self, model: Any = None, **_: Any) -> None:
        name = getattr(model, "name", "?")
        for action in self._due("before", name):
            action(name)

    def _after(self, model: Any = None, **_: Any) -> None:
        name = getattr(model, "name", "?")
        for action in self._due("after", name):
            action(name)


class Process:
    """One compaction or maintenance run: its clients, its catalog and table, its faults."""

    def __init__(self, aws: AwsEnv, lake: LakeSettings) -> None:
        self.clients = aws.fresh_clients()
        self.table = open_table(lake, create=True)
        glue = self.table.catalog.glue  # type: ignore[attr-defined]
        self.lost = LostAnswer(glue, "UpdateTable")
        self.at = AtCall()
        self.at.attach(glue.meta.events)
        self.at.attach(self.clients)
        self.refused = 0
        glue.meta.events.register("after-call.glue.UpdateTable", self._count_refusal)

    def _count_refusal(self, parsed: Any = None, **_: Any) -> None:
        if (parsed or {}).get("Error", {}).get("Code") == "ConcurrentModificationException":
            self.refused += 1


COMPACTION_STEPS = {
    "Scan": "plan",
    "ListObjectsV2": "plan",
    "GetObject": "plan",
    "PutObject": "write",
    "GetTable": "commit",
    "GetDatabase": "commit",
    "UpdateTable": "commit",
    "DeleteObjects": "remove",
    "Query": "mirror",
    "GetItem": "mirror",
    "UpdateItem": "mirror",
}
MAINTENANCE_STEPS = {"ListObjectsV2": "orphan removal", "DeleteObjects": "orphan removal"}
# Where a compaction crashes: (before or after, the call), one point of each step of the
# run (plan, write, commit not sent, commit applied, mirror); a crash while it removes its
# files needs a lost race (``racing_compaction``).
COMPACTION_CRASHES = (
    ("after", "ListObjectsV2"),
    ("after", "PutObject"),
    ("before", "UpdateTable"),
    ("after", "UpdateTable"),
    ("after", "UpdateItem"),
)
MAINTENANCE_CRASHES = (
    ("before", "UpdateTable"),
    ("after", "UpdateTable"),
    ("after", "ListObjectsV2"),
    ("after", "DeleteObjects"),
)
# Where another process acts while a compaction waits: before its plan, its first file,
# its read before the commit, pyiceberg's read in the commit, and the commit itself.
RACE_POINTS = (
    ("Scan", 1),
    ("PutObject", 1),
    ("GetTable", 1),
    ("GetTable", 2),
    ("UpdateTable", 1),
)


class LakeMachine(RuleBasedStateMachine):
    endpoint_url = ""

    def __init__(self) -> None:
        super().__init__()
        self.aws = make_env(self.endpoint_url, shard_count=1)
        self.lake = LakeSettings.for_deployment(
            self.aws.config.bucket,
            self.aws.config.region,
            self.endpoint_url,
            f"lake_{uuid.uuid4().hex[:10]}.events",
        )
        self.args = replace(
            JobArgs.from_config(self.aws.config, max_records=1_000_000),
            lake_table=self.lake.table,
        )
        self.writer = writer_for(self.aws, ManualClock(), segment_max_records=3)
        self.produced: dict[str, list[bytes]] = {p: [] for p in PARTITIONS}
        self.numbers = itertools.count()
        for partition in PARTITIONS:
            register_partition(self.aws, partition)
        self.reader = LogReader(self.aws.clients, self.aws.config.bucket, self.aws.config.tables)
        self.foreign_rows = 0
        self.lost_races: list[str] = []  # run ids that answered "another run appended first"
        self.view = open_table(self.lake, create=True)  # the checker's own reader
        self.files = TableFiles(self.view.io, self.aws.clients.s3, self.lake.bucket)
        # shardlog appends first: another engine's snapshot on a table no compaction has
        # appended to leaves where to resume unknown (shardlog.lake.commit refuses it).
        self.produce("p0", 3)
        self.compact()
        TALLY.add("schedules")

    def produce(self, partition: str, count: int) -> None:
        """The log grows: ``count`` records committed to ``partition``."""
        if count <= 0:
            return
        start = len(self.produced[partition])
        records = incoming_records(count, start=start + 1000 * PARTITIONS.index(partition))
        self.writer.append(partition, records)
        self.produced[partition] += [r.data for r in records]

    # --- processes -----------------------------------------------------------------------
    def write_step(self, process: Process, run_id: str) -> Callable[[Sequence[BatchPlan]], Any]:
        store = SegmentStore(process.clients, self.aws.config.bucket)

        def write(plans: Sequence[BatchPlan]) -> list[dict[str, Any]]:
            files = []
            for plan in plans:
                segments = store.segments(plan.partition_id, plan.start, plan.end)
                written = write_data_files(process.clients.s3, self.lake, segments, run_id)
                files += [f.stats() for f in written]
            return files

        return write

    def compact(self, process: Process | None = None) -> CompactionReport | None:
        """One compaction run; its answer checked against the table. None: it crashed."""
        process = process or Process(self.aws, self.lake)
        report = CompactionReport(run_id=uuid.uuid4().hex[:16])
        try:
            run_compaction(
                process.clients,
                self.args,
                process.table,
                report,
                self.write_step(process, report.run_id),
            )
        except Crash:
            return None
        except LakeCommitUnknownError:
            TALLY.add("commit outcome unknown (nothing deleted)")
            return None
        finally:
            if process.refused:
                TALLY.add("refused catalog answer")
        self.check_answer(report)
        return report

    def maintain(self, ahead: timedelta, process: Process | None = None) -> None:
        process = process or Process(self.aws, self.lake)
        try:
            report = maintain(
                process.clients.s3,
                self.lake,
                process.table,
                datetime.now(UTC) + ahead,
                snapshot_retention=RETENTION,
                orphan_grace=GRACE,
                rewrite=REWRITE,
            )
        except Crash:
            return
        finally:
            if process.refused:
                TALLY.add("refused catalog answer")
        if report.expired_snapshots:
            TALLY.add("snapshots expired")
        if report.removed_files:
            TALLY.add("orphans removed")
        if report.rewritten:
            TALLY.add("days rewritten")

    def racer(self, kind: str) -> Callable[[], None]:
        """Another process acting while a run is paused (or between its request and the
        resend of its lost answer)."""

        def act() -> None:
            TALLY.add(f"racer: {kind}")
            if kind == "compaction":
                TALLY.add("racing compaction")
                self.compact()
            elif kind == "maintenance":
                self.maintain(RACING_AHEAD)
            else:
                self.foreign(kind)

        return act

    def foreign(self, kind: str) -> None:
        """Another engine commits through plain pyiceberg (no shardlog watermarks)."""
        table = open_table(self.lake, create=True)
        TALLY.add("foreign snapshot" if kind == "foreign append" else "foreign commit")
        if kind == "foreign append":
            foreign_add_files(self.aws, self.lake, self.foreign_rows, table)
            self.foreign_rows += 1
        elif kind == "foreign property":
            with table.transaction() as transaction:
                transaction.set_properties({"owner": f"team-{next(self.numbers)}"})
        else:
            oldest = min(table.snapshots(), key=lambda s: s.timestamp_ms, default=None)
            if oldest is not None:
                tag = f"audit-{next(self.numbers)}"
                table.manage_snapshots().create_tag(oldest.snapshot_id, tag).commit()

    # --- rules ---------------------------------------------------------------------------
    # Three of the dangerous kinds open every schedule (Hypothesis runs each @initialize rule
    # once, first), so the fixed schedule set of make test reaches them whatever it draws.
    @initialize(times=st.sampled_from((1, 11)), between=st.sampled_from((None, *RACERS)))
    def opening_lost_answer(self, times: int, between: str | None) -> None:
        self.lost_answer(2, times, between)

    @initialize(point=st.sampled_from(RACE_POINTS[2:]))
    def opening_maintenance_race(self, point: tuple[str, int]) -> None:
        self.maintenance_racing_a_compaction(2, point)

    @initialize(crash=st.sampled_from(MAINTENANCE_CRASHES[:2]))
    def opening_maintenance_crash(self, crash: tuple[str, str]) -> None:
        self.compaction_alone("p1", 1)  # a snapshot newer than the first: one to expire
        self.maintenance(late=False, lost=False, racer=None, crash=crash)
        self.maintenance(late=False, lost=False, racer=None, crash=("after", "ListObjectsV2"))

    @rule(partition=st.sampled_from(PARTITIONS), new=st.integers(0, 5))
    def compaction_alone(self, partition: str = "p0", new: int = 0) -> None:
        """Nothing interferes: the run commits and reaches every partition's head."""
        self.produce(partition, new)
        report = self.compact()
        assert report is not None and not report.conflicts, report
        marks = table_watermarks(self.view.refresh())
        heads = {p: self.reader.head(p) for p in PARTITIONS}
        assert {p: marks.get(p, 0) for p in PARTITIONS} == heads, (marks, heads)
        TALLY.add("compaction reached the head")

    @rule(
        new=st.integers(1, 4),
        times=st.sampled_from((1, 11)),
        between=st.sampled_from((None, *RACERS)),
    )
    def lost_answer(self, new: int, times: int, between: str | None) -> None:
        """The compaction's UpdateTable applied, its answer lost; botocore resends it (Glue
        refuses the resend); once, or every attempt; maybe with another process between."""
        self.produce("p0", new)
        process = Process(self.aws, self.lake)
        process.lost.arm(times, between=self.racer(between) if between else None)
        report = self.compact(process)
        if process.lost.lost:
            TALLY.add("lost catalog answer")
            TALLY.add("every catalog answer lost" if times > 1 else "lost catalog answer, once")
            if process.lost.resent and process.refused:
                TALLY.add("lost catalog answer, resend refused")
            if report is not None and report.snapshot_id is not None:
                TALLY.add("own commit recognised after a lost answer")

    @rule(
        new=st.integers(1, 4),
        point=st.sampled_from(RACE_POINTS[1:]),
        crash=st.sampled_from((None, ("before", "DeleteObjects"), ("after", "DeleteObjects"))),
    )
    def racing_compaction(
        self, new: int, point: tuple[str, int], crash: tuple[str, str] | None
    ) -> None:
        """Two compactions plan the same records; the other one commits while this one
        writes or commits: this one must lose the race whole (nothing of it in the table,
        its files removed unless referenced), maybe crashing while it removes them."""
        self.race(new, "compaction", point, crash)

    @rule(new=st.integers(1, 4), point=st.sampled_from(RACE_POINTS[2:]))
    def maintenance_racing_a_compaction(self, new: int, point: tuple[str, int]) -> None:
        """Maintenance (expiry commits, orphan removal lists) while a compaction's files wait
        for its commit: the files are young, so they stay, and the commit goes through."""
        if self.race(new, "maintenance", point, None):
            TALLY.add("maintenance racing a compaction")

    @rule(
        new=st.integers(1, 4),
        racer=st.sampled_from(FOREIGN),
        point=st.sampled_from(RACE_POINTS),
        crash=st.sampled_from((None, None, *COMPACTION_CRASHES)),
    )
    def racing_another_engine(
        self, new: int, racer: str, point: tuple[str, int], crash: tuple[str, str] | None
    ) -> None:
        """Another engine commits just before one of the compaction's calls (a refused
        commit when it is the commit's), and the compaction may crash at one of its steps."""
        self.race(new, racer, point, crash)

    def race(
        self, new: int, racer: str, point: tuple[str, int], crash: tuple[str, str] | None
    ) -> bool:
        """A compaction with ``racer`` acting before its call ``point``; whether it acted."""
        self.produce("p1", new)
        process = Process(self.aws, self.lake)
        raced: list[str] = []
        process.at.arm("before", point[0], raced.append, nth=point[1])
        process.at.arm("before", point[0], lambda _: self.racer(racer)(), nth=point[1])
        if crash is not None:
            process.at.arm(*crash, self.crash("compaction"))
        report = self.compact(process)
        if (report is not None and report.conflicts) or "DeleteObjects" in process.at.calls:
            TALLY.add("racing compaction lost the race")  # only a lost race removes files
        return bool(raced)

    @rule(new=st.integers(1, 3), first=st.integers(0, len(COMPACTION_CRASHES) - 1))
    def crash_in_compaction(self, new: int, first: int) -> None:
        """Two compactions in turn, each dying at one step (two consecutive points of
        ``COMPACTION_CRASHES``), each with new records to write."""
        for turn in (first, first + 1):
            self.produce("p0", new)
            process = Process(self.aws, self.lake)
            process.at.arm(
                *COMPACTION_CRASHES[turn % len(COMPACTION_CRASHES)], self.crash("compaction")
            )
            self.compact(process)

    @rule(
        late=st.booleans(),
        lost=st.booleans(),
        racer=st.sampled_from((None, "compaction", "foreign append")),
        crash=st.sampled_from(MAINTENANCE_CRASHES),
    )
    def maintenance(
        self, late: bool, lost: bool, racer: str | None, crash: tuple[str, str]
    ) -> None:
        """Maintenance (expiry, then orphan removal): its expiry's answer maybe lost,
        another process maybe committing just before its expiry. Late (every orphan past
        the grace) it runs to its end; otherwise it dies at one of its steps if it gets
        that far (with nothing to expire, it does not)."""
        self.produce("p1", 1)  # something for a racing compaction to commit
        process = Process(self.aws, self.lake)
        if lost:
            process.lost.arm(1)
        if racer is not None:
            process.at.arm("before", "UpdateTable", lambda _: self.racer(racer)())
        if not late:
            process.at.arm(*crash, self.crash("maintenance"))
        self.maintain(LATE_AHEAD if late else RACING_AHEAD, process)
        if process.lost.lost:
            TALLY.add("lost catalog answer (maintenance)")

    @rule(kind=st.sampled_from(FOREIGN))
    def another_engine(self, kind: str) -> None:
        """Another engine commits between runs: its snapshot (no watermarks) is the current
        one when the next maintenance or compaction comes."""
        self.foreign(kind)

    def crash(self, job: str) -> Callable[[str], None]:
        steps = COMPACTION_STEPS if job == "compaction" else MAINTENANCE_STEPS

        def die(operation: str) -> None:
            TALLY.add(f"crash in {job} {steps.get(operation, 'expiry')}")
            raise Crash(f"{job} dies at {operation}")

        return die

    # --- checks --------------------------------------------------------------------------
    def check_answer(self, report: CompactionReport) -> None:
        """A run's answer is the truth."""
        table = self.view.refresh()
        files = self.files.referenced(table, self.present())
        if report.snapshot_id is not None:
            assert own_snapshot(table, report.run_id) is not None or any(
                report.run_id in f for f in files
            ), f"run {report.run_id} says it committed; the table does not have it"
        if report.conflicts:
            assert own_snapshot(table, report.run_id) is None
            assert not any(report.run_id in f for f in files), (
                f"run {report.run_id} says it lost a race; the table references its files"
            )
            self.lost_races.append(report.run_id)

    def present(self) -> set[str]:
        pages = self.aws.clients.s3.get_paginator("list_objects_v2").paginate(
            Bucket=self.lake.bucket, Prefix=self.lake.key_prefix
        )
        return {
            s3_uri(self.lake.bucket, o["Key"]) for page in pages for o in page.get("Contents", [])
        }

    @invariant()
    def the_table_holds_exactly_the_log_below_its_watermarks(self) -> None:
        """Every file a snapshot references exists (so a scan succeeds), and the current
        snapshot holds per log partition exactly the records below its watermark, once
        each, as the log has them; the watermark is at most the head."""
        TALLY.add("steps")
        table = self.view.refresh()
        self.files.referenced(table, self.present())  # fails on a missing file
        rows = self.files.rows(table)
        assert len(rows.pop("foreign", [])) == self.foreign_rows
        marks = table_watermarks(table) if table.current_snapshot() is not None else {}
        for pid in PARTITIONS:
            mark = marks.get(pid, 0)
            assert mark <= self.reader.head(pid), f"{pid}: watermark {mark} past the head"
            assert sorted(rows.pop(pid, [])) == list(enumerate(self.produced[pid][:mark])), (
                f"{pid}: the table does not hold exactly seqs 0..{mark - 1} once each"
            )
        assert not rows, f"rows of no partition: {sorted(rows)}"
        for run_id in self.lost_races:
            assert own_snapshot(table, run_id) is None

    def teardown(self) -> None:
        """A run with nothing in its way reaches every head; a full scan reads it all."""
        try:
            self.compaction_alone()
            self.the_table_holds_exactly_the_log_below_its_watermarks()
            scanned = self.view.refresh().scan().to_arrow()
            held = sum(len(self.produced[p]) for p in PARTITIONS) + self.foreign_rows
            assert scanned.num_rows == held
        finally:
            TALLY.add("steps", -1)


class TableFiles:
    """What the table references, read through caches: manifest lists, manifests and data
    files never change once written, so each is read once per schedule."""

    def __init__(self, io: Any, s3: Any, bucket: str) -> None:
        self.io, self.s3, self.bucket = io, s3, bucket
        self._manifests: dict[str, list[Any]] = {}
        self._entries: dict[str, list[tuple[bool, str]]] = {}  # (live, path)
        self._rows: dict[str, list[tuple[str, int, bytes]]] = {}

    def referenced(self, table: Any, present: set[str]) -> set[str]:
        """Every file a snapshot or the metadata references; each must be in ``present``
        (checked before it is read, so a deleted one is named)."""
        files = {table.metadata_location} | {e.metadata_file for e in table.metadata.metadata_log}
        files |= {s.statistics_path for s in table.metadata.statistics}
        for snapshot in table.snapshots():
            files.add(self._present(snapshot.manifest_list, present))
            for manifest in self.manifests(snapshot):
                files.add(self._present(manifest.manifest_path, present))
                files |= {path for _, path in self.entries(manifest)}
        missing = files - present
        assert not missing, f"referenced but not in S3: {sorted(missing)[:3]}"
        return files

    def manifests(self, snapshot: Any) -> list[Any]:
        if snapshot.manifest_list not in self._manifests:
            self._manifests[snapshot.manifest_list] = list(snapshot.manifests(self.io))
        return self._manifests[snapshot.manifest_list]

    def entries(self, manifest: Any) -> list[tuple[bool, str]]:
        from pyiceberg.manifest import ManifestEntryStatus

        if manifest.manifest_path not in self._entries:
            self._entries[manifest.manifest_path] = [
                (e.status != ManifestEntryStatus.DELETED, e.data_file.file_path)
                for e in manifest.fetch_manifest_entry(self.io, discard_deleted=False)
            ]
        return self._entries[manifest.manifest_path]

    def rows(self, table: Any) -> dict[str, list[tuple[int, bytes]]]:
        """The current snapshot's rows by partition: (seq, data) (after ``referenced``)."""
        snapshot = table.current_snapshot()
        out: dict[str, list[tuple[int, bytes]]] = {}
        if snapshot is None:
            return out
        for manifest in self.manifests(snapshot):
            for live, path in self.entries(manifest):
                for pid, seq, data in self.read(path) if live else ():
                    out.setdefault(pid, []).append((seq, data))
        return out

    def read(self, uri: str) -> list[tuple[str, int, bytes]]:
        if uri not in self._rows:
            key = uri.removeprefix(f"s3://{self.bucket}/")
            body = self.s3.get_object(Bucket=self.bucket, Key=key)["Body"].read()
            data = pq.read_table(io.BytesIO(body), columns=["partition_id", "seq", "data"])
            self._rows[uri] = list(
                zip(
                    data["partition_id"].to_pylist(),
                    data["seq"].to_pylist(),
                    data["data"].to_pylist(),
                    strict=True,
                )
            )
        return self._rows[uri]

    @staticmethod
    def _present(path: str, present: set[str]) -> str:
        assert path in present, f"referenced but not in S3: {path}"
        return path


def test_lake_model(endpoint_url: str) -> None:
    run_model(LakeMachine, endpoint_url, TALLY, MUST_REACH, examples=6, steps=11)
