"""Latency benchmark: produce-to-committed and produce-to-delivered, at steady rates.

Each run starts the local runtime as `shardlog local up` runs it (embedded AWS, the local
Kinesis event-source poller, the ingest handler, shard sync, a Lambda consumer group), plus
`shardlog consume`-style workers, and produces at a steady rate with the SDK for a fixed
time, from a process of its own (as a producer runs on AWS: its SDK work no longer shares
the embedded AWS's interpreter lock; ``--producer in-process`` measures it as before).
Per record it measures, from the start of the PutRecords call that put it:

- committed: the return of the ingest invocation that committed it (the handler returns
  only after the commit transaction; the record's seq is then below the partition's
  committed head, so `shardlog read` returns it). Measured from the writer's commit, not by
  polling the head, so the measurement sends no request of its own;
- worker: delivery to a consumer group worker's processor (`shardlog.consumer.Worker`),
  with the default busy poll (``active_poll_interval_ms``) and with busy polling off (the
  idle poll, as KCL polls), in a process of its own as `shardlog consume` runs
  (time.monotonic is system-wide on Linux, so the worker's delivery times compare with the
  producer's);
- lambda: the invocation of a Lambda consumer group's function (partitions stream ->
  waker -> SQS FIFO wake queue -> runner: `local up --lambda-consumer`'s event sources and
  handlers), in a process of its own like the worker (on AWS the waker and the runner are
  Lambda functions with compute of their own); ``--consumers lambda-in-process`` runs them
  in the runtime's process instead, as `local up --lambda-consumer` does.

The embedded AWS's server runs in a process of its own, as `shardlog local up` runs it
(``--embedded-aws in-process``: in the runtime's process, sharing its interpreter lock with
the ingest poller and handler and the in-process consumers, as before 2026-11-27).

Each run produces for a warm-up (``--warmup-seconds``, 3 s) before the timed records: by then
the ingest has committed and a worker has delivered on every partition, so it busy-polls as
under a steady stream. The warm-up's records are checked like the rest and their latency is
shown apart (a quiet partition is polled every idle_poll_interval_ms, so the first records
after a quiet spell can wait up to that much longer).

Each rate runs with the ingest batching window at its default and at 0, the ingest alone:
produce-to-committed, with the ingest requests (and invocations) per 1,000 records that each
window costs, so the window's share shows side by side. Then, at the default window, once
per consumer, that consumer alone beside the ingest: on AWS each has compute of its own,
and here they would otherwise share two cores with each other as well as with the ingest
and the embedded AWS. Shards: `local up`'s 4, or more when the rate needs them (a Kinesis
shard takes at most 1,000 records/s).

With ``--stages`` a run also shows where its time went (bench/latency_stages.py): for a
Lambda consumer, each record's produce -> committed -> wake sent -> run started -> invoked,
the runs and the wake queue's wait; for every run, the CPU of each thread of this process
(the interpreter lock lets its Python code use one core at most), and the CPU of the embedded
AWS's process and of the Lambda consumer's. ``--profile-runner PATH``
writes a cProfile of the Lambda consumer's runner thread (``python -m pstats PATH``).

Exits non-zero unless every produced record was committed exactly once and delivered to
every consumer. The last line is `p99 produce-to-committed at 1000 records/s: <N> ms`
(default window). Usage:
python bench/latency.py [--quick] [--rates 100,1000,5000] [--seconds S] [--json PATH]
    [--consumers worker,lambda] [--stages] [--profile-runner PATH]
    [--embedded-aws process|in-process] [--producer process|in-process]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import multiprocessing
import queue
import statistics
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import common  # first: the repository importable, Powertools quiet
from latency_stages import LambdaStages, ProcessCpu, ThreadCpu, profiled

from shardlog import constants as C
from shardlog.config import ShardlogConfig
from shardlog.consumer import Checkpointer, ConsumerSettings, Worker
from shardlog.format import LogRecord
from shardlog.lambda_consumer.settings import LambdaConsumerSettings
from shardlog.local.lambda_consumers import LocalGroup, LocalLambdaConsumers
from shardlog.local.poller import EventSourceSettings
from shardlog.local.runtime import LocalRuntime
from shardlog.producer import Producer
from shardlog.reader import LogReader
from shardlog.records import ProducerRecord
from shardlog.tables import Tables

LOCAL_UP_SHARDS = 4  # `shardlog local up --shards` default
KINESIS_SHARD_RECORDS_PER_S = 1_000
TICK_S = 0.01  # the producer puts what is due every 10 ms
DRAIN_TIMEOUT_S = 60.0
# The steady rate is timed after a warm-up: by then the ingest has committed and each worker
# delivered on every partition, so a worker busy-polls as it does under a steady stream (the
# first records after a quiet spell wait for the idle poll: docs/PERFORMANCE.md).
WARMUP_S = 3.0
DEFAULT_WINDOW_MS = C.INGEST_BATCHING_WINDOW_S * 1000
DEFAULT_IDLE_POLL_MS = ConsumerSettings().idle_poll_interval_ms
DEFAULT_BUSY_POLL_MS = ConsumerSettings().active_poll_interval_ms
LAMBDA_GROUP = "latency-lambda"  # and the run's tag: a group's wake queue is named by it,
# and moto's queues outlive a run (a later run would get the earlier one's wakes)
COMMITTED = "produce-to-committed"
LAMBDA_CONSUMER = "produce-to-Lambda-consumer"


def percentiles(values_ms: Sequence[float]) -> dict[str, float]:
    ordered = sorted(values_ms)
    if len(ordered) < 2:
        only = ordered[0] if ordered else float("nan")
        return {"p50": only, "p95": only, "p99": only, "max": only}
    q = statistics.quantiles(ordered, n=100, method="inclusive")
    return {"p50": q[49], "p95": q[94], "p99": q[98], "max": ordered[-1]}


class Arrivals:
    """The first time each record (by key) reached one point of the pipeline."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.first: dict[str, float] = {}
        self.count: Counter[str] = Counter()

    def note(self, keys: Sequence[str]) -> None:
        now = time.monotonic()
        with self._lock:
            for key in keys:
                self.count[key] += 1
                self.first.setdefault(key, now)

    def has_all(self, keys: Sequence[str]) -> bool:
        with self._lock:
            return len(self.first) >= len(keys)

    def duplicates(self) -> int:
        with self._lock:
            return sum(n - 1 for n in self.count.values() if n > 1)

    # A worker's processor and a Lambda consumer's function, noting what they get.
    def processor(self, batch: list[LogRecord], checkpointer: Checkpointer) -> None:
        self.note([r.partition_key for r in batch])
        checkpointer.checkpoint()

    def function(self, event: dict[str, Any], _context: Any) -> dict[str, Any]:
        self.note([r["kinesis"]["partitionKey"] for r in event["Records"]])
        return {"batchItemFailures": []}


