"""Worker processes (`shardlog consume --processor ...`) against the embedded AWS of this
test process: they balance, a SIGKILLed worker's partitions are taken after its leases
expire and resumed from their checkpoints, a joining worker gets leases handed over, and
SIGTERM hands partitions off gracefully.
Real processes, so waiting is real, always bounded, and every child is killed at the end."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from shardlog.tables import Lease, Tables
from tests.support import REPO_ROOT
from tests.support.aws import AwsEnv
from tests.support.factories import append, incoming_records

ROOT = REPO_ROOT
GROUP = "procs"
LEASE_MS = 2_000
PARTITIONS = [f"p{i}" for i in range(4)]


class Crew:
    def __init__(self, aws: AwsEnv, out: Path) -> None:
        self.aws, self.out = aws, out
        self.procs: dict[str, subprocess.Popen[bytes]] = {}  # the ones running
        self.stopped: list[subprocess.Popen[bytes]] = []

    def log(self, name: str) -> str:
        return self.out.with_name(f"{name}.log").read_text()

    def start(self, name: str) -> None:
        env = {
            **os.environ,
            "SHARDLOG_PARTITIONS_TABLE": self.aws.config.partitions_table,
            "SHARDLOG_CONSUMERS_TABLE": self.aws.config.consumers_table,
            "SHARDLOG_CONSUMER_OUT": str(self.out),
            "SHARDLOG_CONSUMER_NAME": name,
        }
        argv = [
            *(sys.executable, "-m", "shardlog", "--state-file", "/nonexistent/local.json"),
            *("--endpoint-url", self.aws.config.endpoint_url or "", "--bucket"),
            *(self.aws.config.bucket, "consume", "--group", GROUP, "--worker-id", name),
            *("--processor", "tests.functional.consumer.processors:FileRecorder"),
            *("--lease-duration-ms", str(LEASE_MS), "--renew-interval-ms", "500"),
            *("--take-interval-ms", "200", "--idle-poll-interval-ms", "100"),
            *("--records-per-call", "5", "--max-seconds", "90"),
        ]
        with self.out.with_name(f"{name}.log").open("wb") as log:
            self.procs[name] = subprocess.Popen(
                argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=log
            )

    def leases(self) -> list[Lease]:
        return Tables(self.aws.clients, self.aws.config.tables).list_leases(GROUP)

    def seen(self) -> list[tuple[str, str, int]]:
        if not self.out.exists():
            return []
        lines = [json.loads(line) for line in self.out.read_text().splitlines() if line]
        return [(line["worker"], line["partition"], line["seq"]) for line in lines]

    def wait(self, what: str, done: Callable[[], bool], timeout_s: float = 30) -> None:
        deadline = time.monotonic() + timeout_s
        while not done():
            for name, proc in self.procs.items():
                if proc.poll() is not None:
                    pytest.fail(f"worker {name} exited: {self.log(name)[-3000:]}")
            if time.monotonic() > deadline:
                pytest.fail(f"timed out waiting for {what}; leases: {self.leases()}")
            time.sleep(0.1)

    def owners(self) -> Counter[str | None]:
        now_ms = int(time.time() * 1000)
        return Counter(lease.owner if lease.is_live(now_ms) else None for lease in self.leases())

    def checkpoints(self) -> dict[str, str | None]:
        return {lease.partition_id: lease.checkpoint for lease in self.leases()}

    def stop(self, name: str, signum: int) -> int:
        proc = self.procs.pop(name)
        self.stopped.append(proc)
        proc.send_signal(signum)
        return proc.wait(timeout=30)

    def kill_all(self) -> None:
        for proc in [*self.procs.values(), *self.stopped]:
            if proc.poll() is None:
                proc.kill()
            proc.wait()


@pytest.fixture
def crew(aws: AwsEnv, tmp_path: Path) -> Iterator[Crew]:
    team = Crew(aws, tmp_path / "seen.jsonl")
    try:
        yield team
    finally:
        team.kill_all()


def test_worker_processes_balance_fail_over_and_hand_off(aws: AwsEnv, crew: Crew) -> None:
    for partition_id in PARTITIONS:
        append(aws, partition_id, incoming_records(12))
    crew.start("a")
    crew.start("b")
    crew.wait("all records", lambda: len({(p, s) for _, p, s in crew.seen()}) == 48)
    crew.wait("a balanced assignment", lambda: crew.owners() == Counter({"a": 2, "b": 2}))

    # SIGKILL a: its leases stay live until they expire, then b takes them over.
    held_by_a = {lease.partition_id for lease in crew.leases() if lease.owner == "a"}
    assert crew.stop("a", signal.SIGKILL) == -signal.SIGKILL
    at_kill = crew.checkpoints()
    before_kill = len(crew.seen())
    for partition_id in PARTITIONS:
        append(aws, partition_id, incoming_records(6))
    crew.wait("b to take over", lambda: crew.owners() == Counter({"b": 4}), LEASE_MS / 1000 + 20)
    crew.wait("all records", lambda: len({(p, s) for _, p, s in crew.seen()}) == 72)
    seen = crew.seen()
    for partition_id in PARTITIONS:
        assert {s for _, p, s in seen if p == partition_id} == set(range(18)), "nothing skipped"
        resumed = [s for _, p, s in seen[before_kill:] if p == partition_id]
        assert min(resumed) == int(at_kill[partition_id] or 0), "resumed at the checkpoint"
        assert Counter(resumed).most_common(1)[0][1] == 1
    assert {p for w, p, s in seen if w == "b" and s >= 12} == set(PARTITIONS)
    assert held_by_a <= {p for w, p, s in seen if w == "b"}

    # c joins and gets half by graceful handoffs, one request per cycle: b finishes its
    # batch, checkpoints and transfers the lease to c; nothing is stolen or delivered twice.
    b_logged = len(crew.log("b"))
    before = len(crew.seen())
    crew.start("c")
    crew.wait("c to get its share", lambda: crew.owners() == Counter({"b": 2, "c": 2}))
    crew.wait("b to hand 2 over", lambda: crew.log("b")[b_logged:].count("(handed over to c)") == 2)
    assert "stole lease" not in crew.log("c") and "lost the lease" not in crew.log("b")[b_logged:]
    assert len(crew.seen()) == before, "a planned move delivers nothing twice"
    for partition_id in PARTITIONS:
        append(aws, partition_id, incoming_records(2))
    crew.wait("the new records", lambda: len(crew.seen()) == before + 8)
    assert crew.stop("b", signal.SIGTERM) == 0, crew.log("b")
    crew.wait("c to take b's partitions at once", lambda: crew.owners() == Counter({"c": 4}), 10)
    assert crew.stop("c", signal.SIGTERM) == 0, crew.log("c")
    assert crew.owners() == Counter({None: 4})  # every lease handed back
    assert crew.checkpoints() == dict.fromkeys(PARTITIONS, "20")
    assert len(crew.seen()) == before + 8, "graceful handoffs deliver nothing twice"
