"""The group registration's settings: where the log and the tables are (its environment),
and the group to register (the custom resource's properties)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ValidationError

from lambdas.settings import settings_from_env
from shardlog import constants as C
from shardlog.exceptions import ConfigurationError
from shardlog.lambda_consumer.settings import LambdaConsumerSettings
from shardlog.settings import BucketName, TableName
from shardlog.tables import TableNames

RESOURCE_TYPE = "Custom::ShardlogConsumerGroup"
# The custom resource's properties: CloudFormation passes every value as a string.
PROPERTIES = {
    "group": "Group",
    "starting_position": "StartingPosition",
    "starting_position_timestamp_ms": "StartingPositionTimestampMs",
}


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


def group_properties(settings: LambdaConsumerSettings) -> dict[str, str]:
    """The resource properties the stack writes for a group: what registration needs."""
    values = settings.model_dump(include=set(PROPERTIES), mode="json")
    return {PROPERTIES[k]: str(v) for k, v in values.items() if v is not None}


def group_from_properties(properties: Mapping[str, Any]) -> LambdaConsumerSettings:
    """The group the properties declare, validated by the group's own rules; an error
    names the property and the rule."""
    values = {k: properties[name] for k, name in PROPERTIES.items() if name in properties}
    values["function_name"] = "-"  # registration never invokes the group's function
    try:
        return LambdaConsumerSettings.model_validate(values)
    except ValidationError as exc:
        problems = "; ".join(
            f"{PROPERTIES.get(str(e['loc'][0]), e['loc'][0]) if e['loc'] else 'group'}: {e['msg']}"
            for e in exc.errors()
        )
        raise ConfigurationError(f"invalid consumer group properties: {problems}") from exc