def worker_process(
    config: ShardlogConfig,
    shards: int,
    busy_poll_ms: int,
    ready: Any,
    stop: Any,
    seen_count: Any,
    out: Any,
) -> None:
    """A `shardlog consume`-style worker in its own process: tells when it holds every
    partition (``ready``), counts the distinct records it got (``seen_count``), and when
    stopped sends back the first delivery time of each record and the duplicates."""
    logging.getLogger("shardlog").setLevel(logging.ERROR)
    seen = Arrivals()

    def processor(batch: list[LogRecord], checkpointer: Checkpointer) -> None:
        seen.processor(batch, checkpointer)
        seen_count.value = len(seen.first)

    worker = Worker(
        f"latency-worker-{busy_poll_ms}ms",
        processor,
        config,
        settings=ConsumerSettings(active_poll_interval_ms=busy_poll_ms),
    )
    thread = threading.Thread(target=worker.run, args=(stop,), daemon=True)
    thread.start()
    while not stop.is_set():
        if len(worker.held) == shards:
            ready.set()
        stop.wait(0.05)  # bounded: the loop ends when the run stops it
    thread.join(30)
    out.put((busy_poll_ms, seen.first, seen.duplicates()))


def lambda_process(
    config: ShardlogConfig,
    group_name: str,
    stages_on: bool,
    profile_runner: Path | None,
    ready: Any,
    stop: Any,
    seen_count: Any,
    out: Any,
) -> None:
    """A Lambda consumer group's local event sources and handlers (waker, wake queue,
    runner, the function) in a process of their own: tells when they run (``ready``), counts
    the distinct records delivered (``seen_count``), and when stopped sends back the first
    invocation time of each record, the duplicates, and with ``stages_on`` where the time
    went."""
    logging.getLogger("shardlog").setLevel(logging.ERROR)
    seen = Arrivals()
    stages = LambdaStages() if stages_on else None

    def function(event: dict[str, Any], context: Any) -> dict[str, Any]:
        answer = seen.function(event, context)
        seen_count.value = len(seen.first)
        return answer

    group = LocalGroup(
        LambdaConsumerSettings(group=group_name, function_name="bench:note"),
        stages.function(function) if stages else function,
        "bench:note",
    )
    consumers = LocalLambdaConsumers(config.clients(), config, [group]).start()
    instrument_lambda(consumers, stages, profile_runner)
    cpu = ThreadCpu()
    cpu.start()
    consumers.run_in_background(stop)
    ready.set()
    stop.wait(DRAIN_TIMEOUT_S + 3_600)  # bounded: the run sets it
    cpu.stop()
    consumers.join(30)
    out.put((seen.first, seen.duplicates(), stages.export() if stages else None, cpu.summary()))


