"""The smoke test's steps, run in order against a deployed stack (``SmokeTest.run``).

Every step is one small method that returns its one-line result or raises ``StepFailed``;
the first failure ends the run (each step needs what the ones before it did). An AWS
error inside a step (a refusal, a missing resource) fails that step too, and keeps the
error as its cause; credentials or an endpoint that are missing altogether are the
caller's to report, so they pass through (``shardlog smoke`` exits 2 on them).

Waiting is bounded and injectable: a step that waits calls ``_poll`` with a check that
answers (done, what it saw); between checks ``_poll`` calls ``wait(poll_s)`` (by default the
clock's sleep); past ``timeout_s`` of the clock the step fails, naming what it last saw.
No step assumes the stack is idle: it looks only at the records it produced (their keys
and record ids, from the heads it saw before producing) and at consumers' progress past
them.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any

from botocore.exceptions import ClientError

from shardlog import constants as C
from shardlog.api_client import ApiClient
from shardlog.aws import Clients
from shardlog.clock import Clock, SystemClock
from shardlog.consumer.status import group_progress
from shardlog.exceptions import NotFoundError, ShardlogError
from shardlog.outcomes import Outcome, PutResult
from shardlog.producer import Producer
from shardlog.reader import LogReader
from shardlog.records import ProducerRecord
from shardlog.smoke.counts import RowCounter
from shardlog.spark.jobs import COMPACT, JobArgs
from shardlog.spark.trigger import TERMINAL_STATES, SparkTrigger
from shardlog.stack import DeployedStack
from shardlog.tables import Tables

API, SDK = "api", "sdk"
RECORDS_PER_PATH = 10
KEYS_PER_PATH = 2
# Counting rows arrived since the run began, less this much for clocks that disagree.
ARRIVAL_MARGIN = timedelta(minutes=10)
STEPS = (
    "produce-api",
    "produce-sdk",
    "committed",
    "read-back",
    "lambda-consumers",
    "compaction",
    "athena",
)


class StepFailed(ShardlogError):
    def __init__(self, step: str, reason: str) -> None:
        super().__init__(f"{step}: {reason}")
        self.step = step
        self.reason = reason


@dataclass(frozen=True)
class StepResult:
    step: str
    ok: bool
    line: str  # what it found, or why it failed
    seconds: float
    cause: BaseException | None = None

    def as_json(self) -> dict[str, Any]:
        return {"step": self.step, "ok": self.ok, "detail": self.line, "seconds": self.seconds}


@dataclass
class SmokeReport:
    stack: str
    run_id: str
    steps: list[StepResult] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return len(self.steps) == len(STEPS) and all(s.ok for s in self.steps)

    @property
    def failed(self) -> StepResult | None:
        return next((s for s in self.steps if not s.ok), None)


@dataclass(frozen=True)
class SmokeRecord:
    path: str  # API or SDK
    record: ProducerRecord
    n: int  # its place among its key's records
    put: PutResult | None = None

    @property
    def record_id(self) -> str:
        assert self.record.record_id is not None
        return self.record.record_id


def new_run_id(clock: Clock) -> str:
    """A run's id: when it began (UTC, to the second) and six random hex digits."""
    began = datetime.fromtimestamp(clock.now_ms() / 1000, UTC).strftime("%Y%m%dT%H%M%S")
    return f"{began}-{uuid.uuid4().hex[:6]}"


def smoke_records(run_id: str, path: str) -> list[SmokeRecord]:
    """RECORDS_PER_PATH records over KEYS_PER_PATH keys of their own (a key goes through one
    path only, so its order is the order it was sent in); data is JSON naming the run."""
    records = []
    for i in range(RECORDS_PER_PATH):
        key = f"shardlog-smoke-{run_id}-{path}-{i % KEYS_PER_PATH}"
        n = i // KEYS_PER_PATH
        data = json.dumps({"shardlogSmoke": run_id, "k": key, "n": n}).encode()
        record_id = f"smoke-{run_id}:{path}:{i}"
        records.append(SmokeRecord(path, ProducerRecord(key, data, record_id=record_id), n))
    return records


