"""The local Spark JVMs' class archive (shardlog/spark/class_archive.py): keyed by the JDK
and pyspark that made it, written whole or not at all, read only when it exists."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from shardlog.local import spark_classes
from shardlog.spark import class_archive, spark_home
from shardlog.spark.class_archive import (
    KEPT,
    ClassArchive,
    launch_options,
    local_class_archive,
    with_options,
)


@pytest.fixture
def jdk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A JAVA_HOME of files (the key reads paths and sizes, never runs java) and a cache."""
    home = tmp_path / "jdk"
    (home / "bin").mkdir(parents=True)
    (home / "bin" / "java").write_text("#!/bin/sh\n")
    (home / "lib").mkdir()
    (home / "lib" / "modules").write_bytes(b"m" * 10)
    monkeypatch.setenv("JAVA_HOME", str(home))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv(class_archive.ENV_SWITCH, raising=False)
    # pyspark's own jars, not a copy of them in this test's cache (tests/unit/test_spark_home.py)
    monkeypatch.setenv(spark_home.ENV_SWITCH, "0")
    return home


def _archive() -> ClassArchive:
    archive = local_class_archive()
    assert archive is not None
    return archive


def test_the_archive_lives_in_the_users_cache_keyed_by_the_jdk(jdk: Path) -> None:
    first = _archive()
    assert first.path.parent == Path(os.environ["XDG_CACHE_HOME"]) / "shardlog" / "spark-classes"
    assert first.path.name.startswith(class_archive.PREFIX) and first.path.suffix == ".jsa"
    assert _archive() == first  # the same inputs, the same archive
    (jdk / "lib" / "modules").write_bytes(b"m" * 11)  # another JDK build
    assert _archive() != first


def test_another_pyspark_gets_an_archive_of_its_own(
    jdk: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    jars = tmp_path / "jars"
    jars.mkdir()
    (jars / "spark-core.jar").write_bytes(b"1")
    monkeypatch.setattr(class_archive, "_pyspark_jars", lambda: jars)
    before = _archive()
    (jars / "spark-sql.jar").write_bytes(b"2")
    assert _archive() != before


def test_another_checkouts_pyspark_gets_an_archive_of_its_own(
    jdk: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same jars in another venv: another class path, which the JVM checks when it maps
    an archive (it would run without this one)."""
    archives = []
    for checkout in ("a", "b"):
        jars = tmp_path / checkout / "jars"
        jars.mkdir(parents=True)
        (jars / "spark-core.jar").write_bytes(b"1")
        monkeypatch.setattr(class_archive, "_pyspark_jars", lambda jars=jars: jars)
        archives.append(_archive())
    assert archives[0] != archives[1]


def test_a_reinstalled_jar_gets_an_archive_of_its_own(
    jdk: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same jar written again (a new venv at the same path): the JVM checks each jar's
    time too, and would run without the archive of the one before."""
    jars = tmp_path / "jars"
    jars.mkdir()
    (jars / "spark-core.jar").write_bytes(b"1")
    monkeypatch.setattr(class_archive, "_pyspark_jars", lambda: jars)
    before = _archive()
    os.utime(jars / "spark-core.jar", ns=(1, 1))
    assert _archive() != before


def test_off_without_java_or_when_turned_off(
    jdk: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert local_class_archive() is not None
    monkeypatch.setenv(class_archive.ENV_SWITCH, "0")
    assert local_class_archive() is None
    monkeypatch.delenv(class_archive.ENV_SWITCH)
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "no-jdk"))
    assert local_class_archive() is None
    assert launch_options(None) == ("", None)


def test_a_jvm_writes_one_when_there_is_none_and_maps_it_once_published(jdk: Path) -> None:
    archive = _archive()
    assert archive.read_options() == ""  # nothing to map yet
    options, written = launch_options(archive)
    assert written is not None and written.parent == archive.path.parent
    assert options == f"-XX:ArchiveClassesAtExit={written}"
    assert written != archive.path  # a file of its own, never the archive itself
    _, other = launch_options(archive)
    assert other != written  # two writers at once never share a file

    written.write_bytes(b"archive")  # the JVM exits cleanly, having written it
    assert archive.publish(written, 0)
    assert archive.path.read_bytes() == b"archive" and not written.exists()
    assert launch_options(archive) == (f"-XX:SharedArchiveFile={archive.path}", None)
    assert with_options("-XX:+UseSerialGC", archive.read_options(), "") == (
        f"-XX:+UseSerialGC -XX:SharedArchiveFile={archive.path}"
    )


@pytest.mark.parametrize(
    ("exit_code", "content"),
    [(1, b"archive"), (-9, b"half an arch"), (0, b""), (0, None)],
    ids=["failed", "killed", "empty", "none-written"],
)
def test_only_a_clean_exit_with_a_whole_file_publishes(
    jdk: Path, exit_code: int, content: bytes | None
) -> None:
    archive = _archive()
    _, written = launch_options(archive)
    assert written is not None
    if content is not None:
        written.write_bytes(content)
    assert not archive.publish(written, exit_code)
    assert not archive.path.exists() and not written.exists()


def test_the_newest_archives_are_kept(jdk: Path) -> None:
    archive = _archive()
    folder = archive.path.parent
    folder.mkdir(parents=True)
    old = [folder / f"{class_archive.PREFIX}{n:016x}.jsa" for n in range(KEPT + 2)]
    for age, path in enumerate(old):
        path.write_bytes(b"old")
        os.utime(path, (1_000_000 + age, 1_000_000 + age))
    _, written = launch_options(archive)
    assert written is not None
    written.write_bytes(b"new")
    assert archive.publish(written, 0)
    kept = sorted(folder.glob("*.jsa"))
    assert archive.path in kept and len(kept) == KEPT
    assert old[-1] in kept  # the newest of the others; the oldest went


def test_build_runs_nothing_when_the_archive_exists_or_when_off(
    jdk: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    archive = _archive()
    archive.path.parent.mkdir(parents=True)
    archive.path.write_bytes(b"made before")
    assert spark_classes.build() == archive.path  # no spark-submit: java here is no JVM
    assert archive.path.read_bytes() == b"made before"
    monkeypatch.setenv(class_archive.ENV_SWITCH, "0")
    assert spark_classes.build() is None
