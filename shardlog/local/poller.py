"""A local Kinesis event-source mapping: calls a Lambda handler in-process.

moto cannot invoke Lambda functions (that needs Docker), so the local runtime
polls the stream itself and calls the handler with the exact Lambda Kinesis event
shape and Lambda's semantics for what shardlog relies on:

- per shard, in order, at most ``batch_size`` records per invocation, waiting up
  to ``batching_window_ms`` to fill a batch. With ``window_read_interval_ms`` (default 0:
  at every poll) a shard whose window is open is read only that often (is the batch full
  yet?) and once more when the window ends: fewer GetRecords, but a batch that fills
  before its window ends is seen up to that much later (measured 2026-11-27 with 250 ms at
  5,000 records/s on 5 shards: the commit about 70 ms later at p50 and p99, and hardly
  fewer reads, so it is off). ``run`` wakes when the next window ends, not up to a poll
  interval later;
- a failed invocation (exception, or a partial batch response) is retried with
  the same records (from the first reported failure) until it succeeds or
  ``maximum_retry_attempts`` is spent (-1: forever, shardlog's setting);
  with ``bisect_on_error`` a failing batch is split in two and the halves retried;
- records past their retries go to ``on_failure`` (Lambda's on-failure
  destination) and the shard moves on: shardlog's settings never do that;
- a child shard starts only after all its parents were read to their end.

Time comes from an injectable clock; ``poll_once`` does one step per shard, so
tests drive it deterministically, and ``run`` loops until stopped.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from shardlog import constants as C
from shardlog import settings as S
from shardlog.aws import Clients
from shardlog.clock import Clock, SystemClock
from shardlog.lambda_consumer.events import kinesis_event_record
from shardlog.local.lambda_context import LambdaContext
from shardlog.shardsync import list_shards, parents_of

Handler = Callable[[dict[str, Any], Any], Any]
MIN_SLEEP_S = 0.005  # run()'s shortest wait between polls that invoked nothing


@dataclass
class EventSourceSettings:
    batch_size: int = C.INGEST_BATCH_SIZE
    batching_window_ms: int = C.DEFAULT_INGEST_BATCHING_WINDOW_MS
    bisect_on_error: bool = True
    maximum_retry_attempts: int = -1  # -1: retry until it succeeds, never drop
    retry_delay_ms: int = 200
    starting_position: str = C.INGEST_STARTING_POSITION
    shard_discovery_interval_ms: int = 1_000
    # While a window is open: how often to look whether the batch is full (a full batch is
    # invoked then, before its window ends). 0: at every poll.
    window_read_interval_ms: int = 0

    def __post_init__(self) -> None:
        # The deployed ranges (shardlog/settings.py). The window may be any millisecond here
        # (tests and the demo use less than a second); `local up` takes whole seconds, as AWS.
        if not S.INGEST_BATCH_SIZE_MIN <= self.batch_size <= S.INGEST_BATCH_SIZE_MAX:
            raise ValueError(
                f"batch_size {self.batch_size} is outside {S.INGEST_BATCH_SIZE_MIN} to "
                f"{S.INGEST_BATCH_SIZE_MAX} (Lambda's Kinesis limit)"
            )
        window = (S.INGEST_BATCHING_WINDOW_MS_MIN, S.INGEST_BATCHING_WINDOW_MS_MAX)
        if not window[0] <= self.batching_window_ms <= window[1]:
            raise ValueError(
                f"batching_window_ms {self.batching_window_ms} is outside {window[0]} to "
                f"{window[1]} (Lambda's Kinesis limit)"
            )


@dataclass
class _ShardState:
    shard_id: str
    parents: tuple[str, ...]
    iterator: str | None = None
    started: bool = False
    reached_end: bool = False
    buffer: list[dict[str, Any]] = field(default_factory=list)
    buffer_since_ms: int = 0
    read_at_ms: int | None = None  # the last GetRecords
    retry_queue: list[list[dict[str, Any]]] = field(default_factory=list)
    attempts: int = 0
    retry_at_ms: int = 0
    finished: bool = False


@dataclass
class PollerStats:
    invocations: int = 0
    failures: int = 0
    records_delivered: int = 0
    records_dropped: int = 0
    finished_shards: list[str] = field(default_factory=list)


class EventSourcePoller:
    def __init__(
        self,
        clients: Clients,
        stream_name: str,
        handler: Handler,
        *,
        settings: EventSourceSettings | None = None,
        function_name: str = "shardlog-ingest",
        clock: Clock | None = None,
        start_after: Callable[[str], str | None] | None = None,
        on_shard_end: Callable[[str], object] | None = None,
        on_failure: Callable[[str, list[dict[str, Any]]], None] | None = None,
        concurrent_shards: int = 1,
    ) -> None:
        self.clients = clients
        self.stream_name = stream_name
        self.handler = handler
        self.settings = settings or EventSourceSettings()
        self.function_name = function_name
        self.clock = clock or SystemClock()
        self.start_after = start_after
        self.on_shard_end = on_shard_end
        self.on_failure = on_failure
        self.concurrent_shards = max(1, concurrent_shards)
        self.stats = PollerStats()
        self._shards: dict[str, _ShardState] = {}
        self._last_discovery_ms: int | None = None
        self._stream_arn: str | None = None
        self._invoke_lock = threading.Lock()
        self._stats_lock = threading.Lock()

    # --- driving ---------------------------------------------------------------------
    def poll_once(self) -> int:
        """One step for every runnable shard. Returns records delivered successfully."""
        self._discover()
        runnable = [s for s in self._shards.values() if not s.finished and self._parents_done(s)]
        before = self.stats.records_delivered
        if self.concurrent_shards > 1 and len(runnable) > 1:
            with ThreadPoolExecutor(min(self.concurrent_shards, len(runnable))) as pool:
                list(pool.map(self._step, runnable))
        else:
            for shard in runnable:
                self._step(shard)
        return self.stats.records_delivered - before

    def run(self, stop: threading.Event, idle_sleep_s: float = 0.05) -> None:
        while not stop.is_set():
            if self.poll_once() == 0:
                stop.wait(self.sleep_s(idle_sleep_s))

    def sleep_s(self, idle_sleep_s: float) -> float:
        """How long ``run`` may wait before the next poll: ``idle_sleep_s``, or less when a
        shard's batch is due sooner (its window ends, or its retry's delay). Never below
        ``MIN_SLEEP_S``: a batch due now that was not invoked waits for what holds it."""
        now = self.clock.now_ms()
        window = self.settings.batching_window_ms
        due = [
            s.retry_at_ms - now if s.retry_queue else s.buffer_since_ms + window - now
            for s in self._shards.values()
            if s.buffer or s.retry_queue
        ]
        return max(MIN_SLEEP_S, min([idle_sleep_s * 1000, *due]) / 1000)

    def is_idle(self) -> bool:
        """No buffered or retrying records on any shard."""
        return all(not s.buffer and not s.retry_queue for s in self._shards.values())

    # --- shards ----------------------------------------------------------------------
    def _discover(self, force: bool = False) -> None:
        now = self.clock.now_ms()
        interval = self.settings.shard_discovery_interval_ms
        recent = self._last_discovery_ms is not None and now - self._last_discovery_ms < interval
        if recent and not force:
            return
        self._last_discovery_ms = now
        if self._stream_arn is None:
            summary = self.clients.kinesis.describe_stream_summary(StreamName=self.stream_name)
            self._stream_arn = summary["StreamDescriptionSummary"]["StreamARN"]
        for shard in list_shards(self.clients.kinesis, self.stream_name):
            if shard["ShardId"] not in self._shards:
                self._shards[shard["ShardId"]] = _ShardState(shard["ShardId"], parents_of(shard))

    def _parents_done(self, shard: _ShardState) -> bool:
        return all(p not in self._shards or self._shards[p].finished for p in shard.parents)

    def _open_iterator(self, shard: _ShardState) -> None:
        kwargs: dict[str, Any] = {"StreamName": self.stream_name, "ShardId": shard.shard_id}
        after = self.start_after(shard.shard_id) if self.start_after else None
        if after is not None:
            kwargs.update(ShardIteratorType="AFTER_SEQUENCE_NUMBER", StartingSequenceNumber=after)
        else:
            kwargs["ShardIteratorType"] = self.settings.starting_position
        shard.iterator = self.clients.kinesis.get_shard_iterator(**kwargs)["ShardIterator"]
        shard.started = True

    def _step(self, shard: _ShardState) -> None:
        now = self.clock.now_ms()
        if shard.retry_queue:
            if now >= shard.retry_at_ms:
                self._deliver(shard, shard.retry_queue.pop(0))
            return
        if not shard.started:
            self._open_iterator(shard)
        window_over = now - shard.buffer_since_ms >= self.settings.batching_window_ms
        if (
            not shard.reached_end
            and len(shard.buffer) < self.settings.batch_size
            and (not shard.buffer or window_over or self._check_due(shard, now))
        ):
            self._read(shard)
            window_over = now - shard.buffer_since_ms >= self.settings.batching_window_ms
        if shard.buffer and (
            len(shard.buffer) >= self.settings.batch_size or window_over or shard.reached_end
        ):
            batch = shard.buffer[: self.settings.batch_size]
            shard.buffer = shard.buffer[self.settings.batch_size :]
            shard.buffer_since_ms = now
            self._deliver(shard, batch)
        if shard.reached_end and not shard.buffer and not shard.retry_queue:
            shard.finished = True
            with self._stats_lock:
                self.stats.finished_shards.append(shard.shard_id)
            if self.on_shard_end:
                self.on_shard_end(shard.shard_id)
            self._discover(force=True)

    def _check_due(self, shard: _ShardState, now: int) -> bool:
        """An open window's look at whether its batch is full is due."""
        interval = self.settings.window_read_interval_ms
        return shard.read_at_ms is None or now - shard.read_at_ms >= interval

    def _read(self, shard: _ShardState) -> None:
        assert shard.iterator is not None
        shard.read_at_ms = self.clock.now_ms()
        response = self.clients.kinesis.get_records(
            ShardIterator=shard.iterator, Limit=self.settings.batch_size - len(shard.buffer)
        )
        records = response.get("Records", [])
        if records and not shard.buffer:
            shard.buffer_since_ms = self.clock.now_ms()
        shard.buffer.extend(self._event_record(shard.shard_id, r) for r in records)
        shard.iterator = response.get("NextShardIterator")
        if shard.iterator is None:
            shard.reached_end = True

    def _event_record(self, shard_id: str, record: dict[str, Any]) -> dict[str, Any]:
        return kinesis_event_record(
            shard_id=shard_id,
            partition_key=record["PartitionKey"],
            sequence_number=record["SequenceNumber"],
            data=record["Data"],
            arrival_s=round(record["ApproximateArrivalTimestamp"].timestamp(), 3),
            event_source_arn=self._stream_arn,
            region=self.clients.region,
            invoke_identity_arn=f"arn:aws:iam::000000000000:role/{self.function_name}",
        )

    # --- invoking --------------------------------------------------------------------
    def _invoke(self, batch: list[dict[str, Any]]) -> int | None:
        """Call the handler. None on success, else the index of the first failed record."""
        context = LambdaContext(self.function_name, region=self.clients.region, clock=self.clock)
        with self._invoke_lock:  # one sandbox: Powertools' module state is per process
            with self._stats_lock:
                self.stats.invocations += 1
            try:
                response = self.handler({"Records": batch}, context)
            except Exception:
                return 0
        failures = (response or {}).get("batchItemFailures") or []
        if not failures:
            return None
        failed = {f.get("itemIdentifier") for f in failures}
        for index, record in enumerate(batch):
            if record["kinesis"]["sequenceNumber"] in failed:
                return index
        return 0  # an identifier we don't know: Lambda retries the whole batch

    def _deliver(self, shard: _ShardState, batch: list[dict[str, Any]]) -> None:
        failed_at = self._invoke(batch)
        if failed_at is None:
            shard.attempts = 0
            with self._stats_lock:
                self.stats.records_delivered += len(batch)
            return
        with self._stats_lock:
            self.stats.failures += 1
            self.stats.records_delivered += failed_at
        remaining = batch[failed_at:]
        shard.attempts += 1
        limit = self.settings.maximum_retry_attempts
        if limit >= 0 and shard.attempts > limit:
            with self._stats_lock:
                self.stats.records_dropped += len(remaining)
            if self.on_failure:
                self.on_failure(shard.shard_id, remaining)
            shard.attempts = 0
            return
        if self.settings.bisect_on_error and len(remaining) > 1:
            half = len(remaining) // 2
            shard.retry_queue[:0] = [remaining[:half], remaining[half:]]
        else:
            shard.retry_queue.insert(0, remaining)
        shard.retry_at_ms = self.clock.now_ms() + self.settings.retry_delay_ms
