"""Acceptance: plain boto3 (no shardlog code) produces into `shardlog local up` across a
split and a merge; every record appears in `shardlog read` exactly once, in per-key order."""

from __future__ import annotations

import base64
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import boto3
import pytest

DEADLINE_S = 120


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _shardlog(state: Path, *args: str) -> str:
    out = subprocess.run(
        [sys.executable, "-m", "shardlog", "--state-file", str(state), *args],
        check=True,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return out.stdout


def _wait_for(condition: Any, what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.2)  # polling a subprocess, bounded by DEADLINE_S
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def local_up(tmp_path: Path) -> Any:
    state = tmp_path / "local.json"
    env = {k: v for k, v in os.environ.items() if k != "AWS_ENDPOINT_URL"}
    process = subprocess.Popen(
        [
            sys.executable, "-m", "shardlog", "--state-file", str(state),
            "local", "up", "--port", str(_free_port()), "--api-port", "0", "--shards", "3",
            "--max-seconds", "300",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )  # fmt: skip
    try:
        _wait_for(lambda: state.exists() or process.poll() is not None, "the state file")
        assert process.poll() is None, process.stdout.read() if process.stdout else ""
        yield state, json.loads(state.read_text())
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=60)


def test_plain_boto3_across_split_and_merge(local_up: Any) -> None:
    state_file, state = local_up
    kinesis = boto3.client(
        "kinesis",
        endpoint_url=state["endpointUrl"],
        region_name=state["region"],
        aws_access_key_id="anything",
        aws_secret_access_key="anything",
    )
    stream = state["streamName"]
    counters: dict[str, int] = defaultdict(int)

    def put_batch(count: int) -> None:
        entries = []
        for i in range(count):
            key = f"key-{(len(entries) * 7 + i) % 40}"
            entries.append(
                {"PartitionKey": key, "Data": json.dumps({"k": key, "n": counters[key]}).encode()}
            )
            counters[key] += 1
        for start in range(0, len(entries), 40):  # at most one record per key per call
            chunk = entries[start : start + 40]
            assert kinesis.put_records(StreamName=stream, Records=chunk)["FailedRecordCount"] == 0

    put_batch(200)
    shards = kinesis.list_shards(StreamName=stream)["Shards"]
    first = shards[0]
    low, high = (int(first["HashKeyRange"][k]) for k in ("StartingHashKey", "EndingHashKey"))
    kinesis.split_shard(
        StreamName=stream, ShardToSplit=first["ShardId"], NewStartingHashKey=str((low + high) // 2)
    )
    put_batch(200)
    kinesis.merge_shards(
        StreamName=stream,
        ShardToMerge=shards[1]["ShardId"],
        AdjacentShardToMerge=shards[2]["ShardId"],
    )
    put_batch(200)
    total = sum(counters.values())

    def committed() -> bool:
        rows = json.loads(_shardlog(state_file, "status", "--json"))
        return sum(r["nextSeq"] for r in rows) >= total

    _wait_for(committed, "ingest to catch up")
    _shardlog(state_file, "sync")
    rows = json.loads(_shardlog(state_file, "status", "--json"))
    assert len(rows) == 6
    ids = {r["partitionId"]: r for r in rows}
    ordered: list[str] = []
    while len(ordered) < len(ids):  # parents before children
        ordered += [
            pid
            for pid, row in sorted(ids.items())
            if pid not in ordered and all(p in ordered for p in row["parents"])
        ]
    seen: dict[str, list[int]] = defaultdict(list)
    for pid in ordered:
        lines = _shardlog(state_file, "read", "--partition", pid).splitlines()
        assert [json.loads(line)["seq"] for line in lines] == list(range(ids[pid]["nextSeq"]))
        for line in lines:
            body = json.loads(base64.b64decode(json.loads(line)["data"]))
            seen[body["k"]].append(body["n"])
    assert {k: v for k, v in seen.items()} == {k: list(range(n)) for k, n in counters.items()}