class SmokeTest:
    def __init__(
        self,
        stack: DeployedStack,
        clients: Clients,
        counter: RowCounter,
        *,
        api_url: str | None = None,
        clock: Clock | None = None,
        wait: Callable[[float], None] | None = None,
        timeout_s: float = 900.0,
        poll_s: float = 2.0,
        run_id: str | None = None,
    ) -> None:
        self.stack = stack
        self.config = stack.config()
        self.clients = clients
        self.counter = counter
        self.api_url = api_url or stack.api_url
        self.clock = clock or SystemClock()
        self.wait = wait or self.clock.sleep
        self.timeout_s = timeout_s
        self.poll_s = poll_s
        self.run_id = run_id or new_run_id(self.clock)
        self.tables = Tables(clients, self.config.tables)
        self.began = datetime.fromtimestamp(self.clock.now_ms() / 1000, UTC)
        self.heads_before: dict[str, int] | None = None
        self.produced: list[SmokeRecord] = []
        self.ends: dict[str, int] = {}  # partition -> one past the seq of its last smoke record

    # --- running -------------------------------------------------------------------------
    def run(self, on_step: Callable[[StepResult], None] = lambda _r: None) -> SmokeReport:
        report = SmokeReport(self.stack.name, self.run_id)
        for name, step in zip(STEPS, self._steps(), strict=True):
            started = self.clock.now_ms()
            try:
                line, ok, cause = step(), True, None
            except StepFailed as exc:
                line, ok, cause = exc.reason, False, exc.__cause__
            except (ClientError, ShardlogError) as exc:  # refused, missing, invalid: this step's
                line, ok, cause = str(exc), False, exc
            result = StepResult(name, ok, line, (self.clock.now_ms() - started) / 1000, cause)
            report.steps.append(result)
            on_step(result)
            if not ok:
                break
        return report

    def _steps(self) -> Iterator[Callable[[], str]]:
        yield self.produce_api
        yield self.produce_sdk
        yield self.committed
        yield self.read_back
        yield self.lambda_consumers
        yield self.compaction
        yield self.athena

    def _poll(self, step: str, check: Callable[[], tuple[bool, str]]) -> str:
        """Check until done or out of time (``timeout_s`` of the clock); what it saw last."""
        deadline = self.clock.now_ms() + int(self.timeout_s * 1000)
        while True:
            done, seen = check()
            if done:
                return seen
            if self.clock.now_ms() >= deadline:
                raise StepFailed(step, f"timed out after {self.timeout_s:g} s: {seen}")
            self.wait(self.poll_s)

    # --- 1, 2: produce -------------------------------------------------------------------
    def produce_api(self) -> str:
        self._heads_before()
        api = self.api_client()
        records = smoke_records(self.run_id, API)
        return self._produced("produce-api", records, api.put_records([r.record for r in records]))

    def api_client(self) -> ApiClient:
        """The producer API's client: SigV4-signed with this session's credentials unless the
        URL is on loopback, for the region in an execute-api URL (else the session's)."""
        return ApiClient(self.api_url, session=self.clients.session, idempotent=True)

    def produce_sdk(self) -> str:
        producer = Producer(self.config.stream_name, self.clients, idempotent=True)
        records = smoke_records(self.run_id, SDK)
        outcomes = producer.try_put_records([r.record for r in records])
        return self._produced("produce-sdk", records, outcomes)

    def _heads_before(self) -> None:
        if self.heads_before is None:  # the log's heads before the first smoke record
            self.heads_before = {p.partition_id: p.next_seq for p in self.tables.list_partitions()}

    def _produced(self, step: str, records: list[SmokeRecord], outcomes: list[Outcome]) -> str:
        failed = [
            (r, o) for r, o in zip(records, outcomes, strict=True) if not isinstance(o, PutResult)
        ]
        if failed:
            record, outcome = failed[0]
            raise StepFailed(
                step,
                f"{len(failed)} of {len(records)} records not put; {record.record_id}: "
                f"{outcome.error_code}: {outcome.error_message}",
            )
        put = [_with_put(r, o) for r, o in zip(records, outcomes, strict=True)]
        self.produced += put
        shards = sorted({r.put.shard_id for r in put if r.put})
        where = self.api_url if step == "produce-api" else f"stream {self.config.stream_name}"
        return f"{len(put)} records with ids put through {where}, to {', '.join(shards)}"

    # --- 3: committed --------------------------------------------------------------------
    def committed(self) -> str:
        last: dict[str, int] = {}  # shard -> the highest sequence number put there
        for record in self.produced:
            assert record.put is not None
            seq = int(record.put.sequence_number)
            last[record.put.shard_id] = max(seq, last.get(record.put.shard_id, 0))

        def check() -> tuple[bool, str]:
            behind = []
            for shard, seq in sorted(last.items()):
                lease = self.tables.get_lease(C.INGEST_GROUP, shard)
                checkpoint = lease.checkpoint if lease else None
                if checkpoint is None or not checkpoint.isdigit() or int(checkpoint) < seq:
                    behind.append(shard)
            seen = f"ingest checkpoint of {len(last) - len(behind)} of {len(last)} shards past"
            return not behind, f"{seen} the smoke's records (behind: {', '.join(behind) or '-'})"

        self._poll("committed", check)
        return (
            f"all {len(self.produced)} records committed "
            f"(the ingest checkpoints of {len(last)} shard(s) past them)"
        )

    # --- 4: read back --------------------------------------------------------------------
    def read_back(self) -> str:
        wanted = {r.record_id: r for r in self.produced}
        found: dict[str, list[tuple[str, int, bytes]]] = {}
        reader = LogReader(self.clients, self.config.bucket, self.config.tables)
        partitions = sorted({r.put.shard_id for r in self.produced if r.put})
        heads = self.heads_before or {}
        for partition_id in partitions:
            for record in reader.records(partition_id, heads.get(partition_id, 0)):
                if record.record_id in wanted:
                    found.setdefault(record.record_id, []).append(
                        (partition_id, record.seq, record.data)
                    )
        problems = _exactly_once(wanted, found)
        if problems:
            raise StepFailed("read-back", "; ".join(problems[:5]))
        for copies in found.values():
            partition_id, seq, _ = copies[0]
            self.ends[partition_id] = max(seq + 1, self.ends.get(partition_id, 0))
        return (
            f"{len(found)} records read back from the log, each id once, each key in order "
            f"({', '.join(f'{p} to seq {e - 1}' for p, e in sorted(self.ends.items()))})"
        )

    # --- 5: Lambda consumer groups -------------------------------------------------------
    def lambda_consumers(self) -> str:
        groups = sorted(self.stack.lambda_consumer_groups)
        if not groups:
            return "none in this stack (context shardlog:lambdaConsumers): nothing to wait for"
        for group in groups:
            self._poll("lambda-consumers", partial(self._group_past, group))
        return (
            f"{len(groups)} group(s) past the smoke's records: {', '.join(groups)} "
            f"(checkpoints at or past {_ends(self.ends)})"
        )

    def _group_past(self, group: str) -> tuple[bool, str]:
        try:
            rows = group_progress(self.tables, group, self.clock.now_ms())
        except NotFoundError:
            return False, f"group {group} has not run yet (no lease, no group item)"
        checkpoints = {row.partition_id: row.checkpoint for row in rows}
        behind = [
            f"{p} at {checkpoints.get(p) or 'no checkpoint'}"
            for p, end in sorted(self.ends.items())
            if not _checkpoint_past(checkpoints.get(p), end)
        ]
        lag = sum(row.lag_records for row in rows)
        return not behind, f"group {group}: lag {lag} records; behind: {', '.join(behind) or '-'}"

    # --- 6: compaction -------------------------------------------------------------------
    def compaction(self) -> str:
        trigger = SparkTrigger(
            self.clients.client("emr-serverless"),
            self.stack.spark_target(),
            JobArgs(
                bucket=self.config.bucket,
                partitions_table=self.config.partitions_table,
                consumers_table=self.config.consumers_table,
                region=self.config.region,
                endpoint_url=self.config.endpoint_url,
                lake_table=self.stack.lake_table,
            ),
            clock=self.clock,
        )
        result = trigger.trigger(COMPACT, self._now())
        for active in result.active_run_ids:  # started before the smoke's records: let it end
            self._poll("compaction", partial(self._run_ended, trigger, active))
        if not result.started:
            result = trigger.trigger(COMPACT, self._now())
        if result.job_run_id is None:
            raise StepFailed("compaction", f"not started: runs {result.active_run_ids} active")
        run_id = result.job_run_id
        self._poll("compaction", partial(self._run_ended, trigger, run_id))
        run = trigger.job_run(run_id)
        if run["state"] != "SUCCESS":
            raise StepFailed(
                "compaction", f"job run {run_id} ended {run['state']}: {run.get('stateDetails')}"
            )
        return f"job run {run_id} of application {trigger.target.application_id}: SUCCESS"

    @staticmethod
    def _run_ended(trigger: SparkTrigger, run_id: str) -> tuple[bool, str]:
        state = trigger.job_run(run_id)["state"]
        return state in TERMINAL_STATES, f"job run {run_id} {state}"

    def _now(self) -> datetime:
        return datetime.fromtimestamp(self.clock.now_ms() / 1000, UTC)

    # --- 7: rows in the lake, through Athena ---------------------------------------------
    def athena(self) -> str:
        keys = keys_of(self.produced)
        handle = self.counter.start(self.stack.lake_table, keys, self.began - ARRIVAL_MARGIN)
        counted = []

        def check() -> tuple[bool, str]:
            count = self.counter.result(handle)
            if count is not None:
                counted.append(count)
            return count is not None, "the count is still running"

        self._poll("athena", check)
        count, expected = counted[0], len(self.produced)
        line = (
            f"{count.rows} rows, {count.record_ids} record ids in {self.stack.lake_table} "
            f"({count.how})"
        )
        if (count.rows, count.record_ids) != (expected, expected):
            raise StepFailed("athena", f"{line}; expected {expected} of each")
        return line


