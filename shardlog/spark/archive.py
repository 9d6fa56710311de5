"""Build the archive EMR Serverless runs the Spark jobs with: ``make spark-archive``.

A tar.gz whose root is an import path: ``spark.archives=<uri>#shardlog_deps`` unpacks it
in every container and ``PYTHONPATH=./shardlog_deps`` (shardlog/spark/jobs.py) makes it
importable by the driver and the executors. It holds:

- shardlog's own sources (the jobs import shardlog.format, shardlog.spark, ...), without
  the local runtime, the CLI and the demo;
- the third-party packages the jobs import on the driver and the executors (pyarrow,
  pandas and numpy for pyspark's Arrow path, boto3, pydantic, and pyiceberg with what it
  needs for the Glue catalog), pinned, as CPython 3.11 wheels for EMR Serverless's
  platform (Amazon Linux 2023 on x86_64: glibc 2.34, so ``manylinux_2_34_x86_64`` and
  every older manylinux tag) unpacked by ``pip install --target --platform
  --only-binary=:all:``: no build, no Docker, the same wheels whatever machine builds it.
  EMR's own Spark (3.5.5) is used, never pip's.

Both halves are cached outside the clone, in the user's cache (``$XDG_CACHE_HOME/shardlog``,
else ``~/.cache/shardlog``), so a fresh clone on a machine that built them before pays
neither pip nor gzip again: the unpacked wheels under ``spark-wheels/<key>``, the key a hash
of the pins and the platform, and the last few archives under ``spark-archives/<digest>``,
the digest a hash of that key and shardlog's files (what the archive holds). An archive
whose inputs are those it was built from is not rebuilt; one the cache holds is copied.
Entries are sorted, with fixed times and owners, so the same inputs give the same bytes.
``--no-third-party`` builds only the shardlog part (offline; used by the tests).
tests/spark/test_archive_as_shipped.py runs every job from the archive alone.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import os
import re
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
EXCLUDED = ("shardlog/local", "shardlog/cli", "shardlog/__main__.py")
# Pinned (the versions the tests run with); numpy < 2 and pandas < 3 for pyspark 3.5's Arrow
# path. pyiceberg's own dependencies follow from it at the versions pip resolves.
THIRD_PARTY = (
    "pyarrow==23.0.1",
    "pandas==2.3.3",
    "numpy==1.26.4",
    "boto3==1.44.8",
    "pydantic==2.14.4",
    "pyiceberg[glue,pyarrow]==0.12.0",
)
# EMR Serverless: the application's architecture X86_64, release emr-7.x = Amazon Linux 2023,
# glibc 2.34: every manylinux tag up to 2.34 runs there (pip takes the list as given).
PLATFORMS = (
    "manylinux_2_34_x86_64",
    "manylinux_2_28_x86_64",
    "manylinux_2_17_x86_64",
    "manylinux2014_x86_64",
)
GLIBC = (2, 34)
PYTHON_VERSION = "3.11"  # shardlog.spark.jobs.EMR_PYTHON


def user_cache() -> Path:
    """Where builds outlive a clone (the XDG base directory convention, as pip's cache)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "shardlog"


WHEEL_CACHE = user_cache() / "spark-wheels"
# Archives kept in the cache: one per recent state of shardlog's sources (about 100 MB each).
KEPT_ARCHIVES = 3
_FIXED_MTIME = 1_700_000_000


@dataclass(frozen=True)
class EmrPlatform:
    """What an EMR Serverless release runs a job on (EMR release guide)."""

    operating_system: str
    glibc: tuple[int, int]
    python: str  # the interpreter shardlog.spark.jobs.EMR_PYTHON names


def emr_platform(release_label: str, architecture: str) -> EmrPlatform:
    """The platform of emr-7.1.0 and later on X86_64 (Python 3.11 beside the default 3.9
    from 7.1 on); any other release or architecture is refused: the archive is not for it."""
    match = re.fullmatch(r"emr-(\d+)\.(\d+)\.\d+", release_label)
    if architecture != "X86_64" or match is None or (int(match[1]), int(match[2])) < (7, 1):
        raise ValueError(
            f"the Spark archive is built for emr-7.1+ on X86_64, not {release_label} on "
            f"{architecture}: change PLATFORMS and PYTHON_VERSION with the application"
        )
    return EmrPlatform("Amazon Linux 2023", GLIBC, PYTHON_VERSION)


def wheel_runs_on(tag: str, platform: EmrPlatform) -> bool:
    """Whether a wheel tag (``cp311-cp311-manylinux_2_17_x86_64``) runs on the platform."""
    python, abi, plat = tag.split("-")
    version = "cp" + platform.python.replace(".", "")
    python_ok = python in (version, "py3", "py2.py3") or (abi == "abi3" and python <= version)
    abi_ok = abi in (version, "abi3", "none")
    legacy = {"manylinux2014_x86_64": (2, 17), "manylinux2010_x86_64": (2, 12)}
    linux = re.fullmatch(r"manylinux_(\d+)_(\d+)_x86_64", plat)
    glibc = (int(linux[1]), int(linux[2])) if linux else legacy.get(plat)
    plat_ok = plat == "any" or (glibc is not None and glibc <= platform.glibc)
    return python_ok and abi_ok and plat_ok


def shardlog_files(root: Path = REPO_ROOT) -> Iterator[tuple[str, Path]]:
    for path in sorted((root / "shardlog").rglob("*")):
        name = path.relative_to(root).as_posix()
        if not path.is_file() or path.suffix not in (".py", ".typed") or "__pycache__" in name:
            continue
        if any(name == e or name.startswith(f"{e}/") for e in EXCLUDED):
            continue
        yield name, path


def requirements_key(requirements: Sequence[str] = THIRD_PARTY) -> str:
    """What the unpacked wheels depend on: the pins, the platform, the Python version."""
    text = "\n".join([*requirements, *PLATFORMS, PYTHON_VERSION])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def third_party_dir(requirements: Sequence[str] = THIRD_PARTY, cache: Path = WHEEL_CACHE) -> Path:
    """The wheels unpacked for EMR's platform, installed once per key (pip downloads)."""
    target = cache / requirements_key(requirements)
    if (target / ".complete").is_file():
        return target
    partial = target.with_suffix(".partial")
    shutil.rmtree(partial, ignore_errors=True)
    _pip_install(partial, requirements)
    (partial / ".complete").write_text("\n".join(requirements) + "\n")
    shutil.rmtree(target, ignore_errors=True)
    partial.replace(target)
    return target


def _pip_install(target: Path, requirements: Sequence[str]) -> None:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-compile",
            "--target",
            str(target),
            *(arg for platform in PLATFORMS for arg in ("--platform", platform)),
            "--python-version",
            PYTHON_VERSION,
            "--implementation",
            "cp",
            "--only-binary=:all:",
            *requirements,
        ],
        check=True,
    )


