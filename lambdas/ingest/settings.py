"""The ingest handler's settings, validated once at cold start."""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import BaseModel

from lambdas.settings import settings_from_env
from shardlog import constants as C
from shardlog.settings import (
    BucketName,
    DedupeWindowS,
    LeaseDurationMs,
    SegmentMaxBytes,
    SegmentMaxRecords,
    TableName,
)
from shardlog.tables import TableNames
from shardlog.writer import WriterSettings


class IngestSettings(BaseModel, frozen=True):
    bucket: BucketName
    partitions_table: TableName
    consumers_table: TableName
    lease_duration_ms: LeaseDurationMs = C.DEFAULT_LEASE_DURATION_MS
    segment_max_records: SegmentMaxRecords = C.DEFAULT_SEGMENT_MAX_RECORDS
    segment_max_bytes: SegmentMaxBytes = C.DEFAULT_SEGMENT_MAX_BYTES
    dedupe_window_s: DedupeWindowS = C.DEFAULT_DEDUPE_WINDOW_S

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> IngestSettings:
        names = {
            "bucket": C.ENV_BUCKET_NAME,
            "partitions_table": C.ENV_PARTITIONS_TABLE,
            "consumers_table": C.ENV_CONSUMERS_TABLE,
            "lease_duration_ms": C.ENV_LEASE_DURATION_MS,
            "segment_max_records": C.ENV_SEGMENT_MAX_RECORDS,
            "segment_max_bytes": C.ENV_SEGMENT_MAX_BYTES,
            "dedupe_window_s": C.ENV_DEDUPE_WINDOW_S,
        }
        return settings_from_env(cls, names, "ingest", environ)

    def writer_settings(self) -> WriterSettings:
        return WriterSettings(
            bucket=self.bucket,
            tables=TableNames(self.partitions_table, self.consumers_table),
            lease_duration_ms=self.lease_duration_ms,
            segment_max_records=self.segment_max_records,
            segment_max_bytes=self.segment_max_bytes,
            dedupe_window_ms=self.dedupe_window_s * 1000,
        )
