"""The shard sync's settings, validated once at cold start."""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import BaseModel

from lambdas.settings import settings_from_env
from shardlog import constants as C
from shardlog.settings import StreamName, TableName
from shardlog.tables import TableNames


class ShardSyncSettings(BaseModel, frozen=True):
    stream_name: StreamName
    partitions_table: TableName
    consumers_table: TableName

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> ShardSyncSettings:
        names = {
            "stream_name": C.ENV_STREAM_NAME,
            "partitions_table": C.ENV_PARTITIONS_TABLE,
            "consumers_table": C.ENV_CONSUMERS_TABLE,
        }
        return settings_from_env(cls, names, "shard sync", environ)

    @property
    def tables(self) -> TableNames:
        return TableNames(self.partitions_table, self.consumers_table)
