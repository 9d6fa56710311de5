"""The dependency archive of `make spark-archive` (shardlog's part; offline)."""

from __future__ import annotations

import tarfile
from pathlib import Path

from shardlog.spark.archive import build


def test_archive_holds_the_job_side_of_shardlog_only(tmp_path: Path) -> None:
    archive = build(tmp_path / "deps.tar.gz", third_party=False)
    with tarfile.open(archive) as tar:
        names = set(tar.getnames())
    assert {"shardlog/__init__.py", "shardlog/format.py", "shardlog/spark/io.py"} <= names
    assert "shardlog/spark/watermark.py" in names and "shardlog/py.typed" in names
    assert not any(n.startswith(("shardlog/local/", "shardlog/cli/")) for n in names)
    assert "shardlog/local/demo.py" not in names
    assert not any("__pycache__" in n for n in names)


def test_archive_is_reproducible(tmp_path: Path) -> None:
    first = build(tmp_path / "a" / "deps.tar.gz", third_party=False).read_bytes()
    second = build(tmp_path / "b" / "deps.tar.gz", third_party=False).read_bytes()
    assert first == second
