"""The `shardlog` CLI: in-process (click's runner) against a test's resources, or as a real
subprocess (bounded waits)."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from click.testing import CliRunner, Result

from shardlog.cli.main import cli
from tests.support.aws import AwsEnv


def run_cli(aws: AwsEnv | None, *args: str, input: str | None = None) -> Result:
    """``shardlog [names of aws's resources] *args``; no state file is read."""
    prefix = ["--state-file", "/nonexistent/local.json"]
    env = {}
    if aws is not None:
        prefix += [
            "--endpoint-url",
            aws.config.endpoint_url or "",
            "--stream",
            aws.config.stream_name,
            "--bucket",
            aws.config.bucket,
        ]
        env = {
            "SHARDLOG_PARTITIONS_TABLE": aws.config.partitions_table,
            "SHARDLOG_CONSUMERS_TABLE": aws.config.consumers_table,
        }
    return CliRunner().invoke(cli, [*prefix, *args], input=input, env=env, catch_exceptions=False)


DEADLINE_S = 120


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def shardlog_subprocess(state: Path, *args: str) -> str:
    """``python -m shardlog --state-file STATE *args``; its stdout (raises on exit != 0)."""
    out = subprocess.run(
        [sys.executable, "-m", "shardlog", "--state-file", str(state), *args],
        check=True,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return out.stdout


def wait_for(condition: Callable[[], object], what: str, deadline_s: float = DEADLINE_S) -> None:
    """Poll a condition on a subprocess, bounded by ``deadline_s``."""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.2)  # polling another process: there is no clock to inject
    raise AssertionError(f"timed out waiting for {what}")
