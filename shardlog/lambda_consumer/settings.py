"""A Lambda consumer group's settings: what Lambda's Kinesis event source mapping offers,
validated once (at synth, at the runner's cold start, at `shardlog local up`).

One schema, two spellings: the model's snake_case fields, and the camelCase keys of
cdk.json's ``shardlog:lambdaConsumers`` and of ``--lambda-consumer`` (``from_camel``);
errors name the camelCase key."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from enum import StrEnum
from typing import Any, Self

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic import ValidationError as PydanticValidationError

from shardlog import constants as C
from shardlog.consumer.positions import StartPosition
from shardlog.consumer.settings import validate_group
from shardlog.exceptions import ConfigurationError, ValidationError
from shardlog.lambda_consumer.filters import FilterCriteria, parse_criteria
from shardlog.lambda_consumer.windows import MAX_WINDOW_S
from shardlog.settings import BucketName, Tables

# An on-failure destination: an SQS queue, an SNS topic or an S3 bucket (Lambda's three).
DESTINATION_ARN = re.compile(
    r"^arn:aws[a-z-]*:(sqs|sns|s3):[a-z0-9-]*:\d{0,12}:?[A-Za-z0-9_./:-]+$"
)
# The runner invokes synchronously and checkpoints after each invocation: its lease must
# outlast the longest invocation by this much.
LEASE_MARGIN_MS = 30_000


class StartingPosition(StrEnum):
    TRIM_HORIZON = "TRIM_HORIZON"
    LATEST = "LATEST"
    AT_TIMESTAMP = "AT_TIMESTAMP"


class FilterPattern(BaseModel):
    """One filter of ``filter_criteria``: its pattern as compact JSON text (Lambda's
    ``Filter.Pattern``), validated by shardlog/lambda_consumer/filters.py."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    pattern: str


