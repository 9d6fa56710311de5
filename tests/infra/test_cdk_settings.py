"""Context parsing: names, capacity, retention, schedules; bad values fail synth early."""

from __future__ import annotations

from typing import Any

import pytest
from aws_cdk import App, Stack
from aws_cdk.assertions import Template

from infra import constants as IC
from infra.settings import SettingsError, StackSettings
from infra.storage import Storage
from shardlog import constants as C
from tests.infra.cdk_synth import Synthesized, cdk_context


def _settings(**context: Any) -> StackSettings:
    return StackSettings.from_context(App(context=context).node)


def _storage_template(**context: Any) -> Template:
    # Storage alone: no Lambda asset to bundle, so this synthesizes in a moment.
    app = App(context=cdk_context(**context))
    stack = Stack(app, "StorageOnly")
    Storage(stack, "Storage", settings=StackSettings.from_context(stack.node))
    return Template.from_stack(stack)


def test_defaults() -> None:
    settings = _settings()
    assert settings.stream_name is None and settings.bucket_name is None
    assert settings.shard_count == IC.DEFAULT_SHARD_COUNT
    assert settings.lease_duration_ms == C.DEFAULT_LEASE_DURATION_MS


def test_command_line_strings_are_parsed() -> None:
    settings = _settings(
        **{IC.CTX_SHARD_COUNT: "4", IC.CTX_RETENTION_HOURS: "48", IC.CTX_STREAM_NAME: "events"}
    )
    assert (settings.shard_count, settings.retention_hours) == (4, 48)
    assert settings.stream_name == "events"


@pytest.mark.parametrize(
    ("key", "value"),
    [
        (IC.CTX_SHARD_COUNT, "two"),
        (IC.CTX_SHARD_COUNT, -1),
        (IC.CTX_RETENTION_HOURS, 12),
        (IC.CTX_LOG_RETENTION_DAYS, 8),
        # shorter than twice the ingest timeout: an invocation could outlive its lease
        (IC.CTX_LEASE_DURATION_MS, IC.INGEST_TIMEOUT_S * 1000),
    ],
)
def test_bad_values_are_rejected(key: str, value: Any) -> None:
    with pytest.raises(SettingsError, match=key):
        _settings(**{key: value})


def test_zero_shards_means_on_demand() -> None:
    template = _storage_template(**{IC.CTX_SHARD_COUNT: 0})
    (stream,) = template.find_resources("AWS::Kinesis::Stream").values()
    assert stream["Properties"]["StreamModeDetails"] == {"StreamMode": "ON_DEMAND"}
    assert "ShardCount" not in stream["Properties"]


def test_names_from_context(synth: Synthesized) -> None:
    template = _storage_template(
        **{
            IC.CTX_STREAM_NAME: "s1",
            IC.CTX_PARTITIONS_TABLE: "p1",
            IC.CTX_CONSUMERS_TABLE: "c1",
            IC.CTX_BUCKET_NAME: "b1-bucket",
        }
    )
    (stream,) = template.find_resources("AWS::Kinesis::Stream").values()
    assert stream["Properties"]["Name"] == "s1"
    names = {
        t["Properties"]["TableName"]
        for t in template.find_resources("AWS::DynamoDB::Table").values()
    }
    assert names == {"p1", "c1"}
    # Without context, CloudFormation names everything: several stacks can coexist.
    (default_stream,) = synth.resources("AWS::Kinesis::Stream").values()
    assert "Name" not in default_stream["Properties"]
    for table in synth.resources("AWS::DynamoDB::Table").values():
        assert "TableName" not in table["Properties"]
    for bucket in synth.resources("AWS::S3::Bucket").values():
        assert "BucketName" not in bucket["Properties"]
