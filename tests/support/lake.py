"""The lake table as another engine sees it: snapshots shardlog did not commit."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa

from shardlog.lake.files import parquet_bytes, s3_uri
from shardlog.lake.schema import EVENTS
from shardlog.lake.settings import LakeSettings
from tests.support.aws import AwsEnv

FOREIGN_PARTITION = "foreign"


def foreign_add_files(aws: AwsEnv, lake: LakeSettings, seq: int, table: Any = None) -> str:
    """Another engine appends one row (partition id ``foreign``, the log has none such) with
    plain pyiceberg ``add_files``: a snapshot without shardlog's watermarks. Its key."""
    from pyiceberg.catalog import load_catalog

    row = {
        "partition_id": FOREIGN_PARTITION,
        "seq": seq,
        "partition_key": "f",
        "data": b"f",
        "kinesis_sequence_number": "1",
        "arrival_time": datetime(2026, 1, 1, tzinfo=UTC),
        "committed_at": datetime(2026, 1, 1, tzinfo=UTC),
        "record_id": None,
    }
    key = f"{lake.key_prefix}data/foreign-{uuid.uuid4().hex}.parquet"
    body = parquet_bytes(pa.Table.from_pylist([row], schema=EVENTS.arrow()))
    aws.clients.s3.put_object(Bucket=lake.bucket, Key=key, Body=body)
    if table is None:
        table = load_catalog(lake.catalog_name, **lake.properties).load_table(lake.table)
    table.add_files([s3_uri(lake.bucket, key)])
    return key