class LambdaConsumerSettings(BaseModel):
    """One group. Durations carry their unit in their name."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    group: str
    # The function to invoke: a name, a name:alias or an ARN (another account's too).
    function_name: str = Field(min_length=1, max_length=170)
    batch_size: int = Field(default=C.LAMBDA_CONSUMER_BATCH_SIZE, ge=1, le=10_000)
    batching_window_ms: int = Field(default=0, ge=0, le=300_000)
    # Lambda's ParallelizationFactor: up to this many batches of one partition in flight at
    # once, each partition key in one lane and in order (shardlog/lambda_consumer/lanes.py).
    parallelization_factor: int = Field(default=1, ge=1, le=10)
    starting_position: StartingPosition = StartingPosition.TRIM_HORIZON
    starting_position_timestamp_ms: int | None = Field(default=None, ge=0)
    # -1: retry forever (the partition waits); shardlog's default is finite, since the log
    # keeps the data and an exhausted batch can be replayed.
    maximum_retry_attempts: int = Field(
        default=C.LAMBDA_CONSUMER_MAX_RETRY_ATTEMPTS, ge=-1, le=10_000
    )
    bisect_batch_on_function_error: bool = True
    # -1: no limit; else records older than this (by Kinesis arrival) are not invoked but
    # sent to the on-failure destination (Lambda's MaximumRecordAgeInSeconds: 60 to 604,800).
    maximum_record_age_s: int = Field(default=-1, ge=-1, le=604_800)
    on_failure_destination: str | None = None
    report_batch_item_failures: bool = True
    function_timeout_ms: int = Field(default=60_000, ge=1_000, le=900_000)
    # Waits between retries of a failed batch: doubling from the base, capped.
    retry_base_delay_ms: int = Field(default=1_000, ge=0, le=60_000)
    retry_max_delay_ms: int = Field(default=30_000, ge=0, le=300_000)
    lease_duration_ms: int | None = Field(default=None, ge=10_000, le=3_600_000)
    # Lambda's FilterCriteria: up to 5 patterns, OR-ed; records none matches are never
    # invoked, and the checkpoint moves past them (shardlog/lambda_consumer/filters.py).
    filter_criteria: tuple[FilterPattern, ...] = ()
    # Lambda's TumblingWindowInSeconds: 0 (none) to 900; the function gets and returns the
    # window's state (shardlog/lambda_consumer/windows.py). At parallelization factor 1 only.
    tumbling_window_s: int = Field(default=0, ge=0, le=MAX_WINDOW_S)

    @field_validator("group")
    @classmethod
    def _group(cls, value: str) -> str:
        try:
            return validate_group(value)
        except ValidationError as exc:
            raise ValueError(exc.reason) from None

    @field_validator("filter_criteria", mode="before")
    @classmethod
    def _filters(cls, value: Any) -> Any:
        if isinstance(value, list | tuple):  # patterns as objects, JSON text, or this model
            value = [v.model_dump() if isinstance(v, FilterPattern) else v for v in value]
        return parse_criteria(value).as_json()  # a ValidationError names the pattern's field

    @field_validator("maximum_record_age_s")
    @classmethod
    def _age(cls, value: int) -> int:
        if value != -1 and value < 60:
            raise ValueError("must be -1 (no limit) or 60 to 604800 seconds (Lambda's range)")
        return value

    @field_validator("on_failure_destination")
    @classmethod
    def _destination(cls, value: str | None) -> str | None:
        if value is not None and not DESTINATION_ARN.match(value):
            raise ValueError("must be the ARN of an SQS queue, an SNS topic or an S3 bucket")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        if (self.starting_position is StartingPosition.AT_TIMESTAMP) != (
            self.starting_position_timestamp_ms is not None
        ):
            raise ValueError(
                "starting_position_timestamp_ms is required with AT_TIMESTAMP and only then"
            )
        if self.tumbling_window_s and self.parallelization_factor > 1:
            raise ValueError(
                "tumblingWindowS needs parallelizationFactor 1: a window's state is one "
                "per partition, and lanes would invoke its batches at once"
            )
        if self.retry_max_delay_ms < self.retry_base_delay_ms:
            raise ValueError("retry_max_delay_ms must be >= retry_base_delay_ms")
        if self.lease_duration_ms is not None and self.lease_duration_ms < self.min_lease_ms:
            raise ValueError(
                f"lease_duration_ms must be >= function_timeout_ms + {LEASE_MARGIN_MS} "
                f"({self.min_lease_ms})"
            )
        return self

    @property
    def min_lease_ms(self) -> int:
        return self.function_timeout_ms + LEASE_MARGIN_MS

    @property
    def lease_ms(self) -> int:
        """The lease the runner takes: long enough for one invocation plus a checkpoint."""
        return self.lease_duration_ms or self.min_lease_ms

    @property
    def destination_kind(self) -> str | None:
        """ "sqs", "sns" or "s3" (None: no destination)."""
        if self.on_failure_destination is None:
            return None
        return self.on_failure_destination.split(":")[2]

    def criteria(self) -> FilterCriteria:
        """The compiled filters (none: every record is invoked)."""
        return parse_criteria([p.model_dump() for p in self.filter_criteria])

    @classmethod
    def from_camel(cls, raw: Mapping[str, Any], **fields: Any) -> LambdaConsumerSettings:
        """A group from cdk.json's camelCase keys (``functionArn`` or ``functionName``,
        ``batchSize``, ``filterCriteria``, ...), ``fields`` (snake_case) on top. Raises
        one ConfigurationError naming the group and each camelCase key refused."""
        values = {_snake(key): value for key, value in raw.items()}
        if "function_arn" in values:
            values["function_name"] = values.pop("function_arn")
        values.update(fields)
        try:
            return cls(**values)
        except PydanticValidationError as exc:
            group = values.get("group", "?")
            raise ConfigurationError(f"group {group!r}: {camel_problems(exc)}") from None

    def start_position(self) -> StartPosition:
        """The position the group is created at: fixed per partition when it is registered
        (deploy, `shardlog local up`; shardlog/consumer/creation.py), as for worker groups."""
        if self.starting_position is StartingPosition.TRIM_HORIZON:
            return StartPosition.trim_horizon()
        if self.starting_position is StartingPosition.LATEST:
            return StartPosition.latest()
        assert self.starting_position_timestamp_ms is not None
        return StartPosition.at_timestamp(self.starting_position_timestamp_ms)


def _snake(name: str) -> str:
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in name)


def camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(word.title() for word in rest)


def camel_problems(exc: PydanticValidationError) -> str:
    """Pydantic's errors on one line, each naming the camelCase key (or the place inside
    it, as filters do) and what is wrong."""
    problems = []
    for error in exc.errors():
        message = str(error["msg"]).removeprefix("Value error, ")
        if not error["loc"]:
            problems.append(message)
            continue
        key = camel(str(error["loc"][0]))
        place = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error["loc"][1:])
        problems.append(message if message.startswith(key) else f"{key}{place}: {message}")
    return "; ".join(problems)


class RunnerSettings(BaseModel):
    """What the runner Lambda needs beside its group: where the log and its queues are."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    consumer: LambdaConsumerSettings
    bucket: BucketName
    tables: Tables
    wake_queue_url: str = Field(min_length=1)
    # The event's eventSourceARN: the log's Kinesis stream (records carry log seqs).
    event_source_arn: str = Field(min_length=1)
    region: str = C.DEFAULT_REGION

    @property
    def consumers_table(self) -> str:
        """The table of the group's leases and checkpoints (the runner's reads name it)."""
        return self.tables.consumers

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> RunnerSettings:
        """The runner's settings: one JSON document in SHARDLOG_LAMBDA_CONSUMER, written by
        the CDK construct from this model, validated at cold start."""
        env = os.environ if environ is None else environ
        raw = env.get(C.ENV_LAMBDA_CONSUMER)
        if not raw:
            raise ConfigurationError(f"{C.ENV_LAMBDA_CONSUMER} is not set: the runner has no group")
        try:
            return cls.model_validate_json(raw)
        except PydanticValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()
            )
            raise ConfigurationError(f"invalid {C.ENV_LAMBDA_CONSUMER}: {problems}") from exc


# --- the group as the properties of its registration (the custom resource) ----------------
RESOURCE_TYPE = "Custom::ShardlogConsumerGroup"
# The custom resource's properties: CloudFormation passes every value as a string.
PROPERTIES = {
    "group": "Group",
    "starting_position": "StartingPosition",
    "starting_position_timestamp_ms": "StartingPositionTimestampMs",
}


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
    except PydanticValidationError as exc:
        problems = "; ".join(
            f"{PROPERTIES.get(str(e['loc'][0]), e['loc'][0]) if e['loc'] else 'group'}: {e['msg']}"
            for e in exc.errors()
        )
        raise ConfigurationError(f"invalid consumer group properties: {problems}") from exc
