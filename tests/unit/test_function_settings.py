"""One settings model per function: the environment the stack writes from a model is read back
by the handler as the same model, and a missing or bad variable is one error naming it."""

from __future__ import annotations

import json

import pytest

from shardlog import constants as C
from shardlog.exceptions import ConfigurationError
from shardlog.function_settings import (
    FunctionSettings,
    IngestSettings,
    ProducerApiSettings,
    RegistrationSettings,
    ShardSyncSettings,
    SparkTriggerSettings,
    WakerSettings,
)
from shardlog.lambda_consumer.settings import LambdaConsumerSettings, RunnerSettings
from shardlog.tables import TableNames

TABLES = TableNames("log-partitions", "log-consumers")
MODELS: list[FunctionSettings] = [
    IngestSettings(
        bucket="log-bucket",
        tables=TABLES,
        lease_duration_ms=120_000,
        segment_max_records=7,
        segment_max_bytes=4096,
        dedupe_window_s=120,
    ),
    ShardSyncSettings(stream_name="events", tables=TABLES),
    RegistrationSettings(bucket="log-bucket", tables=TABLES),
    WakerSettings(queues={"invoices": "https://sqs/q.fifo"}, tables=TABLES),
    ProducerApiSettings(stream_name="events"),
    SparkTriggerSettings(
        application_id="00abc",
        execution_role_arn="arn:aws:iam::123456789012:role/spark",
        spark_jobs_uri="s3://artifacts/spark_jobs/",
        spark_deps_uri="s3://artifacts/spark_deps/deps.tar.gz",
        bucket="log-bucket",
        tables=TABLES,
        compaction_max_records=5_000,
    ),
]


@pytest.mark.parametrize("settings", MODELS, ids=lambda m: type(m).__name__)
def test_the_environment_written_is_read_back_as_the_same_settings(
    settings: FunctionSettings,
) -> None:
    environment = settings.environment()
    assert set(environment) <= set(type(settings).VARIABLES.values())
    assert type(settings).from_env(environment) == settings


def test_the_tables_are_embedded_whole() -> None:
    settings = IngestSettings.from_env(MODELS[0].environment())
    assert settings.tables == TABLES
    assert settings.writer_settings().tables == TABLES


def test_a_default_is_left_to_the_handler() -> None:
    environment = IngestSettings(bucket="log-bucket", tables=TABLES).environment()
    assert C.ENV_LEASE_DURATION_MS not in environment
    assert IngestSettings.from_env(environment).lease_duration_ms == C.DEFAULT_LEASE_DURATION_MS


@pytest.mark.parametrize("missing", [C.ENV_PARTITIONS_TABLE, C.ENV_CONSUMERS_TABLE])
def test_each_table_is_required_by_its_own_variable(missing: str) -> None:
    environment = {k: v for k, v in MODELS[1].environment().items() if k != missing}
    with pytest.raises(ConfigurationError, match=f"{missing}: Field required"):
        ShardSyncSettings.from_env(environment)


@pytest.mark.parametrize(
    ("variable", "name", "accepted"),
    [
        (C.ENV_CONSUMERS_TABLE, "abc", True),  # DynamoDB's 3 characters
        (C.ENV_CONSUMERS_TABLE, "ab", False),
        (C.ENV_PARTITIONS_TABLE, "p" * 255, True),  # and 255
        (C.ENV_PARTITIONS_TABLE, "p" * 256, False),
    ],
)
def test_a_table_name_past_its_limit_names_its_variable(
    variable: str, name: str, accepted: bool
) -> None:
    environment = {**MODELS[1].environment(), variable: name}
    if accepted:
        assert ShardSyncSettings.from_env(environment)
        return
    with pytest.raises(ConfigurationError, match=f"shard sync settings: {variable}: String"):
        ShardSyncSettings.from_env(environment)


def test_the_stack_writes_deploy_time_tokens_unvalidated() -> None:
    token = "${Token[TOKEN.1]}"  # what a CloudFormation reference looks like at synth
    settings = ShardSyncSettings.for_stack(stream_name=token, tables=TableNames(token, token))
    assert settings.environment() == {
        C.ENV_STREAM_NAME: token,
        C.ENV_PARTITIONS_TABLE: token,
        C.ENV_CONSUMERS_TABLE: token,
    }


def test_the_runner_reads_its_document_with_the_tables_embedded() -> None:
    settings = RunnerSettings(
        consumer=LambdaConsumerSettings(group="invoices", function_name="f"),
        bucket="log-bucket",
        tables=TABLES,
        wake_queue_url="https://sqs/q.fifo",
        event_source_arn="arn:aws:kinesis:us-east-1:123456789012:stream/events",
    )
    environment = {C.ENV_LAMBDA_CONSUMER: settings.model_dump_json()}
    assert RunnerSettings.from_env(environment) == settings
    broken = settings.model_dump(mode="json")
    broken["tables"]["consumers"] = "ab"
    with pytest.raises(ConfigurationError, match="tables: Value error, consumers: String"):
        RunnerSettings.from_env({C.ENV_LAMBDA_CONSUMER: json.dumps(broken)})
