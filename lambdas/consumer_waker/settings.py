"""The waker's settings: the groups and their wake queues, the tables."""

from __future__ import annotations

import json
from collections.abc import Mapping

from pydantic import BaseModel, field_validator

from lambdas.settings import settings_from_env
from shardlog import constants as C
from shardlog.consumer.settings import validate_group
from shardlog.exceptions import ValidationError
from shardlog.settings import TableName


class WakerSettings(BaseModel, frozen=True):
    # group -> wake queue URL (a JSON object in SHARDLOG_LAMBDA_CONSUMERS)
    queues: dict[str, str]
    partitions_table: TableName
    consumers_table: TableName

    @field_validator("queues", mode="before")
    @classmethod
    def _queues(cls, value: object) -> object:
        if isinstance(value, str):
            value = json.loads(value)
        if not isinstance(value, dict) or not value:
            raise ValueError("must be a non-empty JSON object {group: wake queue URL}")
        for group in value:
            try:
                validate_group(group)
            except ValidationError as exc:
                raise ValueError(f"group {group!r}: {exc.reason}") from None
        return value

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> WakerSettings:
        names = {
            "queues": C.ENV_LAMBDA_CONSUMERS,
            "partitions_table": C.ENV_PARTITIONS_TABLE,
            "consumers_table": C.ENV_CONSUMERS_TABLE,
        }
        return settings_from_env(cls, names, "consumer waker", environ)
