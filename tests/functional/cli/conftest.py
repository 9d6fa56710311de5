"""The CLI tests' fixture: `shardlog local up` as a real subprocess on loopback."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.cli import free_port, wait_for


@pytest.fixture
def local_up(tmp_path: Path) -> Iterator[tuple[Path, dict[str, Any]]]:
    """(state file, its JSON) of a `shardlog local up` with 3 shards, stopped by SIGTERM."""
    state = tmp_path / "local.json"
    env = {k: v for k, v in os.environ.items() if k != "AWS_ENDPOINT_URL"}
    process = subprocess.Popen(
        [
            sys.executable, "-m", "shardlog", "--state-file", str(state),
            "local", "up", "--port", str(free_port()), "--api-port", "0", "--shards", "3",
            "--max-seconds", "300",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )  # fmt: skip
    try:
        wait_for(lambda: state.exists() or process.poll() is not None, "the state file")
        assert process.poll() is None, process.stdout.read() if process.stdout else ""
        yield state, json.loads(state.read_text())
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=60)
