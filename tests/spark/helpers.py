"""Helpers of the Spark tests: tiny job scripts, bounded waits, log and lake read-back."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from shardlog import constants as C
from shardlog.clock import SystemClock
from shardlog.function_settings import SparkTriggerSettings
from shardlog.lake.catalog import open_table
from shardlog.lake.commit import LakeAppend
from shardlog.lake.files import DATA_DIR, s3_uri, write_data_files
from shardlog.lake.settings import LakeSettings
from shardlog.local.spark import provision_spark
from shardlog.reader import LogReader
from shardlog.segments import SegmentStore
from tests.support.aws import AwsEnv

OK_JOB = """\
import os, sys
from pyspark.sql import SparkSession

assert "PYSPARK_GATEWAY_PORT" in os.environ  # started by spark-submit's JVM, its gateway

spark = SparkSession.builder.getOrCreate()
assert spark.range(10).count() == 10
# Its JVM runs from the local Spark home (shardlog.spark.spark_home), every jar from there.
home = os.environ["SPARK_HOME"]
path = spark.sparkContext._jvm.java.lang.System.getProperty("java.class.path").split(":")
assert [p for p in path if p.endswith(".jar")], path
assert all(p.startswith(f"{home}/jars/") for p in path if p.endswith(".jar")), (home, path)
assert sys.argv[1:] == ["--answer", "42"], sys.argv
"""
FAILING_JOB = "raise SystemExit('this job fails on purpose')\n"
# Runs until the test drops a file named 'release' in its working directory (the run's).
BLOCKING_JOB = """\
import pathlib, time
deadline = time.monotonic() + 120
while not pathlib.Path("release").exists() and time.monotonic() < deadline:
    time.sleep(0.05)
"""

Row = tuple[str, int, str, bytes, str, int]


def provision_trigger(
    aws: AwsEnv, prefix: str, scripts_dir: Path | None, **settings: Any
) -> SparkTriggerSettings:
    """An EMR Serverless application of its own running ``scripts_dir`` (None: the real
    spark_jobs/), and the Spark trigger's settings for it and the test's resources."""
    suffix = uuid.uuid4().hex[:8]
    target = provision_spark(
        aws.clients,
        application_name=f"{prefix}-{suffix}",
        artifacts_bucket=f"artifacts-{suffix}",
        scripts_dir=scripts_dir,
    )
    return SparkTriggerSettings(
        application_id=target.application_id,
        execution_role_arn=target.execution_role_arn,
        spark_jobs_uri=target.scripts_uri,
        spark_deps_uri=f"s3://artifacts-{suffix}/spark_deps/spark_jobs_deps.tar.gz",
        bucket=aws.config.bucket,
        tables=aws.config.tables,
        # The test's own lake table (tests/spark/conftest.py): moto's catalog is the session's.
        lake_table=os.environ.get(C.ENV_LAKE_TABLE, C.DEFAULT_LAKE_TABLE),
        **settings,
    )


def wait_state(
    emr: Any, application_id: str, run_id: str, states: tuple[str, ...], timeout_s: float = 120
) -> dict[str, Any]:
    """Poll a job run (a real local process: bounded polling) until it is in ``states``."""
    clock = SystemClock()
    deadline = clock.now_ms() + int(timeout_s * 1000)
    while clock.now_ms() < deadline:
        run = emr.get_job_run(applicationId=application_id, jobRunId=run_id)["jobRun"]
        if run["state"] in states:
            return dict(run)
        clock.sleep(0.05)
    raise AssertionError(f"{run_id} never reached {states} in {timeout_s}s")


def log_rows(aws: AwsEnv) -> list[Row]:
    """Every committed record of the log, as comparable tuples."""
    reader = LogReader(aws.clients, aws.config.bucket, aws.config.tables)
    rows = []
    for partition in reader.tables.list_partitions():
        rows += [
            (
                r.partition_id,
                r.seq,
                r.partition_key,
                r.data,
                r.kinesis_sequence_number,
                r.arrival_ms,
            )
            for r in reader.records(partition.partition_id)
        ]
    return sorted(rows)


def unique_lake(aws: AwsEnv) -> LakeSettings:
    """A lake table of its own for one test (moto's Glue catalog is global to the process)."""
    config, table = aws.config, f"shardlog_{uuid.uuid4().hex[:10]}.events"
    return LakeSettings.for_deployment(config.bucket, config.region, config.endpoint_url, table)


def data_objects(aws: AwsEnv, lake: LakeSettings) -> dict[str, str]:
    """Key -> ETag of every object under the table's data directory, committed or not."""
    pages = aws.clients.s3.get_paginator("list_objects_v2").paginate(
        Bucket=lake.bucket, Prefix=f"{lake.key_prefix}{DATA_DIR}"
    )
    return {o["Key"]: o["ETag"] for page in pages for o in page.get("Contents", [])}


def lake_rows(lake: LakeSettings) -> list[Row]:
    """Every row of the table's current snapshot, duplicates kept."""
    return rows_of(open_table(lake).scan().to_arrow())


def rows_of(table: pa.Table) -> list[Row]:
    rows = []
    for r in table.to_pylist():
        arrival_ms = int(r["arrival_time"].timestamp() * 1000)
        rows.append(
            (
                r["partition_id"],
                r["seq"],
                r["partition_key"],
                r["data"],
                r["kinesis_sequence_number"],
                arrival_ms,
            )
        )
    return sorted(rows)


def typed_rows_once(
    aws: AwsEnv, typed_table: Any, rejected_table: Any
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[tuple[str, int], Any]]:
    """A declared table's rows and its dead-letter table's, checked to hold every committed
    record once between them (nothing twice, nothing lost); and the log by (partition, seq)."""
    from collections import Counter

    typed = typed_table.scan().to_arrow().to_pylist()
    rejected = rejected_table.scan().to_arrow().to_pylist()
    log = {(r[0], r[1]): r for r in log_rows(aws)}
    seen = Counter((r["partition_id"], r["seq"]) for r in typed + rejected)
    assert [k for k, n in seen.items() if n > 1] == []  # nothing twice
    assert sorted(seen) == sorted(log)  # nothing lost
    return typed, rejected, log


def batch_of(aws: AwsEnv, lake: LakeSettings, ranges: dict[str, tuple[int, int]]) -> LakeAppend:
    """A compaction run's batch: the records of ``ranges`` (segment-aligned) written as the
    data files of a new run."""
    store = SegmentStore(aws.clients, aws.config.bucket)
    segments = [s for p, (a, b) in ranges.items() for s in store.segments(p, a, b)]
    run_id = uuid.uuid4().hex[:16]
    files = write_data_files(aws.clients.s3, lake, segments, run_id)
    return LakeAppend(ranges, [s3_uri(lake.bucket, f.key) for f in files], run_id)


@contextmanager
def dying_between_the_typed_commits(
    monkeypatch: pytest.MonkeyPatch, typed_table: str = "orders"
) -> Iterator[None]:
    """A typed compaction run inside dies after its dead-letter commit, before its typed
    one (``SystemExit``: nothing in the code catches it, as a killed process)."""
    import shardlog.spark.typed as typed_module

    real_append = typed_module.append

    def crash_before_the_typed_commit(table: Any, batch: Any) -> Any:
        if table.name()[-1] == typed_table:
            raise SystemExit("the run dies after its dead-letter commit")
        return real_append(table, batch)

    monkeypatch.setattr(typed_module, "append", crash_before_the_typed_commit)
    try:
        yield
    finally:
        monkeypatch.setattr(typed_module, "append", real_append)