def worker_path(busy_poll_ms: int) -> str:
    if busy_poll_ms >= DEFAULT_IDLE_POLL_MS:
        return f"produce-to-worker (poll {DEFAULT_IDLE_POLL_MS} ms)"
    return f"produce-to-worker (busy poll {busy_poll_ms} ms)"


def timed_ingest(handler: Callable[..., Any], committed: Arrivals) -> Callable[..., Any]:
    """The ingest handler, noting its records as committed when it returns success."""

    def handle(event: dict[str, Any], context: Any) -> Any:
        response = handler(event, context)
        if not (response or {}).get("batchItemFailures"):
            committed.note([r["kinesis"]["partitionKey"] for r in event["Records"]])
        return response

    return handle


@dataclass
class RunResult:
    rate: int
    window_ms: int
    shards: int
    seconds: float
    produced: int
    achieved_rate: float
    max_producer_lag_ms: float
    invocations: int
    ingest_requests: int
    consumer: str = ""  # the consumer beside the ingest, or "" for the ingest alone
    paths: dict[str, dict[str, float]] = field(default_factory=dict)
    warmup_paths: dict[str, dict[str, float]] = field(default_factory=dict)  # not timed above
    errors: list[str] = field(default_factory=list)
    stages: dict[str, dict[str, float]] = field(default_factory=dict)  # with --stages
    cpu: str = ""  # with --stages: the CPU of this process's threads while producing

    def as_dict(self) -> dict[str, Any]:
        return {
            "rate": self.rate,
            "windowMs": self.window_ms,
            "shards": self.shards,
            "seconds": self.seconds,
            "produced": self.produced,
            "achievedRate": round(self.achieved_rate, 1),
            "maxProducerLagMs": round(self.max_producer_lag_ms, 1),
            "consumer": self.consumer,
            "ingestInvocations": self.invocations,
            "recordsPerInvocation": round(self.produced / max(self.invocations, 1), 1),
            "ingestRequestsPer1000Records": round(
                1000 * self.ingest_requests / max(self.produced, 1), 2
            ),
            "paths": {
                name: {k: round(v, 1) for k, v in figures.items()}
                for name, figures in self.paths.items()
            },
            "warmupPaths": {
                name: {k: round(v, 1) for k, v in figures.items()}
                for name, figures in self.warmup_paths.items()
            },
            "errors": self.errors,
            "stages": {
                name: {k: round(v, 1) for k, v in figures.items()}
                for name, figures in self.stages.items()
            },
            "cpu": self.cpu,
        }


