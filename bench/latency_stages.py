"""Where a record's produce-to-Lambda-consumer time goes, and where the process's CPU goes.

``bench/latency.py --stages`` attaches these to a run (they send no request of their own):

- ``LambdaStages``: per record, the stages of the Lambda consumer path, each from the end
  of the one before: produce -> committed (the ingest returned) -> the wake for a head past
  the record sent (the waker, fed by the partitions table's stream) -> the start of the
  runner run that delivered it (the wake queue and the runner's event source) -> invoked
  (inside that run: the reads, the batches before it). A record committed while its run was
  already going waits 0 for the run. Per run: how long, and how many invoked nothing (a wake
  that found the group caught up).
- ``ThreadCpu``: CPU seconds per thread of this process over the run (``/proc``), by thread
  name: the producer (main), the ingest poller, the waker's stream source, each runner's
  wake-queue source, the embedded AWS's request threads; beside wall time, it shows how
  close the process is to the one core its interpreter lock lets Python code use.
- ``profiled``: a thread's target under cProfile (cProfile profiles the thread that enables
  it only), written to a file for ``python -m pstats``.
"""

from __future__ import annotations

import bisect
import cProfile
import json
import re
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from common import TICKS, proc_stat

from shardlog import constants as C

Handler = Callable[[dict[str, Any], Any], Any]
STAGES = ("committed", "wake sent", "run started", "invoked")


class LambdaStages:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._wakes: dict[str, list[tuple[int, float]]] = {}  # partition -> [(head, sent)]
        self._runs: dict[str, float] = {}  # partition -> start of its run in progress
        self._invoked_in_run: Counter[str] = Counter()
        self.delivered_by: dict[str, tuple[str, int, float]] = {}  # key -> partition, seq, run
        self.run_ms: list[float] = []
        self.idle_runs = 0
        self.queue_wait_ms: list[float] = []  # wake sent -> received (SQS SentTimestamp)

    # --- wrappers ------------------------------------------------------------------------
    def waker(self, handler: Handler) -> Handler:
        """The waker's stream handler, noting when each (partition, head) was woken."""

        def handle(event: dict[str, Any], context: Any) -> Any:
            answer = handler(event, context)
            now = time.monotonic()
            with self._lock:
                for record in event.get("Records", []):
                    new = record.get("dynamodb", {}).get("NewImage") or {}
                    head = new.get(C.ATTR_NEXT_SEQUENCE_NUMBER, {}).get("N")
                    partition = new.get(C.ATTR_PARTITION_ID, {}).get("S")
                    if head is not None and partition is not None:
                        self._wakes.setdefault(partition, []).append((int(head), now))
            return answer

        return handle

    def runner(self, handler: Handler) -> Handler:
        """A runner's wake-queue handler (one wake per invocation), timing its run."""

        def handle(event: dict[str, Any], context: Any) -> Any:
            [record] = event["Records"]
            partition = json.loads(record["body"])["partitionId"]
            sent_ms = int(record.get("attributes", {}).get("SentTimestamp", 0))
            started = time.monotonic()
            with self._lock:
                if sent_ms:
                    self.queue_wait_ms.append(max(0.0, time.time() * 1000 - sent_ms))
                self._runs[partition] = started
                self._invoked_in_run[partition] = 0
            try:
                return handler(event, context)
            finally:
                with self._lock:
                    self.run_ms.append(1000 * (time.monotonic() - started))
                    if self._invoked_in_run[partition] == 0:
                        self.idle_runs += 1

        return handle

    def function(self, inner: Handler) -> Handler:
        """The group's function, noting which run delivered each record."""

        def handle(event: dict[str, Any], context: Any) -> Any:
            with self._lock:
                for r in event["Records"]:
                    partition = r["eventID"].rsplit(":", 1)[0]
                    self._invoked_in_run[partition] += 1
                    key = r["kinesis"]["partitionKey"]
                    run = self._runs.get(partition, 0.0)
                    self.delivered_by.setdefault(
                        key, (partition, int(r["kinesis"]["sequenceNumber"]), run)
                    )
            return inner(event, context)

        return handle

    # --- across processes ----------------------------------------------------------------
    def export(self) -> dict[str, Any]:
        """What the figures need, picklable (a Lambda consumer run in a process of its own)."""
        with self._lock:
            return {
                "wakes": self._wakes,
                "delivered_by": self.delivered_by,
                "run_ms": self.run_ms,
                "idle_runs": self.idle_runs,
                "queue_wait_ms": self.queue_wait_ms,
            }

    @classmethod
    def from_export(cls, data: Mapping[str, Any]) -> LambdaStages:
        stages = cls()
        stages._wakes = data["wakes"]
        stages.delivered_by = data["delivered_by"]
        stages.run_ms = data["run_ms"]
        stages.idle_runs = data["idle_runs"]
        stages.queue_wait_ms = data["queue_wait_ms"]
        return stages

    # --- figures -------------------------------------------------------------------------
    def _wake_time(self, partition: str, seq: int) -> float | None:
        wakes = self._wakes.get(partition, [])
        heads = [h for h, _ in wakes]
        i = bisect.bisect_right(heads, seq)  # the first wake for a head past seq
        return wakes[i][1] if i < len(wakes) else None

    def breakdown(
        self,
        keys: Sequence[str],
        sent: Mapping[str, float],
        committed: Mapping[str, float],
        invoked: Mapping[str, float],
        percentiles: Callable[[Sequence[float]], dict[str, float]],
    ) -> dict[str, dict[str, float]]:
        """Per stage, percentiles in ms over ``keys`` (the timed records)."""
        spans: dict[str, list[float]] = {s: [] for s in STAGES}
        for key in keys:
            if key not in invoked or key not in committed or key not in self.delivered_by:
                continue
            partition, seq, run = self.delivered_by[key]
            done = committed[key]
            woke = self._wake_time(partition, seq)
            woke = done if woke is None else max(woke, done)
            ran = max(run, woke)
            spans["committed"].append(1000 * (done - sent[key]))
            spans["wake sent"].append(1000 * (woke - done))
            spans["run started"].append(1000 * (ran - woke))
            spans["invoked"].append(1000 * (invoked[key] - ran))
        figures = {f"-> {name}": percentiles(v) for name, v in spans.items() if v}
        if self.run_ms:
            runs = f"runs ({len(self.run_ms)}, {self.idle_runs} invoked nothing)"
            figures[runs] = percentiles(self.run_ms)
        if self.queue_wait_ms:
            figures["wake queue wait"] = percentiles(self.queue_wait_ms)
        return figures


