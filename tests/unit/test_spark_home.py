"""The local Spark JVMs' Spark home (shardlog/spark/spark_home.py): one copy per pyspark in the
user's cache, shared by every checkout, so the class archive keyed by its jars is too."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from shardlog.spark import class_archive, spark_home
from shardlog.spark.session import local_environment
from shardlog.spark.spark_home import KEPT, PARTS, local_spark_home


def _record(jar_hash: str = "abc", script_hash: str = "def") -> bytes:
    """pyspark's RECORD: its files with their sha256 and size, and a script of the venv's bin
    (which the installer rewrites to name the venv's Python)."""
    return (
        f"pyspark/jars/spark-core.jar,sha256={jar_hash},3\n"
        f"pyspark/sql/functions.py,sha256=ghi,0\n"
        f"../../../bin/find_spark_home.py,sha256={script_hash},4086\n"
    ).encode()


def _pyspark(root: Path, record: bytes = _record()) -> Path:
    """An installed pyspark of files: its Spark home's parts and the RECORD its wheel left."""
    home = root / "site-packages" / "pyspark"
    for part in (*PARTS, "sql"):
        (home / part).mkdir(parents=True)
    (home / "bin" / "spark-submit").write_text("#!/bin/sh\n")
    (home / "bin" / "spark-submit").chmod(0o755)
    (home / "jars" / "spark-core.jar").write_bytes(b"jar")
    (home / "python" / "lib" / "pyspark.zip").write_bytes(b"zip")
    (home / "sql" / "functions.py").write_text("")  # the Python package: not copied
    dist_info = home.parent / "pyspark-3.5.0.dist-info"
    dist_info.mkdir()
    (dist_info / "RECORD").write_bytes(record)
    os.utime(home / "jars" / "spark-core.jar", ns=(1_000_000_000, 1_000_000_000))
    return home


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv(spark_home.ENV_SWITCH, raising=False)
    return tmp_path / "cache" / "shardlog" / "spark-home"


def _installed(monkeypatch: pytest.MonkeyPatch, home: Path) -> None:
    monkeypatch.setattr(spark_home, "pyspark_home", lambda: home)


def test_two_checkouts_of_one_pyspark_share_one_home_and_one_class_archive(
    cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A clean clone's venv writes pyspark's jars anew (another path, another time): its JVMs
    still run from the same copy, so the class archive one checkout wrote is the next one's."""
    monkeypatch.delenv(class_archive.ENV_SWITCH, raising=False)
    homes, archives = [], []
    for checkout in ("a", "b"):  # each venv's scripts name its own Python
        _installed(monkeypatch, _pyspark(tmp_path / checkout, _record(script_hash=checkout)))
        os.utime(tmp_path / checkout / "site-packages" / "pyspark" / "jars" / "spark-core.jar")
        homes.append(local_spark_home())
        archives.append(class_archive.local_class_archive())
    assert homes[0] == homes[1] and homes[0] is not None and homes[0].parent == cache
    assert archives[0] == archives[1]


def test_the_copy_is_the_spark_home_the_launcher_reads_with_its_times(
    cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    installed = _pyspark(tmp_path)
    _installed(monkeypatch, installed)
    home = local_spark_home()
    assert home is not None and home != installed
    assert (home / "bin" / "spark-submit").read_text() == "#!/bin/sh\n"
    assert os.access(home / "bin" / "spark-submit", os.X_OK)  # the launcher runs it
    assert (home / "jars" / "spark-core.jar").read_bytes() == b"jar"
    assert (home / "jars" / "spark-core.jar").stat().st_mtime_ns == 1_000_000_000
    assert (home / "python" / "lib" / "pyspark.zip").read_bytes() == b"zip"
    assert not (home / "sql").exists()  # pyspark's Python package stays in the venv
    assert local_environment("/usr/bin/python3")["SPARK_HOME"] == str(home)


def test_copied_once_then_reused(
    cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _installed(monkeypatch, _pyspark(tmp_path))
    first = local_spark_home()

    def no_copy(*_: Any, **__: Any) -> None:
        raise AssertionError("copied again")

    monkeypatch.setattr(shutil, "copytree", no_copy)
    assert local_spark_home() == first


def test_another_pyspark_gets_a_home_of_its_own(
    cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _installed(monkeypatch, _pyspark(tmp_path / "a"))
    first = local_spark_home()
    _installed(monkeypatch, _pyspark(tmp_path / "b", record=_record(jar_hash="xyz")))
    assert local_spark_home() != first
    _installed(monkeypatch, _pyspark(tmp_path / "c"))
    (tmp_path / "c" / "site-packages" / "pyspark" / "jars" / "extra.jar").write_bytes(b"x")
    assert local_spark_home() != first  # a jar the RECORD does not list


def test_without_a_record_or_turned_off_the_jvms_run_from_pyspark_itself(
    cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    installed = _pyspark(tmp_path)
    _installed(monkeypatch, installed)
    monkeypatch.setenv(spark_home.ENV_SWITCH, "0")
    assert local_spark_home() == installed
    monkeypatch.delenv(spark_home.ENV_SWITCH)
    (installed.parent / "pyspark-3.5.0.dist-info" / "RECORD").unlink()
    assert local_spark_home() == installed
    assert not cache.exists()
    monkeypatch.setattr(spark_home, "pyspark_home", lambda: None)
    assert local_spark_home() is None
    assert "SPARK_HOME" not in local_environment("/usr/bin/python3")


def test_a_crash_mid_copy_publishes_nothing(
    cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _installed(monkeypatch, _pyspark(tmp_path))
    real = shutil.copytree

    def crash_on_jars(src: Path, dst: Path, **kwargs: Any) -> Any:
        if Path(src).name == "jars":
            raise OSError("disk full")
        return real(src, dst, **kwargs)

    monkeypatch.setattr(shutil, "copytree", crash_on_jars)
    with pytest.raises(OSError, match="disk full"):
        local_spark_home()
    assert list(cache.iterdir()) == []  # neither a home nor a partial copy
    monkeypatch.setattr(shutil, "copytree", real)
    home = local_spark_home()
    assert home is not None and (home / "jars" / "spark-core.jar").is_file()


def test_the_copy_of_a_process_killed_while_copying_goes_with_the_next_copy(
    cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A kill runs no ``finally``: its partial copy stays until the next copy drops it; one
    of a process still copying stays."""
    cache.mkdir(parents=True)
    (cache / "0123456789abcdef.999999999.partial" / "jars").mkdir(parents=True)  # no such pid
    copying = cache / f"0123456789abcdef.{os.getpid()}.partial"
    copying.mkdir()
    _installed(monkeypatch, _pyspark(tmp_path))
    home = local_spark_home()
    assert home is not None
    assert sorted(cache.iterdir()) == sorted([home, copying])


def test_a_home_published_by_another_process_meanwhile_is_used(
    cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    installed = _pyspark(tmp_path)
    _installed(monkeypatch, installed)
    real = shutil.copytree
    theirs: list[Path] = []

    def race(src: Path, dst: Path, **kwargs: Any) -> Any:
        done = real(src, dst, **kwargs)
        if Path(src).name == "lib" and not theirs:  # the last part: the other one publishes
            shared = cache / Path(dst).parents[1].name.split(".", 1)[0]  # <key>.<pid>.partial
            for part in PARTS:
                real(installed / part, shared / part, **kwargs)
            (shared / "theirs").write_text("")
            theirs.append(shared)
        return done

    monkeypatch.setattr(shutil, "copytree", race)
    home = local_spark_home()
    assert theirs == [home] and (home / "theirs").exists()  # theirs, whole; ours dropped
    assert sorted(p.name for p in cache.iterdir()) == [home.name]


def test_the_most_recently_used_homes_are_kept(
    cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    homes = []
    for n in range(KEPT):
        _installed(monkeypatch, _pyspark(tmp_path / str(n), record=_record(jar_hash=str(n))))
        home = local_spark_home()
        assert home is not None
        os.utime(home, (n, n))  # in the order they were made
        homes.append(home)
    _installed(monkeypatch, _pyspark(tmp_path / "first-again", record=_record(jar_hash="0")))
    assert local_spark_home() == homes[0]  # used again: now the most recent
    _installed(monkeypatch, _pyspark(tmp_path / "new", record=_record(jar_hash="new")))
    newest = local_spark_home()
    assert newest is not None and newest not in homes
    assert sorted(cache.iterdir()) == sorted([newest, homes[0]])  # the least recent went
