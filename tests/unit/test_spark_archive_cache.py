"""`make spark-archive` on a fresh clone copies the archive its machine built before from the
same inputs, and builds anew when shardlog's files changed (shardlog/spark/archive.py)."""

from __future__ import annotations

import tarfile
from pathlib import Path

from shardlog.spark.archive import KEPT_ARCHIVES, build, requirements_key


def clone(root: Path, source: str = "VALUE = 1\n") -> Path:
    """A repository holding only shardlog's part of the archive."""
    (root / "shardlog").mkdir(parents=True)
    (root / "shardlog" / "__init__.py").write_text(source)
    return root


def wheel_cache(cache_root: Path) -> Path:
    """The unpacked wheels as a previous build left them (no pip here: offline)."""
    wheels = cache_root / "spark-wheels"
    unpacked = wheels / requirements_key()
    (unpacked / "pkg").mkdir(parents=True)
    (unpacked / "pkg" / "__init__.py").write_text("")
    (unpacked / ".complete").write_text("")
    return wheels


def names(archive: Path) -> set[str]:
    with tarfile.open(archive) as tar:
        return set(tar.getnames())


def test_a_fresh_clone_copies_the_archive_built_from_the_same_inputs(tmp_path: Path) -> None:
    wheels = wheel_cache(tmp_path / "cache")
    first = build(
        tmp_path / "one" / "build" / "deps.tar.gz", root=clone(tmp_path / "one"), cache=wheels
    )
    assert names(first) == {"shardlog/__init__.py", "pkg/__init__.py"}
    [kept] = (tmp_path / "cache" / "spark-archives").iterdir()
    assert kept.read_bytes() == first.read_bytes()
    kept.write_bytes(b"the cached copy")  # what the next build reads, if it reads the cache

    fresh = build(
        tmp_path / "two" / "build" / "deps.tar.gz", root=clone(tmp_path / "two"), cache=wheels
    )
    assert fresh.read_bytes() == b"the cached copy"

    changed = clone(tmp_path / "three", source="VALUE = 2\n")
    rebuilt = build(tmp_path / "three" / "build" / "deps.tar.gz", root=changed, cache=wheels)
    assert names(rebuilt) == {"shardlog/__init__.py", "pkg/__init__.py"}
    assert len(list((tmp_path / "cache" / "spark-archives").iterdir())) == 2


def test_only_the_newest_archives_stay_in_the_cache(tmp_path: Path) -> None:
    wheels = wheel_cache(tmp_path / "cache")
    for n in range(KEPT_ARCHIVES + 2):
        root = clone(tmp_path / f"clone{n}", source=f"VALUE = {n}\n")
        build(root / "build" / "deps.tar.gz", root=root, cache=wheels)
    assert len(list((tmp_path / "cache" / "spark-archives").glob("*.tar.gz"))) == KEPT_ARCHIVES


def test_shardlogs_part_alone_is_never_cached(tmp_path: Path) -> None:
    wheels = wheel_cache(tmp_path / "cache")
    build(tmp_path / "deps.tar.gz", third_party=False, root=clone(tmp_path / "repo"), cache=wheels)
    assert not (tmp_path / "cache" / "spark-archives").exists()