_NUMBERED = re.compile(r"[-_]?\d+")


def _task_cpu_s(native_id: int) -> float | None:
    fields = proc_stat(f"/proc/self/task/{native_id}/stat")
    if fields is None:
        return None  # the thread ended, or no /proc
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime


def _label(name: str) -> str:
    """A thread's name without its number: the embedded AWS's request threads add up."""
    return _NUMBERED.sub("", name)


class ThreadCpu:
    """CPU seconds per thread name between ``start`` and ``stop`` (threads that ended in
    between count under "ended threads", from the process's total)."""

    def __init__(self) -> None:
        self._start: dict[int, float] = {}
        self._wall = 0.0
        self._process = 0.0
        self.by_thread: dict[str, float] = {}
        self.process_s = 0.0
        self.wall_s = 0.0

    def _sample(self) -> dict[int, tuple[str, float]]:
        out = {}
        for thread in threading.enumerate():
            if thread.native_id is not None and (cpu := _task_cpu_s(thread.native_id)) is not None:
                out[thread.native_id] = (thread.name, cpu)
        return out

    def start(self) -> None:
        self._start = {tid: cpu for tid, (_, cpu) in self._sample().items()}
        self._wall, self._process = time.monotonic(), time.process_time()

    def stop(self) -> None:
        self.wall_s = time.monotonic() - self._wall
        self.process_s = time.process_time() - self._process
        by: dict[str, float] = {}
        for tid, (name, cpu) in self._sample().items():
            label = _label(name)
            by[label] = by.get(label, 0.0) + cpu - self._start.get(tid, 0.0)
        by["ended threads"] = max(0.0, self.process_s - sum(by.values()))
        self.by_thread = by

    def summary(self, top: int = 8) -> str:
        if not self.wall_s:
            return ""
        parts = sorted(self.by_thread.items(), key=lambda kv: -kv[1])[:top]
        shares = ", ".join(f"{name} {100 * s / self.wall_s:.0f}%" for name, s in parts if s)
        return (
            f"process CPU {100 * self.process_s / self.wall_s:.0f}% of one core over "
            f"{self.wall_s:.1f} s: {shares}"
        )


class ProcessCpu:
    """CPU seconds of another process (by pid) between ``start`` and ``stop``: the embedded
    AWS's server when it runs in a process of its own."""

    def __init__(self, pid: int, name: str) -> None:
        self.pid, self.name = pid, name
        self._cpu = self._wall = 0.0
        self.cpu_s = self.wall_s = 0.0

    def _sample(self) -> float:
        stat = proc_stat(f"/proc/{self.pid}/stat")
        if stat is None:
            return 0.0  # the process ended, or no /proc
        return (int(stat[11]) + int(stat[12])) / TICKS  # utime, stime

    def start(self) -> None:
        self._cpu, self._wall = self._sample(), time.monotonic()

    def stop(self) -> None:
        self.cpu_s, self.wall_s = self._sample() - self._cpu, time.monotonic() - self._wall

    def summary(self) -> str:
        if not self.wall_s:
            return ""
        return f"{self.name} CPU {100 * self.cpu_s / self.wall_s:.0f}% of one core"


def profiled(target: Callable[..., None], path: Path) -> Callable[..., None]:
    """``target`` run under cProfile in its own thread; the profile written to ``path``."""

    def run(*args: Any) -> None:
        profile = cProfile.Profile()
        profile.enable()
        try:
            target(*args)
        finally:
            profile.disable()
            path.parent.mkdir(parents=True, exist_ok=True)
            profile.dump_stats(str(path))

    return run
