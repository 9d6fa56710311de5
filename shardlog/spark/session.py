"""Where SparkSessions are built: the jobs' own, and the one local-mode configuration.

On EMR Serverless the service configures the jobs' session; ``build_session`` adds only
what the jobs' results depend on (UTC). Local mode (the test suite's shared session, the
embedded AWS's job runs through ``spark-submit``, the compaction benchmark) is configured
here once, so the three run Spark alike: ``LOCAL_MASTER``, ``local_conf()`` and
``local_environment()``. pyspark is imported only where a session is built, so the embedded
AWS reads this configuration without starting a JVM.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import SparkSession

# Two cores on the machines this runs on (a laptop, CI): one task and one shuffle
# partition per core.
LOCAL_CORES = 2
LOCAL_MASTER = f"local[{LOCAL_CORES}]"
LOOPBACK = "127.0.0.1"


def build_session(app_name: str) -> SparkSession:
    """On EMR Serverless the service configures the session; locally, spark-submit does
    (``local_conf``). Dates and hours of the jobs are UTC whatever the machine's zone."""
    from pyspark.sql import SparkSession

    return (
        SparkSession.builder.appName(app_name)
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )


def local_conf() -> dict[str, str]:
    """The Spark configuration of every local-mode run."""
    return {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": str(LOCAL_CORES),
        "spark.default.parallelism": str(LOCAL_CORES),
        "spark.sql.session.timeZone": "UTC",
        # The driver and its block manager stay on loopback.
        "spark.driver.bindAddress": LOOPBACK,
        "spark.driver.host": LOOPBACK,
        # Short jobs on a small machine: the C1 JIT alone starts faster and is enough here.
        "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
    }


def local_environment(python: str) -> dict[str, str]:
    """The environment of a local run whose driver and executors run ``python``."""
    return {
        "PYSPARK_PYTHON": python,
        "PYSPARK_DRIVER_PYTHON": python,
        "PYARROW_IGNORE_TIMEZONE": "1",
        "SPARK_LOCAL_IP": LOOPBACK,
    }


def local_session(app_name: str, overrides: Mapping[str, str] | None = None) -> SparkSession:
    """A local-mode session in this process (``local_conf``, with ``overrides``), logging
    errors only. Set ``local_environment`` in ``os.environ`` first: the JVM reads it when it
    starts."""
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master(LOCAL_MASTER).appName(app_name)
    for key, value in {**local_conf(), **(overrides or {})}.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session
