"""`shardlog local up` starts a console beside the API: its URL is in the state file, and it
serves the runtime's partitions."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.cli import local_up_process, shardlog_subprocess, wait_for
from tests.support.console import cells, http


def test_local_up_serves_a_console_of_its_runtime(tmp_path: Path) -> None:
    state = tmp_path / "local.json"
    with local_up_process(state, "--shards", "2"):
        wait_for(lambda: "consoleUrl" in json.loads(state.read_text()), "the console's URL")
        url = json.loads(state.read_text())["consoleUrl"]
        assert url.startswith("http://127.0.0.1:")
        status, page = http(url + "/")
        expected = json.loads(shardlog_subprocess(state, "status", "--json"))
    assert status == 200
    shown = cells(page).tables["partitions"]
    assert sorted(shown) == sorted(row["partitionId"] for row in expected)
    assert "read-only" in page


def test_a_busy_console_port_stops_local_up_with_one_line(tmp_path: Path) -> None:
    from shardlog.config import ShardlogConfig
    from shardlog.console.server import Console, ConsoleServer
    from shardlog.console.source import Deployment
    from tests.support.cli import run_cli

    with ConsoleServer(Console(Deployment(ShardlogConfig()))) as taken:
        result = run_cli(
            None, "--state-file", str(tmp_path / "local.json"), "local", "up", "--port", "0",
            "--api-port", "0", "--console-port", str(taken.port), "--max-seconds", "0",
        )  # fmt: skip
    assert result.exit_code == 2
    assert result.output.strip().splitlines()[-1] == (
        f"error: cannot listen on 127.0.0.1:{taken.port} (Address already in use): pass another "
        "--console-port (0 picks a free one) or stop what uses it"
    )
    assert not (tmp_path / "local.json").exists()  # the runtime stopped
