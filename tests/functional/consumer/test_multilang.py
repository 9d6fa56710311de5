"""The KCL multi-language protocol: real child processes, one per partition, driven by a
worker against the embedded AWS. Children: one written from the protocol's documentation,
and amazon_kclpy v3 and v2 record processors, unchanged (the v3 one under the
`shardlog consume` command itself). Lease decisions use a manual clock; only the child
processes run in real time, with bounded waits."""

from __future__ import annotations

import dataclasses
import io
import json
import logging
import os
import signal
import subprocess
import sys
import time
import tracemalloc
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from shardlog import constants as C
from shardlog.cli.main import cli
from shardlog.clock import ManualClock
from shardlog.consumer import ConsumerSettings, MultiLangSettings, Worker, multilang_factory
from shardlog.consumer.multilang import MIN_MAX_LINE_BYTES, OverlongLine, bounded_lines
from shardlog.tables import Tables
from tests.support.aws import AwsEnv
from tests.support.factories import (
    Journal,
    append,
    checkpoints,
    end_partition,
    incoming_records,
    recording_worker,
    register_partition,
)

CHILDREN = Path(__file__).parent / "multilang_children"
SETTINGS = ConsumerSettings(
    lease_duration_ms=10_000,
    renew_interval_ms=3_000,
    take_interval_ms=1,
    idle_poll_interval_ms=0,
    records_per_call=4,
    failure_backoff_ms=100,
    max_failure_backoff_ms=400,
)
GROUP = "polyglot"


def command(child: str) -> list[str]:
    return [sys.executable, str(CHILDREN / child)]


