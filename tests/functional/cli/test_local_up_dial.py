"""`shardlog local up --ingest-batch-size N --ingest-batching-window-ms MS`: the deployed
stack's schema, at and past each edge. A refused value is one usage error naming the option
before anything starts; an accepted one reaches the local poller."""

from __future__ import annotations

import threading
import uuid
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from shardlog import constants as C
from shardlog.cli.main import cli


def local_up(state: Path, *options: str) -> Result:
    """In this process, with names of its own (moto's state is per process)."""
    suffix = uuid.uuid4().hex[:8]
    names = ["--stream", f"dial-{suffix}", "--bucket", f"dial-{suffix}"]
    tables = {
        C.ENV_PARTITIONS_TABLE: f"dial-partitions-{suffix}",
        C.ENV_CONSUMERS_TABLE: f"dial-consumers-{suffix}",
    }
    ports = ["--port", "0", "--api-port", "0", "--console-port", "-1"]
    command = ["local", "up", "--shards", "1", "--max-seconds", "0", *ports, *options]
    return CliRunner().invoke(cli, [*names, "--state-file", str(state), *command], env=tables)


def embedded_aws_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name == "embedded-aws" and t.is_alive()]


@pytest.mark.parametrize(
    ("option", "value", "reason"),
    [
        ("--ingest-batch-size", "0", "greater than or equal to 1"),
        ("--ingest-batch-size", "10001", "less than or equal to 10000"),
        ("--ingest-batching-window-ms", "-1", "greater than or equal to 0"),
        ("--ingest-batching-window-ms", "300001", "less than or equal to 300000"),
        ("--ingest-batching-window-ms", "1500", "not a whole number of seconds"),
    ],
)
def test_past_an_edge_is_refused_before_anything_starts(
    tmp_path: Path, option: str, value: str, reason: str
) -> None:
    state = tmp_path / "local.json"
    before = embedded_aws_threads()
    result = local_up(state, option, value)
    assert result.exit_code == 2
    assert f"Invalid value for '{option}'" in result.stderr
    assert reason in result.stderr
    assert embedded_aws_threads() == before
    assert not state.exists()


@pytest.mark.parametrize(
    ("batch", "window"), [("10000", "300000"), ("1", "0")], ids=["largest", "smallest"]
)
def test_at_each_edge_the_poller_gets_the_setting(tmp_path: Path, batch: str, window: str) -> None:
    result = local_up(
        tmp_path / "local.json",
        "--ingest-batch-size",
        batch,
        "--ingest-batching-window-ms",
        window,
    )
    assert result.exit_code == 0, result.output
    assert f"ingesting batches of up to {batch} records, gathered for up to {window} ms" in (
        result.stdout
    )
