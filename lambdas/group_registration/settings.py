"""The group registration's settings: where the log and the tables are (its environment).
The group to register comes in the custom resource's properties
(shardlog/lambda_consumer/settings.py, ``group_from_properties``)."""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import BaseModel

from lambdas.settings import settings_from_env
from shardlog import constants as C
from shardlog.settings import BucketName, TableName
from shardlog.tables import TableNames


class RegistrationSettings(BaseModel, frozen=True):
    bucket: BucketName
    partitions_table: TableName
    consumers_table: TableName

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> RegistrationSettings:
        names = {
            "bucket": C.ENV_BUCKET_NAME,
            "partitions_table": C.ENV_PARTITIONS_TABLE,
            "consumers_table": C.ENV_CONSUMERS_TABLE,
        }
        return settings_from_env(cls, names, "group registration", environ)

    @property
    def tables(self) -> TableNames:
        return TableNames(self.partitions_table, self.consumers_table)
