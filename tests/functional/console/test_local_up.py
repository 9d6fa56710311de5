"""`shardlog local up` and its console's port. That it starts a console serving the runtime's
partitions is checked by the CLI's acceptance run (tests/functional/cli/test_local_up.py),
across a split and a merge."""

from __future__ import annotations

from pathlib import Path


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
