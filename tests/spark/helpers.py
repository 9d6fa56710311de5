"""Helpers of the Spark tests: tiny job scripts, bounded waits, log and Parquet read-back."""

from __future__ import annotations

from typing import Any

from shardlog import constants as C
from shardlog.clock import SystemClock
from shardlog.reader import LogReader
from shardlog.spark.io import read_parquet
from tests.support.aws import AwsEnv

OK_JOB = """\
import sys
from pyspark.sql import SparkSession

spark = SparkSession.builder.getOrCreate()
assert spark.range(10).count() == 10
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


def compacted_objects(aws: AwsEnv) -> dict[str, str]:
    """Key -> ETag of every compacted object."""
    pages = aws.clients.s3.get_paginator("list_objects_v2").paginate(
        Bucket=aws.config.bucket, Prefix=C.COMPACTED_PREFIX
    )
    return {o["Key"]: o["ETag"] for page in pages for o in page.get("Contents", [])}


def compacted_rows(aws: AwsEnv) -> list[Row]:
    """Every row of every compacted file, duplicates kept."""
    rows = []
    for key in compacted_objects(aws):
        body = aws.clients.s3.get_object(Bucket=aws.config.bucket, Key=key)["Body"].read()
        for r in read_parquet(body).to_pylist():
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
