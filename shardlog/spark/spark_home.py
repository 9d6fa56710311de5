"""The local Spark JVMs' Spark home: one copy per pyspark, at a path every checkout shares.

A JVM maps the class archive (``shardlog.spark.class_archive``) only on the class path that
wrote it, each jar at the same path with the same size and time. pyspark's jars live in each
venv, and a clean clone's install writes them anew: its JVMs could never map the archive
another checkout wrote, so every clean clone wrote its own (`make spark-classes`: about 45 s
of CPU, on the set-up's critical path).

So the part of pyspark's Spark home that its launcher and JVMs read (``bin``, ``jars``,
``python/lib``) is copied once into the user's cache, keyed by what pyspark installed there:
those files' RECORD lines (each one's sha256 and size) and the jars' names and sizes. Every
local Spark JVM (a local EMR Serverless run's ``spark-submit``, the in-process session of the
tests, the CLI and the benchmarks) runs from there (``SPARK_HOME``), and the class archive is
keyed by that copy's jars: written once a machine, not once a checkout.

- **The same pyspark, byte for byte**: another pyspark (or the same version with another
  file) has other RECORD lines, hence a home of its own. A pyspark whose RECORD cannot be
  read runs from its own directory, as before.
- **Whole or not at all**: copied into a directory of this process's, published by one
  rename; two processes copying at once leave one whole home (the other copy is dropped),
  and the copy of a process killed while copying is dropped by the next copy.
- **The ``KEPT`` most recently used are kept** (about 330 MB each);
  ``SHARDLOG_SPARK_HOME=0`` turns the copy off (the JVMs run from pyspark's own directory).
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
from pathlib import Path

from shardlog.spark.archive import user_cache

ENV_SWITCH = "SHARDLOG_SPARK_HOME"
PARTS = ("bin", "jars", "python/lib")  # what spark-submit, its launcher and the JVM read
KEPT = 2


def pyspark_home() -> Path | None:
    """The installed pyspark's own directory (its Spark home), or None without pyspark."""
    spec = importlib.util.find_spec("pyspark")
    return None if spec is None or spec.origin is None else Path(spec.origin).parent


def local_spark_home() -> Path | None:
    """The Spark home the local JVMs run from: the shared copy (made on first use), or
    pyspark's own directory where there is no key or the copy is off; None without pyspark."""
    home = pyspark_home()
    if home is None:
        return None
    if os.environ.get(ENV_SWITCH) == "0":
        return home
    key = _key(home)
    if key is None:
        return home
    shared = user_cache() / "spark-home" / key
    if shared.is_dir():
        os.utime(shared)  # in use: the newest, the last to be pruned
    else:
        _copy(home, shared)
    return shared


def _key(home: Path) -> str | None:
    """A digest of what pyspark installed of ``PARTS`` (their RECORD lines: each file's path,
    sha256 and size), or None when its RECORD cannot be read. Only those lines: the installer
    writes the rest (scripts in the venv's bin name the venv's Python)."""
    record = _record(home)
    if record is None:
        return None
    prefixes = tuple(f"{home.name}/{part}/" for part in PARTS)
    digest = hashlib.sha256()
    for line in sorted(record.splitlines()):
        if line.startswith(prefixes):
            digest.update(line.encode() + b"\n")
    for jar in sorted((home / "jars").glob("*.jar")):
        digest.update(f"{jar.name}:{jar.stat().st_size}".encode())
    return digest.hexdigest()[:16]


def _record(home: Path) -> str | None:
    for dist_info in sorted(home.parent.glob("pyspark-*.dist-info")):
        record = dist_info / "RECORD"
        if record.is_file():
            return record.read_text()
    return None


def _copy(home: Path, shared: Path) -> None:
    """``PARTS`` of ``home`` into ``shared``, published whole by one rename (times kept)."""
    shared.parent.mkdir(parents=True, exist_ok=True)
    partial = shared.with_name(f"{shared.name}.{os.getpid()}.partial")
    shutil.rmtree(partial, ignore_errors=True)
    try:
        for part in PARTS:
            shutil.copytree(home / part, partial / part, symlinks=True)
        try:
            partial.rename(shared)
        except OSError:  # another process published the same home first
            if not shared.is_dir():
                raise
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    _prune(shared)


def _prune(kept: Path) -> None:
    """Keep the ``KEPT`` most recently used homes (those of pysparks since replaced go), and
    drop the partial copies of processes that died copying (killed: no ``finally`` ran)."""
    homes = []
    for path in kept.parent.iterdir():
        if path.suffix != ".partial":
            homes.append(path)
        elif not _alive(int(path.stem.rsplit(".", 1)[-1])):
            shutil.rmtree(path, ignore_errors=True)
    homes.sort(key=lambda p: p.stat().st_mtime, reverse=True)
    for old in homes[KEPT:]:
        if old != kept:
            shutil.rmtree(old, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True
