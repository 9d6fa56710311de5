"""`shardlog local up` on a port another process holds: one line naming the option that moves
it, exit code 2, no traceback, and nothing left running or written."""

from __future__ import annotations

import socket
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from shardlog import constants as C
from shardlog.cli.main import cli


@pytest.fixture
def busy_port() -> Iterator[int]:
    """A port on 127.0.0.1 held by a listening socket for the test's length."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield int(sock.getsockname()[1])


def local_up(state: Path, *ports: str) -> tuple[int, list[str]]:
    """In this process, with names of its own: moto's state is per process, and what the
    runtime provisioned before the API's port failed stays there."""
    suffix = uuid.uuid4().hex[:8]
    names = ["--stream", f"busy-{suffix}", "--bucket", f"busy-{suffix}"]
    tables = {
        C.ENV_PARTITIONS_TABLE: f"busy-partitions-{suffix}",
        C.ENV_CONSUMERS_TABLE: f"busy-consumers-{suffix}",
    }
    command = ["local", "up", "--shards", "1", "--max-seconds", "0", *ports]
    result = CliRunner().invoke(cli, [*names, "--state-file", str(state), *command], env=tables)
    return result.exit_code, result.stderr.strip().splitlines()


def embedded_aws_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name == "embedded-aws" and t.is_alive()]


@pytest.mark.parametrize(
    ("option", "other"),
    [("--port", "--api-port"), ("--api-port", "--port")],
)
def test_a_port_in_use_is_one_line_naming_its_option(
    busy_port: int, tmp_path: Path, option: str, other: str
) -> None:
    state = tmp_path / "local.json"
    before = embedded_aws_threads()

    exit_code, stderr = local_up(state, option, str(busy_port), other, "0")

    assert exit_code == 2
    assert len(stderr) == 1, stderr
    assert stderr[0].startswith("error: ")
    assert f"port {busy_port} on 127.0.0.1 is already in use" in stderr[0]
    assert f"choose another with {option} " in stderr[0]
    # What had started (the embedded AWS, before the API's port) is stopped again.
    assert embedded_aws_threads() == before
    assert not state.exists()
