"""The CLI tests' fixture: `shardlog local up` as a real subprocess on loopback."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.cli import local_up_process


@pytest.fixture
def local_up(tmp_path: Path) -> Iterator[tuple[Path, dict[str, Any]]]:
    """(state file, its JSON) of a `shardlog local up` with 3 shards, stopped by SIGTERM."""
    state = tmp_path / "local.json"
    with local_up_process(state, "--shards", "3") as running:
        yield state, running
