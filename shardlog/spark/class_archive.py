"""Class data sharing for the local Spark JVMs: one JDK dynamic CDS archive of Spark's classes.

Every local-mode Spark JVM (a local EMR Serverless run's ``spark-submit``, the in-process
session of the tests, the CLI and the benchmarks) loads, parses and verifies the same few
thousand classes of pyspark's jars before it runs anything: about half of a short job's JVM
CPU. A dynamic archive of those classes (JDK 13+), written once by a JVM as it exits
(``-XX:ArchiveClassesAtExit``) and mapped by every later one (``-XX:SharedArchiveFile``),
halves that: a trivial ``spark-submit`` took 14.1 s of CPU without it and 7.2 s with it.

The protocol (the archive is a cache: never needed for a result, never trusted blindly):

- **Keyed by what made it.** Its name is a hash of the ``java`` the JVMs run (its real path,
  the JDK's ``lib/modules`` size and time), the jars of the Spark home the JVMs run from
  (their directory, names, sizes and modification times): another JDK or pyspark gets an
  archive of its own. The JVM maps an archive only on the class path that wrote it, each jar
  at the same path with the same size and time: keyed by names and sizes alone, a new venv
  (a clean clone's, whose install writes the jars anew) found the archive of the one before
  and ran every JVM without it (a trivial ``spark-submit``: three times the JVM's CPU; a
  clean clone's ``make test``: 1,595 s of CPU against 1,358). The JVMs run from one copy of
  pyspark's Spark home in the user's cache (``shardlog.spark.spark_home``), so checkouts and
  venvs of the same pyspark share one archive. The JVM checks it again when it maps it
  (the class path, the JDK's build) and runs without it when it does not match
  (``-Xshare:auto``, the default): a stale archive costs time, never a result.
- **Written whole or not at all.** Only a launcher that waits for its JVM writes one
  (``spark-submit`` in ``shardlog.local.emr_serverless``): the JVM writes to a file of its
  own (``<archive>.<pid>-<n>.tmp``), published by rename only after the JVM exited 0. A crash,
  a kill or two JVMs writing at once leave no torn archive; the last rename wins, and every
  candidate is a whole archive of the same inputs. In-process sessions only ever read it:
  their JVM is stopped by pyspark, not by a clean exit of its own.
- **Written by a known workload.** A dynamic archive holds the classes its writer loaded, so
  ``python -m shardlog.local.spark_classes`` (``make spark-classes``, before the tests and the
  demo) writes it from a spark-submit of a small ``workload``: a session, Arrow batches
  through ``mapInArrow``, ``from_json`` to a struct, an aggregation with a shuffle, what the
  jobs do. Where it was not made beforehand, the first local EMR Serverless run writes it.
- **Where it lives**: the user's cache (``$XDG_CACHE_HOME/shardlog/spark-classes``, else
  ``~/.cache/shardlog/spark-classes``; about 120 MB), so every checkout and run of the machine
  shares it; the newest ``KEPT`` are kept. ``SHARDLOG_SPARK_CLASS_ARCHIVE=0`` turns it off.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from shardlog.spark.archive import user_cache
from shardlog.spark.spark_home import local_spark_home

ENV_SWITCH = "SHARDLOG_SPARK_CLASS_ARCHIVE"
PREFIX = "spark-classes-"
KEPT = 2
_written = itertools.count()


@dataclass(frozen=True)
class ClassArchive:
    """The archive of one JDK and one pyspark (``path``: maybe not written yet)."""

    path: Path

    def read_options(self) -> str:
        """The JVM options that map the archive, or none while there is none."""
        return f"-XX:SharedArchiveFile={self.path}" if self.path.is_file() else ""

    def write_target(self) -> Path | None:
        """A file of this process's for a JVM to write the archive to at its exit
        (``-XX:ArchiveClassesAtExit``), or None when the archive exists."""
        if self.path.is_file():
            return None
        self.path.parent.mkdir(parents=True, exist_ok=True)
        return self.path.with_name(f"{self.path.name}.{os.getpid()}-{next(_written)}.tmp")

    def publish(self, written: Path, exit_code: int) -> bool:
        """After the JVM that wrote ``written`` exited: the archive, if it exited cleanly and
        wrote one; else the partial file is dropped. True when published."""
        if exit_code != 0 or not written.is_file() or written.stat().st_size == 0:
            written.unlink(missing_ok=True)
            return False
        written.replace(self.path)
        self._prune()
        return True

    def _prune(self) -> None:
        """Keep the newest KEPT archives (those of JDKs or pysparks since replaced go)."""
        archives = sorted(
            self.path.parent.glob(f"{PREFIX}*.jsa"), key=lambda p: p.stat().st_mtime, reverse=True
        )
        for old in archives[KEPT:]:
            if old != self.path:
                old.unlink(missing_ok=True)


def launch_options(archive: ClassArchive | None) -> tuple[str, Path | None]:
    """The JVM options of a JVM whose launcher waits for its exit: map the archive, or
    write one (then the file to ``publish`` after the exit)."""
    if archive is None:
        return "", None
    written = archive.write_target()
    if written is None:
        return archive.read_options(), None
    return f"-XX:ArchiveClassesAtExit={written}", written


def with_options(java_options: str, *more: str) -> str:
    """``java_options`` and the non-empty ``more``, space-separated."""
    return " ".join(option for option in (java_options, *more) if option)


def local_class_archive() -> ClassArchive | None:
    """The archive of the JDK and pyspark this process would launch, or None: turned off,
    or no ``java`` or no pyspark to key it by."""
    if os.environ.get(ENV_SWITCH) == "0":
        return None
    java = _java()
    jars = _pyspark_jars()
    if java is None or jars is None:
        return None
    modules = java.parent.parent / "lib" / "modules"
    digest = hashlib.sha256(str(java).encode())
    if modules.is_file():
        stat = modules.stat()
        digest.update(f"{stat.st_size}:{stat.st_mtime_ns}".encode())
    digest.update(str(jars.resolve()).encode())
    for jar in sorted(jars.glob("*.jar")):
        stat = jar.stat()
        digest.update(f"{jar.name}:{stat.st_size}:{stat.st_mtime_ns}".encode())
    return ClassArchive(user_cache() / "spark-classes" / f"{PREFIX}{digest.hexdigest()[:16]}.jsa")


def _java() -> Path | None:
    """The ``java`` spark-submit runs: ``$JAVA_HOME/bin/java``, else the one on PATH."""
    home = os.environ.get("JAVA_HOME")
    found = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    return Path(found).resolve() if found and Path(found).exists() else None


def _pyspark_jars() -> Path | None:
    """The jars of the Spark home the local JVMs run from (``shardlog.spark.spark_home``)."""
    home = local_spark_home()
    jars = home / "jars" if home is not None else None
    return jars if jars is not None and jars.is_dir() else None
