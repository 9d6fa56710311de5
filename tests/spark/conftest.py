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

from shardlog.spark.session import local_environment, local_session

# Executors are Python workers: the same interpreter (and packages) as the tests.
os.environ.update(local_environment(sys.executable))


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    session = local_session("shardlog-tests")
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


@pytest.fixture
def glue_answers_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """pyiceberg's Glue client resends a refused connection 10 times, with botocore's
    backoff (up to 20 s a wait): for a catalog a test makes unreachable on purpose, only the
    error that follows matters, so it comes after one attempt."""
    from pyiceberg.catalog import glue

    monkeypatch.setattr(glue, "MAX_RETRIES", 0)


@pytest.fixture
def runs_without_spark() -> Iterator[None]:
    """The test's job runs run their script on this Python, no JVM (for the tests of what
    starts and watches runs, whose scripts block until released and do no Spark work)."""
    from shardlog.local import emr_serverless

    emr_serverless.run_without_spark(True)
    yield
    emr_serverless.run_without_spark(False)
