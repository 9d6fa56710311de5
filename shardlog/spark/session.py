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
JAVA_OPTIONS = "spark.driver.extraJavaOptions"  # local mode: the driver JVM runs every task


# What the jobs' results depend on, wherever they run:
# - dates and hours are UTC whatever the machine's zone;
# - a date or timestamp is read by one calendar (Spark 3's): text that is no date, such as
#   2023-02-29, is no date, and a typed table refuses it to its dead-letter table. Spark's
#   default policy (EXCEPTION) instead fails the whole job on such text when Spark 2's lenient
#   parser would have read it (as 2023-03-01): one payload would stop its partition's typed
#   compaction for good;
# - what a record costs: a typed table's payload is parsed once per object level only
#   because Spark computes an expression two columns of one projection share once
#   (subexpression elimination: Spark's default, set here so no session turns it off;
#   without it the typed job's parse took 2.1x the JVM's CPU: shardlog/spark/payloads.py).
JOB_CONF = {
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.legacy.timeParserPolicy": "CORRECTED",
    "spark.sql.subexpressionElimination.enabled": "true",
}


def build_session(app_name: str) -> SparkSession:
    """On EMR Serverless the service configures the session; locally, spark-submit does
    (``local_conf``). Either way the session has ``JOB_CONF``."""
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app_name)
    for key, value in JOB_CONF.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


def local_conf() -> dict[str, str]:
    """The Spark configuration of every local-mode run."""
    return {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": str(LOCAL_CORES),
        "spark.default.parallelism": str(LOCAL_CORES),
        **JOB_CONF,
        # The driver and its block manager stay on loopback.
        "spark.driver.bindAddress": LOOPBACK,
        "spark.driver.host": LOOPBACK,
        # Short jobs on a small machine: the C1 JIT alone starts faster and is enough here.
        JAVA_OPTIONS: "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
        # Python workers that read the archives on their path once, not before every task.
        "spark.python.daemon.module": "shardlog.spark.worker_daemon",
    }


def local_environment(python: str) -> dict[str, str]:
    """The environment of a local run whose driver and executors run ``python``, from the
    local Spark home (``shardlog.spark.spark_home``, where the class archive maps)."""
    from shardlog.spark.spark_home import local_spark_home

    home = local_spark_home()
    return {
        **({"SPARK_HOME": str(home)} if home is not None else {}),
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

    from shardlog.spark.class_archive import local_class_archive, with_options

    conf = {**local_conf(), **(overrides or {})}
    archive = local_class_archive()
    if archive is not None:  # read only: pyspark stops this JVM, it never exits cleanly
        conf[JAVA_OPTIONS] = with_options(conf.get(JAVA_OPTIONS, ""), archive.read_options())
    builder = SparkSession.builder.master(LOCAL_MASTER).appName(app_name)
    for key, value in conf.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session
