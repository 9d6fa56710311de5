"""The local session's Python workers run under shardlog's daemon
(``shardlog.spark.worker_daemon``): their zip importers reread only a changed archive."""

from __future__ import annotations

from typing import Any


def test_the_local_sessions_workers_use_shardlogs_daemon(spark: Any) -> None:
    def where(_: object) -> str:
        import zipimport

        return zipimport.zipimporter.invalidate_caches.__code__.co_filename

    files = spark.sparkContext.parallelize([0, 1], 2).map(where).collect()
    assert [f.endswith("shardlog/spark/worker_daemon.py") for f in files] == [True, True]