def third_party_files(target: Path) -> Iterator[tuple[str, Path]]:
    for path in sorted(target.rglob("*")):
        name = path.relative_to(target).as_posix()
        if name == ".complete" or not path.is_file() or "__pycache__" in name:
            continue
        if not name.startswith("bin/"):
            yield name, path


def inputs_digest(entries: dict[str, Path], key: str) -> str:
    digest = hashlib.sha256(key.encode())
    for name in sorted(entries):
        if name.startswith("shardlog/"):
            digest.update(name.encode())
            digest.update(entries[name].read_bytes())
    return digest.hexdigest()


def _add(archive: tarfile.TarFile, name: str, path: Path) -> None:
    info = tarfile.TarInfo(name)
    data = path.read_bytes()
    info.size = len(data)
    info.mtime = _FIXED_MTIME
    info.mode = 0o755 if path.suffix == ".so" or ".so." in path.name else 0o644
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    archive.addfile(info, io.BytesIO(data))


def build(
    output: Path, *, third_party: bool = True, root: Path = REPO_ROOT, cache: Path = WHEEL_CACHE
) -> Path:
    output.parent.mkdir(parents=True, exist_ok=True)
    entries = dict(shardlog_files(root))
    key = "shardlog-only"
    if third_party:
        key = requirements_key()
        for name, path in third_party_files(third_party_dir(THIRD_PARTY, cache)):
            entries.setdefault(name, path)  # shardlog's own files win
    # Beside the archive's folder, not in it: the stack ships that whole folder.
    stamp = output.parent.with_name(f"{output.parent.name}.{output.name}.inputs")
    digest = inputs_digest(entries, key)
    if output.is_file() and stamp.is_file() and stamp.read_text() == digest:
        return output  # built from these very inputs
    partial = output.with_suffix(".partial")
    # Only whole archives are kept: shardlog's part alone is built in a moment.
    cached = cache.parent / "spark-archives" / f"{digest}.tar.gz" if third_party else None
    if cached is not None and cached.is_file():
        shutil.copyfile(cached, partial)
    else:
        _write_archive(partial, entries)
        if cached is not None:
            _keep(partial, cached)
    partial.replace(output)
    stamp.write_text(digest)
    return output


def _write_archive(path: Path, entries: dict[str, Path]) -> None:
    # gzip with mtime 0, so the bytes depend on the contents only.
    with (
        path.open("wb") as raw,
        gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, compresslevel=6) as zipped,
        tarfile.open(fileobj=zipped, mode="w", format=tarfile.PAX_FORMAT) as archive,
    ):
        for name in sorted(entries):
            _add(archive, name, entries[name])


def _keep(built: Path, cached: Path) -> None:
    """A copy of the archive in the cache, under its digest (written whole, then renamed, so
    a concurrent build never reads half of one); only the newest ``KEPT_ARCHIVES`` stay."""
    cached.parent.mkdir(parents=True, exist_ok=True)
    incoming = cached.with_name(f"{cached.name}.{os.getpid()}.partial")
    shutil.copyfile(built, incoming)
    incoming.replace(cached)
    archives = sorted(cached.parent.glob("*.tar.gz"), key=lambda p: p.stat().st_mtime)
    for old in archives[:-KEPT_ARCHIVES]:
        old.unlink(missing_ok=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("output", type=Path)
    parser.add_argument(
        "--no-third-party", action="store_true", help="shardlog's sources only (offline)"
    )
    args = parser.parse_args(argv)
    path = build(args.output, third_party=not args.no_third_party)
    print(f"{path} ({path.stat().st_size:,} bytes)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
