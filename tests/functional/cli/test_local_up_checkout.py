"""`shardlog local up` where the handlers cannot be imported (the wheel alone, no checkout):
one line saying where they come from, exit code 2, before anything starts."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from shardlog.cli.main import cli
from shardlog.local import checkout


def test_without_a_checkout_local_up_says_where_the_handlers_come_from(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    find_spec = importlib.util.find_spec

    def wheel_only(name: str, *args: Any) -> Any:
        return None if name == checkout.HANDLERS else find_spec(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", wheel_only)
    state = tmp_path / "local.json"
    result = CliRunner().invoke(
        cli, ["--state-file", str(state), "local", "up", "--port", "0", "--max-seconds", "0"]
    )
    assert result.exit_code == 2
    (line,) = result.stderr.strip().splitlines()
    assert "shardlog checkout (lambdas/)" in line
    assert "make install" in line
    assert not state.exists()