def _with_put(record: SmokeRecord, outcome: Outcome) -> SmokeRecord:
    assert isinstance(outcome, PutResult)
    return SmokeRecord(record.path, record.record, record.n, outcome)


def _exactly_once(
    wanted: dict[str, SmokeRecord], found: dict[str, list[tuple[str, int, bytes]]]
) -> list[str]:
    """What is wrong with what was read: ids missing or read twice, data changed, a key's
    records out of order."""
    problems = []
    missing = sorted(set(wanted) - set(found))
    if missing:
        problems.append(
            f"{len(missing)} of {len(wanted)} records not in the log, e.g. {missing[0]}"
        )
    twice = sorted(i for i, copies in found.items() if len(copies) > 1)
    if twice:
        where = [f"{p} seq {s}" for p, s, _ in found[twice[0]]]
        problems.append(
            f"{len(twice)} records in the log more than once, e.g. {twice[0]} at {where}"
        )
    changed = sorted(i for i, copies in found.items() if copies[0][2] != wanted[i].record.data)
    if changed:
        problems.append(f"{len(changed)} records read back with other data, e.g. {changed[0]}")
    by_key: dict[str, list[tuple[int, int]]] = {}
    for record_id, copies in found.items():
        _, seq, _ = copies[0]
        by_key.setdefault(wanted[record_id].record.partition_key, []).append(
            (seq, wanted[record_id].n)
        )
    for key, seen in sorted(by_key.items()):
        order = [n for _, n in sorted(seen)]
        if order != sorted(order):
            problems.append(f"key {key} read in the order {order}")
    return problems


def _checkpoint_past(checkpoint: str | None, end: int) -> bool:
    if checkpoint == C.SHARD_END:
        return True
    return checkpoint is not None and checkpoint.isdigit() and int(checkpoint) >= end


def _ends(ends: dict[str, int]) -> str:
    return ", ".join(f"{p}: {e}" for p, e in sorted(ends.items()))


def keys_of(records: Sequence[SmokeRecord]) -> list[str]:
    return sorted({r.record.partition_key for r in records})
