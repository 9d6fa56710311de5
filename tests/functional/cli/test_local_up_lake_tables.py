"""`shardlog local up --lake-tables FILE`: an upsert declaration is checked as the stack
checks it at synth, one error naming ``key``, before anything starts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from shardlog.cli.main import cli

SCHEMA = {
    "type": "object",
    "required": ["orderId"],
    "properties": {"orderId": {"type": "string"}, "n": {"type": "integer"}},
}


@pytest.mark.parametrize(
    ("declared", "message"),
    [
        ({"mode": "upsert"}, "key: mode upsert needs a key: partitionKey or a property path"),
        ({"mode": "upsert", "key": "n"}, "key: n: n is not required"),
        ({"key": "orderId"}, "key: only a table of mode upsert has a key"),
    ],
)
def test_a_bad_upsert_declaration_is_refused_before_anything_starts(
    tmp_path: Path, declared: dict[str, Any], message: str
) -> None:
    tables = tmp_path / "tables.json"
    tables.write_text(json.dumps([{"name": "latest", "schema": SCHEMA, **declared}]))
    result = CliRunner().invoke(
        cli, ["--state-file", str(tmp_path / "local.json"), "local", "up", "--lake-tables",
              str(tables), "--max-seconds", "0"],
    )  # fmt: skip
    assert result.exit_code == 2, result.output
    assert f"{tables}[0]: {message}" in " ".join(result.output.split())
    assert not (tmp_path / "local.json").exists()  # nothing started
