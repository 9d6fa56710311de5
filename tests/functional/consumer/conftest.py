"""The consumer tests' fixtures: amazon_kclpy present, and where KCL child processes write."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def kclpy() -> None:
    try:
        import amazon_kclpy.v3.processor  # noqa: F401
    except ImportError:
        pytest.fail("amazon_kclpy is not installed in the venv: run `make kclpy` (see Makefile)")


@pytest.fixture
def child_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """Children inherit the environment: where they write what they got."""
    paths = {name: tmp_path / f"{name}.jsonl" for name in ("out", "raw", "marker")}
    monkeypatch.setenv("SHARDLOG_CHILD_OUT", str(paths["out"]))
    monkeypatch.setenv("SHARDLOG_CHILD_RAW", str(paths["raw"]))
    monkeypatch.setenv("SHARDLOG_CHILD_MARKER", str(paths["marker"]))
    return paths
