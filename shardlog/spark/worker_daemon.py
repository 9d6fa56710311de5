"""pyspark's daemon for the local runs (``spark.python.daemon.module``): its Python workers
read each archive on their path once, not once per task.

Before every task a pyspark worker calls ``importlib.invalidate_caches()``, and Python's
``zipimporter.invalidate_caches`` reads its archive's whole directory again, once per
importer: a worker's path holds pyspark.zip, py4j's zip and Spark's core jar (thousands
of entries), and an importer for each package imported from them, so every task began
with about 0.1 s of CPU reading directories that had not changed (about a tenth of the
typed compaction's Python CPU). Here an importer reads its archive again only when the
archive's size or modification time differ from those it was last read at; anything else
is Python's own ``invalidate_caches``. The daemon reads every archive once before it forks
its workers, so they start with the directories read.

The rest is pyspark's daemon, unchanged (``pyspark.daemon.manager``).
"""

from __future__ import annotations

import importlib
import os
import zipimport
from collections.abc import Callable
from typing import Any

# Archive path -> the (size, mtime) its directory was last read at, in this process.
_READ_AT: dict[str, tuple[int, int]] = {}
_REREAD: Callable[[Any], None] = zipimport.zipimporter.invalidate_caches
_DIRECTORIES: dict[str, Any] = zipimport._zip_directory_cache  # type: ignore[attr-defined]


def _stamp(archive: str) -> tuple[int, int] | None:
    try:
        stat = os.stat(archive)
    except OSError:
        return None
    return stat.st_size, stat.st_mtime_ns


def invalidate_caches(importer: Any) -> None:
    """Python's ``zipimporter.invalidate_caches``, skipped while the archive is the one
    whose directory this process read last."""
    archive = importer.archive
    stamp = _stamp(archive)
    if stamp is not None and _READ_AT.get(archive) == stamp and archive in _DIRECTORIES:
        importer._files = _DIRECTORIES[archive]
        return
    _REREAD(importer)
    if stamp is not None:
        _READ_AT[archive] = stamp


def install() -> None:
    """Every zip importer of this process (and of the workers it forks) rereads only a
    changed archive; each archive on the path read now, once."""
    zipimport.zipimporter.invalidate_caches = invalidate_caches  # type: ignore[method-assign,assignment]
    importlib.invalidate_caches()


if __name__ == "__main__":  # pragma: no cover - Spark starts it: python -m <this module>
    install()
    from pyspark.daemon import manager

    manager()
