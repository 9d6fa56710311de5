"""One local SparkSession for every Spark test (startup costs seconds; reuse it)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from typing import Any

import pytest

try:
    import pyspark  # noqa: F401
except ImportError:  # make test installs it: a missing extra must fail, not skip silently
    pytest.fail("pyspark is not installed: run `make install` (the spark extra)", pytrace=False)

# Executors are Python workers: the same interpreter (and packages) as the tests.
os.environ["PYSPARK_PYTHON"] = sys.executable
os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
os.environ.setdefault("PYARROW_IGNORE_TIMEZONE", "1")
os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"  # loopback only


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[2]")
        .appName("shardlog-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture(autouse=True)
def lake_table(monkeypatch: pytest.MonkeyPatch) -> str:
    """A lake table of its own per test: moto's Glue catalog is one for the whole session,
    and each test's bucket is new (the table's location would be another deployment's)."""
    import uuid

    from shardlog import constants as C

    table = f"shardlog_{uuid.uuid4().hex[:10]}.events"
    monkeypatch.setenv(C.ENV_LAKE_TABLE, table)
    return table