def produce_steadily(
    producer: Producer, rate: int, seconds: float, record_bytes: int, sent_at: dict[str, float]
) -> tuple[list[str], float]:
    """Put ``rate`` records/s for ``seconds``; the keys, and the worst lag behind schedule."""
    keys: list[str] = []
    payload = b"x" * record_bytes
    total = int(rate * seconds)
    started = time.monotonic()
    worst_lag = 0.0
    while len(keys) < total:
        now = time.monotonic()
        due = min(total, int((now - started) * rate) + 1)
        if due > len(keys):
            worst_lag = max(worst_lag, now - (started + len(keys) / rate))
            batch = [f"r{i:09d}" for i in range(len(keys), due)]
            for key in batch:
                sent_at[key] = now
            for i in range(0, len(batch), C.KINESIS_MAX_RECORDS_PER_PUT):
                producer.put_records(
                    ProducerRecord(k, payload) for k in batch[i : i + C.KINESIS_MAX_RECORDS_PER_PUT]
                )
            keys += batch
        time.sleep(max(0.0, started + len(keys) / rate - time.monotonic(), TICK_S / 10))
    return keys, 1000 * worst_lag


def producer_process(
    config: ShardlogConfig, rate: int, seconds: float, record_bytes: int, out: Any
) -> None:
    """The steady producer in a process of its own, as a producer is on AWS: sends back the
    keys, each one's send time (time.monotonic is system-wide on Linux), the worst lag and
    the producing time."""
    logging.getLogger("shardlog").setLevel(logging.ERROR)
    producer = Producer(config.stream_name, config.clients())
    sent_at: dict[str, float] = {}
    started = time.monotonic()
    keys, lag_ms = produce_steadily(producer, rate, seconds, record_bytes, sent_at)
    out.put((keys, sent_at, lag_ms, time.monotonic() - started))


def produce_apart(
    context: Any,
    config: ShardlogConfig,
    rate: int,
    seconds: float,
    record_bytes: int,
    sent_at: dict[str, float],
) -> tuple[list[str], float, float]:
    """``produce_steadily`` in a process of its own; fills ``sent_at``."""
    out = context.Queue()
    process = context.Process(
        target=producer_process, args=(config, rate, seconds, record_bytes, out), daemon=True
    )
    process.start()
    try:
        keys, sent, lag_ms, elapsed = out.get(timeout=seconds + 300)  # bounded
    finally:
        process.join(30)
    sent_at.update(sent)
    return keys, lag_ms, elapsed


