"""Helpers of the lake-table tests: a table per test, and reading it back."""

from __future__ import annotations

import uuid

import pyarrow as pa

from shardlog.lake.catalog import open_table
from shardlog.lake.files import DATA_DIR
from shardlog.lake.settings import LakeSettings
from tests.spark.helpers import Row
from tests.support.aws import AwsEnv


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
    """Rows in the shape of ``tests.spark.helpers.log_rows``, sorted."""
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
