"""Build the archive EMR Serverless runs the Spark jobs with: ``make spark-archive``.

A tar.gz whose root is an import path: ``spark.archives=<uri>#shardlog_deps`` unpacks it
in every container and ``PYTHONPATH=./shardlog_deps`` (shardlog/spark/jobs.py) makes it
importable by the driver and the executors. It holds:

- shardlog's own sources (the jobs import shardlog.format, shardlog.spark, ...), without
  the local runtime, the CLI and the demo;
- the third-party packages the jobs use on the executors (pyarrow, pandas and numpy for
  pyspark's Arrow path, boto3), as CPython 3.11 manylinux x86_64 wheels unpacked by
  ``pip install --target --platform --only-binary=:all:``: no build, no Docker, and the
  same wheels whatever machine builds it. EMR's own Spark (3.5.5) is used, never pip's.

Entries are sorted, with fixed times and owners, so the same inputs give the same bytes.
Python ``--no-third-party`` builds only the shardlog part (offline; used by the tests).
"""

from __future__ import annotations

import argparse
import gzip
import io
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
EXCLUDED = ("shardlog/local", "shardlog/cli", "shardlog/demo.py", "shardlog/__main__.py")
THIRD_PARTY = ("pyarrow>=15,<24", "pandas>=2,<3", "numpy>=1.23,<2", "boto3>=1.34,<2")
PLATFORM = "manylinux2014_x86_64"  # EMR Serverless application architecture X86_64
PYTHON_VERSION = "3.11"  # shardlog.spark.jobs.EMR_PYTHON
_FIXED_MTIME = 1_700_000_000


def shardlog_files(root: Path = REPO_ROOT) -> Iterator[tuple[str, Path]]:
    for path in sorted((root / "shardlog").rglob("*")):
        name = path.relative_to(root).as_posix()
        if not path.is_file() or path.suffix not in (".py", ".typed") or "__pycache__" in name:
            continue
        if any(name == e or name.startswith(f"{e}/") for e in EXCLUDED):
            continue
        yield name, path


def third_party_files(target: Path, requirements: Sequence[str]) -> Iterator[tuple[str, Path]]:
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
            "--platform",
            PLATFORM,
            "--python-version",
            PYTHON_VERSION,
            "--implementation",
            "cp",
            "--only-binary=:all:",
            *requirements,
        ],
        check=True,
    )
    for path in sorted(target.rglob("*")):
        name = path.relative_to(target).as_posix()
        if path.is_file() and "__pycache__" not in name and not name.startswith("bin/"):
            yield name, path


def _add(archive: tarfile.TarFile, name: str, path: Path) -> None:
    info = tarfile.TarInfo(name)
    data = path.read_bytes()
    info.size = len(data)
    info.mtime = _FIXED_MTIME
    info.mode = 0o755 if path.suffix == ".so" or ".so." in path.name else 0o644
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    archive.addfile(info, io.BytesIO(data))


def build(output: Path, *, third_party: bool = True, root: Path = REPO_ROOT) -> Path:
    output.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as scratch:
        entries = dict(shardlog_files(root))
        if third_party:
            for name, path in third_party_files(Path(scratch), THIRD_PARTY):
                entries.setdefault(name, path)  # shardlog's own files win
        partial = output.with_suffix(".partial")
        # gzip with mtime 0, so the bytes depend on the contents only.
        with (
            partial.open("wb") as raw,
            gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as zipped,
            tarfile.open(fileobj=zipped, mode="w", format=tarfile.PAX_FORMAT) as archive,
        ):
            for name in sorted(entries):
                _add(archive, name, entries[name])
        partial.replace(output)
    return output


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