def wait_for(done: Callable[[], bool], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if done():
            return True
        time.sleep(0.05)  # bounded: the loop ends at the deadline
    return done()


def check_log(runtime: LocalRuntime, keys: Sequence[str]) -> list[str]:
    """Every produced record is in the committed log exactly once (read below the heads)."""
    clients = runtime.config.clients()
    reader = LogReader(clients, runtime.config.bucket, runtime.config.tables)
    seen: Counter[str] = Counter()
    for partition in Tables(clients, runtime.config.tables).list_partitions():
        for record in reader.records(partition.partition_id):
            seen[record.partition_key] += 1
    missing = [k for k in keys if seen[k] == 0]
    twice = [k for k, n in seen.items() if n > 1]
    unknown = set(seen) - set(keys)
    errors = []
    if missing:
        errors.append(f"{len(missing)} produced records not in the committed log")
    if twice:
        errors.append(f"{len(twice)} records committed more than once")
    if unknown:
        errors.append(f"{len(unknown)} records in the log that were never produced")
    return errors


@dataclass(frozen=True)
class Consumer:
    """One consumer measured beside the ingest: a worker (with its busy poll) or a Lambda
    consumer group."""

    kind: str  # "worker", "lambda" (a process of its own) or "lambda-in-process"
    busy_poll_ms: int = 0

    @property
    def path(self) -> str:
        if self.kind == "worker":
            return worker_path(self.busy_poll_ms)
        return LAMBDA_CONSUMER if self.kind == "lambda" else f"{LAMBDA_CONSUMER} (in-process)"

    @property
    def label(self) -> str:
        return self.path.removeprefix("produce-to-")


def run_once(
    rate: int,
    window_ms: int,
    seconds: float,
    record_bytes: int,
    consumer: Consumer | None = None,
    shards: int | None = None,
    warmup_s: float = 0.0,
    stages: bool = False,
    profile_runner: Path | None = None,
    producer_in_process: bool = False,
    aws_process: bool = True,
) -> RunResult:
    """The ingest alone (``consumer`` None: produce-to-committed), or the ingest and one
    consumer (that consumer's path)."""
    shards = shards or max(LOCAL_UP_SHARDS, -(-rate // KINESIS_SHARD_RECORDS_PER_S))
    lambda_seen = Arrivals()
    kind = consumer.kind if consumer is not None else ""
    with_lambda = kind == "lambda-in-process"
    lambda_stages = LambdaStages() if stages and kind.startswith("lambda") else None
    tag = f"{rate}-{window_ms}-{uuid.uuid4().hex[:6]}"
    group_name = f"{LAMBDA_GROUP}-{tag}"
    lambda_groups = (
        [
            LocalGroup(
                LambdaConsumerSettings(group=group_name, function_name="bench:note"),
                lambda_stages.function(lambda_seen.function)
                if lambda_stages
                else lambda_seen.function,
                "bench:note",
            )
        ]
        if with_lambda
        else []
    )
    runtime = LocalRuntime(
        # Fresh names per run: moto's state is per process, shared by every run's server.
        common.named_log(f"latency-{tag}"),
        shard_count=shards,
        api_port=None,
        event_source=EventSourceSettings(batching_window_ms=window_ms),
        lambda_consumers=lambda_groups,
        aws_process=aws_process,
    )
    committed = Arrivals()
    worker_seen = Arrivals()
    worker_duplicates = 0
    context = multiprocessing.get_context("spawn")
    stop, results = context.Event(), context.Queue()
    sent_at: dict[str, float] = {}
    cpu = ThreadCpu()
    with runtime:
        runtime.poller.handler = timed_ingest(runtime.poller.handler, committed)
        if runtime.lambda_consumers is not None:
            instrument_lambda(runtime.lambda_consumers, lambda_stages, profile_runner)
        runtime.run_in_background()
        worker = None
        if kind in ("worker", "lambda"):
            assert consumer is not None
            ready, count = context.Event(), context.Value("i", 0)
            process = context.Process(
                target=worker_process if kind == "worker" else lambda_process,
                args=(
                    (runtime.config, shards, consumer.busy_poll_ms)
                    if kind == "worker"
                    else (runtime.config, group_name, stages, profile_runner)
                )
                + (ready, stop, count, results),
                daemon=True,
            )
            process.start()
            worker = (process, ready, count)
            # Start producing once the worker holds every partition (a steady state), or the
            # Lambda consumer's event sources run.
            if not wait_for(ready.is_set, 60):
                stop.set()
                raise SystemExit(f"the {consumer.label} was not ready within 60 s")
        server_pid = getattr(runtime.aws, "pid", None)
        server_cpu = ProcessCpu(server_pid, "the embedded AWS's process") if server_pid else None
        cpu.start()
        if server_cpu is not None:
            server_cpu.start()
        if producer_in_process:
            producer = Producer(runtime.config.stream_name, runtime.config.clients())
            started = time.monotonic()
            keys, lag_ms = produce_steadily(
                producer, rate, warmup_s + seconds, record_bytes, sent_at
            )
            elapsed = time.monotonic() - started
        else:
            keys, lag_ms, elapsed = produce_apart(
                context, runtime.config, rate, warmup_s + seconds, record_bytes, sent_at
            )
        cpu.stop()
        if server_cpu is not None:
            server_cpu.stop()
        in_process = [committed, *([lambda_seen] if with_lambda else [])]
        wait_for(
            lambda: (
                all(a.has_all(keys) for a in in_process)
                and (worker is None or worker[2].value >= len(keys))
            ),
            DRAIN_TIMEOUT_S,
        )
        stop.set()
        child_cpu = ""
        if worker is not None:
            with contextlib.suppress(queue.Empty):  # then the worker's path reports it missing
                if kind == "worker":
                    _, worker_seen.first, worker_duplicates = results.get(timeout=60)
                else:
                    worker_seen.first, worker_duplicates, exported, child_cpu = results.get(
                        timeout=60
                    )
                    if lambda_stages is not None and exported is not None:
                        lambda_stages = LambdaStages.from_export(exported)
            worker[0].join(30)
        errors = check_log(runtime, keys)
        result = RunResult(
            rate=rate,
            window_ms=window_ms,
            shards=shards,
            seconds=seconds,
            produced=len(keys),
            achieved_rate=len(keys) / elapsed,
            max_producer_lag_ms=lag_ms,
            invocations=runtime.poller.stats.invocations,
            ingest_requests=runtime.ingest_requests.total,
            consumer=consumer.label if consumer is not None else "",
            errors=errors,
            cpu="; ".join(
                part
                for part in (
                    cpu.summary(),
                    server_cpu.summary() if server_cpu is not None else "",
                    f"the Lambda consumer's own process: {child_cpu}" if child_cpu else "",
                )
                if part
            )
            if stages
            else "",
        )
    if consumer is None:
        name, arrivals, twice = COMMITTED, committed, 0
    elif with_lambda:
        name, arrivals, twice = consumer.path, lambda_seen, lambda_seen.duplicates()
    else:
        name, arrivals, twice = consumer.path, worker_seen, worker_duplicates
    missing = [k for k in keys if k not in arrivals.first]
    if missing:
        result.errors.append(f"{name}: {len(missing)} records never arrived")
    else:
        if twice:
            result.errors.append(f"{name}: {twice} records delivered twice")

        # Latency at the steady rate: the warm-up's records are checked, and shown apart.
        def latency(timed: Sequence[str]) -> dict[str, float]:
            return percentiles([1000 * (arrivals.first[k] - sent_at[k]) for k in timed])

        warm = int(rate * warmup_s)
        result.paths[name] = latency(keys[warm:])
        if warm:
            result.warmup_paths[name] = latency(keys[:warm])
        if lambda_stages is not None:
            result.stages = lambda_stages.breakdown(
                keys[warm:], sent_at, committed.first, arrivals.first, percentiles
            )
    return result


def instrument_lambda(
    consumers: LocalLambdaConsumers, stages: LambdaStages | None, profile_runner: Path | None
) -> None:
    """Time the waker and each runner (``--stages``); profile the runner threads."""
    assert consumers.stream is not None
    if stages is not None:
        consumers.stream.handler = stages.waker(consumers.stream.handler)
    for group, source in consumers.sources.items():
        if stages is not None:
            source.wrap(stages.runner)
        if profile_runner is not None:
            path = profile_runner.with_name(f"{profile_runner.name}.{group}")
            source.run = profiled(source.run, path)  # type: ignore[method-assign]


def _figures(f: dict[str, float]) -> str:
    return " ".join(f"{f[k]:>6.0f}" for k in ("p50", "p95", "p99", "max"))


def print_table(results: Sequence[RunResult]) -> None:
    print(
        f"{'rate/s':>6} {'window':>7} {'path':<38} {'p50':>6} {'p95':>6} {'p99':>6} {'max':>6}"
        "  (ms)"
    )
    for r in results:
        for name, f in r.paths.items():
            print(f"{r.rate:>6} {r.window_ms:>5}ms {name:<38} {_figures(f)}")
        for f in r.warmup_paths.values():
            print(f"{'':>14} {'(warm-up, not timed above)':<38} {_figures(f)}")
        for stage, f in r.stages.items():
            print(f"{'':>14} {'  ' + stage:<38} {_figures(f)}")
        if r.cpu:
            print(f"{'':>14} {r.cpu}")
        print(
            f"{'':>14} {r.shards} shards, {r.produced} records at {r.achieved_rate:.0f}/s "
            f"(producer lag max {r.max_producer_lag_ms:.0f} ms); ingest: {r.invocations} "
            f"invocations, {r.produced / max(r.invocations, 1):.0f} records each, "
            f"{1000 * r.ingest_requests / max(r.produced, 1):.2f} requests per 1,000 records"
        )


def window_effect(results: Sequence[RunResult]) -> list[str]:
    """Default window vs 0 at each rate: latency added, requests saved."""
    lines = []
    by_key = {(r.rate, r.window_ms): r for r in results if COMMITTED in r.paths}
    for rate in sorted({r.rate for r in results}):
        default, zero = by_key.get((rate, DEFAULT_WINDOW_MS)), by_key.get((rate, 0))
        if default is None or zero is None or DEFAULT_WINDOW_MS == 0:
            continue
        d, z = default.paths[COMMITTED], zero.paths[COMMITTED]
        req_d = 1000 * default.ingest_requests / max(default.produced, 1)
        req_z = 1000 * zero.ingest_requests / max(zero.produced, 1)
        lines.append(
            f"{rate:>6}/s: window {DEFAULT_WINDOW_MS} ms adds {d['p50'] - z['p50']:+.0f} ms "
            f"at p50, {d['p99'] - z['p99']:+.0f} ms at p99; ingest requests per 1,000 records "
            f"{req_d:.2f} vs {req_z:.2f} with window 0 ({req_z / max(req_d, 1e-9):.1f}x)"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="short runs (6 s each)")
    parser.add_argument("--rates", default="100,1000,5000", help="records/s, comma-separated")
    parser.add_argument("--seconds", type=float, default=None, help="producing time per run")
    parser.add_argument(
        "--warmup-seconds",
        type=float,
        default=WARMUP_S,
        help="producing time before the timed records (checked for exactly once, not timed)",
    )
    parser.add_argument("--record-bytes", type=int, default=100)
    parser.add_argument(
        "--windows-ms",
        default=f"{DEFAULT_WINDOW_MS},0",
        help="ingest batching windows to run at each rate",
    )
    parser.add_argument(
        "--worker-busy-poll-ms",
        default=f"{DEFAULT_BUSY_POLL_MS},{DEFAULT_IDLE_POLL_MS}",
        help="one worker run per active_poll_interval_ms (the default first; the idle poll, "
        "1000 ms, is busy polling off)",
    )
    parser.add_argument(
        "--consumer-windows-ms",
        default=f"{DEFAULT_WINDOW_MS}",
        help="the ingest windows at which each consumer runs (default: the default window)",
    )
    parser.add_argument(
        "--shards",
        type=int,
        default=None,
        help="shards (default: local up's 4, or rate/1000 when more)",
    )
    parser.add_argument(
        "--no-consumers",
        action="store_true",
        help="the ingest-alone runs only: no worker, no Lambda consumer",
    )
    parser.add_argument(
        "--consumers",
        default="worker,lambda",
        help="the consumers measured beside the ingest, comma-separated: worker, lambda (in a "
        "process of its own), lambda-in-process (in the runtime's, as `local up` runs it)",
    )
    parser.add_argument(
        "--stages",
        action="store_true",
        help="also show where the time went: the Lambda consumer's stages, each thread's CPU",
    )
    parser.add_argument(
        "--profile-runner",
        type=Path,
        default=None,
        help="write a cProfile of each Lambda consumer runner thread to PATH.<group>",
    )
    parser.add_argument(
        "--producer",
        choices=("process", "in-process"),
        default="process",
        help="the steady producer in a process of its own (default, as on AWS), or in the "
        "runtime's process (as measured before 2026-11-27: its SDK work shared the embedded "
        "AWS's interpreter lock)",
    )
    parser.add_argument(
        "--embedded-aws",
        choices=("process", "in-process"),
        default="process",
        help="the embedded AWS's server in a process of its own (default, as `local up` runs "
        "it), or in the runtime's process (as measured before 2026-11-27 02:30 UTC: its "
        "request threads shared the ingest's and the consumers' interpreter lock)",
    )
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = parser.parse_args(argv)
    seconds = args.seconds or (6.0 if args.quick else 20.0)
    rates = [int(r) for r in args.rates.split(",")]
    windows = [int(w) for w in args.windows_ms.split(",")]
    kinds = {k.strip() for k in args.consumers.split(",") if k.strip()}
    if not kinds <= {"worker", "lambda", "lambda-in-process"}:
        parser.error(f"--consumers: worker, lambda, lambda-in-process; got {args.consumers!r}")
    consumers = [
        *(
            Consumer("worker", int(ms))
            for ms in args.worker_busy_poll_ms.split(",")
            if "worker" in kinds
        ),
        *(Consumer(k) for k in ("lambda", "lambda-in-process") if k in kinds),
    ]
    consumer_windows = {int(w) for w in args.consumer_windows_ms.split(",")}
    logging.basicConfig(level=logging.ERROR)
    logging.getLogger("shardlog").setLevel(logging.ERROR)  # takes and wakes log at INFO

    results = []
    for rate in rates:
        for window in windows:
            with_consumers = window in consumer_windows and not args.no_consumers
            runs = [None, *consumers] if with_consumers else [None]
            for consumer in runs:
                beside = f", {consumer.label} beside the ingest" if consumer else ", ingest alone"
                print(f"running {rate} records/s, window {window} ms, {seconds:.0f} s{beside} ...",
                      file=sys.stderr, flush=True)  # fmt: skip
                results.append(
                    run_once(
                        rate,
                        window,
                        seconds,
                        args.record_bytes,
                        consumer,
                        args.shards,
                        args.warmup_seconds,
                        args.stages,
                        args.profile_runner,
                        args.producer == "in-process",
                        args.embedded_aws == "process",
                    )
                )
    print(
        f"latency on the local runtime: produce at a steady rate for {seconds:.0f} s; times from "
        "the PutRecords call; committed = the ingest commit returned (writer's commit time)"
    )
    print_table(results)
    for line in window_effect(results):
        print(line)
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps([r.as_dict() for r in results], indent=2) + "\n")
    failed = [f"{r.rate}/s window {r.window_ms} ms: {e}" for r in results for e in r.errors]
    for error in failed:
        print(f"CORRECTNESS CHECK FAILED: {error}")

    def p99_at_1000(path: str) -> str:
        run = next(
            (
                r
                for r in results
                if r.rate == 1000 and r.window_ms == DEFAULT_WINDOW_MS and path in r.paths
            ),
            None,
        )
        return f"{run.paths[path]['p99']:.0f}" if run else "n/a"

    if consumers:
        print(f"p99 {consumers[0].path} at 1000 records/s: {p99_at_1000(consumers[0].path)} ms")
    print(f"p99 produce-to-committed at 1000 records/s: {p99_at_1000(COMMITTED)} ms")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
