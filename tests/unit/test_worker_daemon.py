"""The local runs' pyspark daemon (``shardlog.spark.worker_daemon``): a zip importer reads
its archive's directory again only when the archive changed, and then it does."""

from __future__ import annotations

import zipfile
import zipimport
from pathlib import Path

import pytest

from shardlog.spark import worker_daemon


def archive(path: Path, modules: dict[str, str]) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        for name, source in modules.items():
            zf.writestr(f"{name}.py", source)
    return path


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every archive directory Python reads, in order."""
    seen: list[str] = []
    read = zipimport._read_directory  # type: ignore[attr-defined]

    def counted(path: str) -> object:
        seen.append(path)
        return read(path)

    monkeypatch.setattr(zipimport, "_read_directory", counted)
    monkeypatch.setattr(worker_daemon, "_READ_AT", {})
    return seen


def test_an_unchanged_archive_is_not_read_again(tmp_path: Path, reads: list[str]) -> None:
    path = str(archive(tmp_path / "a.zip", {"first": "X = 1"}))
    importer = zipimport.zipimporter(path)
    worker_daemon.invalidate_caches(importer)  # the first: read, as Python's own
    worker_daemon.invalidate_caches(importer)
    worker_daemon.invalidate_caches(zipimport.zipimporter(path))  # another importer of it
    assert reads.count(path) == 2  # the importer's creation and the first invalidation
    assert importer.find_spec("first") is not None


def test_a_changed_archive_is_read_again(tmp_path: Path, reads: list[str]) -> None:
    path = tmp_path / "a.zip"
    importer = zipimport.zipimporter(str(archive(path, {"first": "X = 1"})))
    worker_daemon.invalidate_caches(importer)
    archive(path, {"first": "X = 1", "second": "Y = 2"})  # a new size
    worker_daemon.invalidate_caches(importer)
    assert importer.find_spec("second") is not None
    path.unlink()  # gone: Python's own answer (nothing to import from it)
    worker_daemon.invalidate_caches(importer)
    assert importer.find_spec("second") is None