def lines(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def records_seen(path: Path) -> list[dict[str, Any]]:
    return [line for line in lines(path) if "seq" in line]


def daemon(
    aws: AwsEnv,
    clock: ManualClock,
    child: str,
    multilang: MultiLangSettings | None = None,
    worker_id: str = "daemon",
) -> Worker:
    return Worker(
        GROUP,
        config=aws.config,
        clients=aws.clients,
        settings=SETTINGS,
        clock=clock,
        worker_id=worker_id,
        factory=multilang_factory(command(child), multilang or MultiLangSettings(10_000, 5_000)),
    )


def cycle_until(
    workers: list[Worker], clock: ManualClock, done: Callable[[], bool], timeout_s: float = 30
) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        assert time.monotonic() < deadline, "timed out"
        for worker in workers:
            worker.run_once()
        clock.advance(10)


def test_a_child_written_from_the_protocol_documentation(
    aws: AwsEnv, clock: ManualClock, child_env: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SHARDLOG_CHILD_BAD_CHECKPOINT", "1")
    register_partition(aws, "p0")
    append(aws, "p0", incoming_records(7, keys=["a"]))
    end_partition(aws, "p0")
    register_partition(aws, "c1", ("p0",))
    append(aws, "c1", incoming_records(3, keys=["a"], arrival_ms=1_700_000_100_000))
    worker = daemon(aws, clock, "protocol_child.py")
    try:
        cycle_until(
            [worker], clock, lambda: checkpoints(aws, GROUP) == {"p0": C.SHARD_END, "c1": "3"}
        )
    finally:
        worker.shutdown()
    seen = records_seen(child_env["out"])
    assert [(r["shard"], r["seq"]) for r in seen] == [("p0", i) for i in range(7)] + [
        ("c1", i) for i in range(3)
    ]
    assert [r["data"] for r in seen[:3]] == ["a:0", "a:1", "a:2"]
    assert {r["subSequenceNumber"] for r in seen} == {0}
    assert seen[8]["arrival"] == 1_700_000_100_001  # approximateArrivalTimestamp, epoch ms
    errors = [
        line["checkpointError"] for line in lines(child_env["out"]) if "checkpointError" in line
    ]
    assert errors and set(errors) == {"IllegalArgumentException"}

    sent = [json.loads(line) for line in child_env["raw"].read_text().splitlines()]
    actions = [m["action"] for m in sent]
    assert actions[0] == "initialize" and actions[-2:] == ["checkpoint", "leaseLost"]
    assert actions.count("initialize") == 2 and actions.count("shardEnded") == 1
    assert actions[actions.index("shardEnded") + 2] == "initialize"  # p0's child ends first
    assert actions[-3] == "shutdownRequested"  # the graceful shutdown, then leaseLost (as KCL)
    first, second = (m for m in sent if m["action"] == "initialize")
    assert first == {
        "action": "initialize",
        "shardId": "p0",
        "sequenceNumber": "TRIM_HORIZON",
        "subSequenceNumber": 0,
    }
    assert second["shardId"] == "c1"
    batch = next(m for m in sent if m["action"] == "processRecords")
    assert set(batch) == {"action", "records", "millisBehindLatest"}
    assert batch["records"][0] == {
        "action": "record",
        "data": "YTow",  # base64 of a:0
        "partitionKey": "a",
        "sequenceNumber": "0",
        "approximateArrivalTimestamp": 1_700_000_000_000,
        "subSequenceNumber": 0,
    }
    replies = [m for m in sent if m["action"] == "checkpoint"]
    assert all(
        set(m) == {"action", "sequenceNumber", "subSequenceNumber", "error"} for m in replies
    )
    shard_end = replies[actions[: actions.index("shardEnded")].count("checkpoint")]
    assert shard_end == {
        "action": "checkpoint",
        "sequenceNumber": None,
        "subSequenceNumber": None,
        "error": None,
    }


def test_amazon_kclpy_v3_processor_runs_unchanged_under_shardlog_consume(
    aws: AwsEnv, kclpy: None, child_env: dict[str, Path]
) -> None:
    register_partition(aws, "p0")
    append(aws, "p0", incoming_records(6))
    end_partition(aws, "p0")
    for child in ("c1", "c2"):
        register_partition(aws, child, ("p0",))
        append(aws, child, incoming_records(4))
    env = {
        **os.environ,
        "SHARDLOG_PARTITIONS_TABLE": aws.config.partitions_table,
        "SHARDLOG_CONSUMERS_TABLE": aws.config.consumers_table,
    }
    argv = [
        sys.executable,
        "-m",
        "shardlog",
        "--state-file",
        "/nonexistent/local.json",
        "--endpoint-url",
        aws.config.endpoint_url or "",
        "--bucket",
        aws.config.bucket,
        "consume",
        "--group",
        "kcl",
        "--take-interval-ms",
        "100",
        "--idle-poll-interval-ms",
        "50",
        "--records-per-call",
        "4",
        "--max-seconds",
        "60",
        "--",
        *command("kclpy_v3_child.py"),
    ]
    proc = subprocess.Popen(
        argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + 45
        while checkpoints(aws, "kcl") != {"p0": C.SHARD_END, "c1": "4", "c2": "4"}:
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "timed out"
            time.sleep(0.1)
        proc.send_signal(signal.SIGTERM)  # graceful: shutdownRequested, release, exit 0
        _, stderr = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, stderr
    seen = records_seen(child_env["out"])
    assert Counter((r["shard"], r["seq"]) for r in seen) == Counter(
        [("p0", i) for i in range(6)] + [(c, i) for c in ("c1", "c2") for i in range(4)]
    )
    assert "initialize p0 at TRIM_HORIZON / 0" in stderr  # the child's STDERR, logged
    assert "stopped: 14 records delivered" in stderr
    tables = Tables(aws.clients, aws.config.tables)
    assert all(lease.owner is None for lease in tables.list_leases("kcl"))  # handed off

    env_args = ["--state-file", "/nonexistent/local.json", "--endpoint-url"]
    status = CliRunner().invoke(
        cli,
        [*env_args, aws.config.endpoint_url or "", "status", "--group", "kcl", "--json"],
        env={k: env[k] for k in ("SHARDLOG_PARTITIONS_TABLE", "SHARDLOG_CONSUMERS_TABLE")},
    )
    assert status.exit_code == 0, status.output
    rows = {row["partitionId"]: row for row in json.loads(status.output)}
    assert rows["p0"]["checkpoint"] == C.SHARD_END
    assert {row["lagRecords"] for row in rows.values()} == {0}


def test_amazon_kclpy_v2_processor_runs_unchanged(
    aws: AwsEnv, clock: ManualClock, kclpy: None, child_env: dict[str, Path]
) -> None:
    register_partition(aws, "p0")
    append(aws, "p0", incoming_records(5))
    end_partition(aws, "p0")
    register_partition(aws, "c1", ("p0",))
    append(aws, "c1", incoming_records(2))
    worker = daemon(aws, clock, "kclpy_v2_child.py")
    try:
        cycle_until(
            [worker], clock, lambda: checkpoints(aws, GROUP) == {"p0": C.SHARD_END, "c1": "2"}
        )
    finally:
        worker.shutdown()
    seen = records_seen(child_env["out"])
    assert [(r["shard"], r["seq"]) for r in seen] == [("p0", i) for i in range(5)] + [
        ("c1", 0),
        ("c1", 1),
    ]


@pytest.mark.parametrize(
    ("failure", "multilang", "logged"),
    [
        ("crash:5", MultiLangSettings(10_000, 5_000), "exited with code 3"),
        ("hang:5", MultiLangSettings(800, 5_000), "sent no reply to processRecords within 800 ms"),
    ],
)
def test_a_child_that_crashes_or_hangs_releases_its_lease_and_restarts_with_backoff(
    aws: AwsEnv,
    clock: ManualClock,
    child_env: dict[str, Path],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    failure: str,
    multilang: MultiLangSettings,
    logged: str,
) -> None:
    monkeypatch.setenv("SHARDLOG_CHILD_FAIL", failure)
    append(aws, "p0", incoming_records(10))
    worker = daemon(aws, clock, "protocol_child.py", multilang)
    try:
        with caplog.at_level(logging.INFO, "shardlog.consumer"):
            cycle_until([worker], clock, lambda: checkpoints(aws, GROUP) == {"p0": "10"})
    finally:
        worker.shutdown()
    assert child_env["marker"].exists()
    seen = records_seen(child_env["out"])
    assert {r["seq"] for r in seen} == set(range(10)), "nothing skipped"
    assert [s for s, n in Counter(r["seq"] for r in seen).items() if n > 1] == [4]
    assert len({r["pid"] for r in seen}) == 2  # a new child after the failure
    assert logged in caplog.text
    assert "lease released; the partition restarts with a new processor" in caplog.text
    assert "will be taken again in 0.1 s" in caplog.text
    assert worker.stats.failed == 1


def test_a_child_hears_lease_lost_when_another_worker_takes_its_partition(
    aws: AwsEnv, clock: ManualClock, child_env: dict[str, Path]
) -> None:
    append(aws, "p0", incoming_records(3))
    worker = daemon(aws, clock, "protocol_child.py")
    journal = Journal()
    other = recording_worker(aws, journal, "other", clock, group=GROUP)
    try:
        cycle_until([worker], clock, lambda: checkpoints(aws, GROUP) == {"p0": "3"})
        clock.advance(SETTINGS.lease_duration_ms + SETTINGS.renew_interval_ms)  # the daemon stalls
        append(aws, "p0", incoming_records(2))
        other.run_once()
        assert other.held == ("p0",) and journal.seqs("p0") == [3, 4]
        worker.run_once()
        assert worker.held == ()
    finally:
        worker.shutdown()
        other.shutdown()
    actions = [json.loads(line)["action"] for line in child_env["raw"].read_text().splitlines()]
    assert actions[-1] == "leaseLost" and "shutdownRequested" not in actions


def test_a_child_printing_without_end_cannot_grow_the_worker(
    aws: AwsEnv,
    clock: ManualClock,
    child_env: dict[str, Path],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """64 MiB with no newline on STDOUT and on STDERR: the daemon holds at most its line cap
    of either at a time, skips the line, and the child's records are delivered as usual."""
    flood_bytes = 64 << 20
    monkeypatch.setenv("SHARDLOG_CHILD_FLOOD", str(flood_bytes))
    append(aws, "p0", incoming_records(3))
    settings = MultiLangSettings(10_000, 5_000, max_line_bytes=MIN_MAX_LINE_BYTES)
    worker = daemon(aws, clock, "protocol_child.py", settings)
    tracemalloc.start()
    try:
        with caplog.at_level(logging.INFO, "shardlog.consumer"):
            cycle_until([worker], clock, lambda: checkpoints(aws, GROUP) == {"p0": "3"})
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        worker.shutdown()
    assert peak < 8 << 20, f"the daemon held {peak} bytes while the child flooded"
    assert [r["seq"] for r in records_seen(child_env["out"])] == [0, 1, 2]
    assert f"skipping a line of {flood_bytes} bytes on the child's STDOUT" in caplog.text
    assert f"(a line of {flood_bytes} bytes, longer than max_line_bytes" in caplog.text


@pytest.mark.parametrize(
    ("data", "lines"),
    [
        (b"a" * 1024 + b"\n" + b"ok\n", [b"a" * 1024 + b"\n", b"ok\n"]),  # at the cap
        (b"a" * 1025 + b"\n" + b"ok\n", [OverlongLine(1025), b"ok\n"]),  # one past it
        (b"a" * 1024, [b"a" * 1024]),  # at the cap, no newline before EOF
        (b"a" * 200_000, [OverlongLine(200_000)]),  # past it, no newline before EOF
        (b"", []),
    ],
)
def test_bounded_lines_cut_at_the_cap(data: bytes, lines: list[Any]) -> None:
    assert list(bounded_lines(io.BufferedReader(io.BytesIO(data)), 1024)) == lines


def test_multilang_settings_and_command_are_validated() -> None:
    with pytest.raises(ValueError, match="response_timeout_ms"):
        MultiLangSettings(response_timeout_ms=0)
    with pytest.raises(ValueError, match=f"max_line_bytes.*>= {MIN_MAX_LINE_BYTES}"):
        MultiLangSettings(max_line_bytes=MIN_MAX_LINE_BYTES - 1)
    assert MultiLangSettings(max_line_bytes=MIN_MAX_LINE_BYTES).max_line_bytes == 1024
    with pytest.raises(ValueError, match="command"):
        multilang_factory([])
    assert dataclasses.replace(SETTINGS).records_per_call == 4
