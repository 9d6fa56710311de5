"""The `shardlog` CLI: in-process (click's runner) against a test's resources, or as a real
subprocess (bounded waits)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import boto3
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


@contextlib.contextmanager
def local_up_process(
    state: Path,
    *args: str,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
) -> Iterator[dict[str, Any]]:
    """`shardlog local up` as a real subprocess on free loopback ports, with ``args``;
    yields the state file's JSON once written; stopped with SIGTERM (bounded waits)."""
    environ = {k: v for k, v in os.environ.items() if k != "AWS_ENDPOINT_URL"}
    environ.update(env or {})
    process = subprocess.Popen(
        [
            sys.executable, "-m", "shardlog", "--state-file", str(state), "local", "up",
            "--port", str(free_port()), "--api-port", "0", "--console-port", "0",
            "--max-seconds", "300", *args,
        ],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=environ,
    )  # fmt: skip
    try:
        wait_for(lambda: state.exists() or process.poll() is not None, "the state file")
        assert process.poll() is None, process.stdout.read() if process.stdout else ""
        yield json.loads(state.read_text())
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=60)


def kinesis_for(state: dict[str, Any]) -> Any:
    """A plain boto3 Kinesis client of a `local up` (no shardlog code), any credentials."""
    return _plain_client("kinesis", state)


def _plain_client(service: str, state: dict[str, Any]) -> Any:
    return boto3.client(
        service,
        endpoint_url=state["endpointUrl"],
        region_name=state["region"],
        aws_access_key_id="anything",
        aws_secret_access_key="anything",
    )


def segment_versions(state: dict[str, Any]) -> set[int]:
    """The format versions of the segments a `local up` holds in S3 (the byte after the
    magic: 1, or 2 with record ids, uncompressed; 3 compressed; docs/FORMAT.md)."""
    s3 = _plain_client("s3", state)
    listed = s3.list_objects_v2(Bucket=state["bucket"], Prefix="events/")["Contents"]
    return {s3.get_object(Bucket=state["bucket"], Key=o["Key"])["Body"].read()[4] for o in listed}
