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
from tests.infra.cdk_synth import REPO_ROOT, TEST_ALARM_EMAIL, Synthesized, cdk_context


def _settings(**context: Any) -> StackSettings:
    """Settings from exactly this context, plus an alarm subscriber unless it says otherwise."""
    subscriber = {} if IC.CTX_NO_ALARM_SUBSCRIBER in context else {IC.CTX_ALARM_EMAIL: "a@b.io"}
    return StackSettings.from_context(App(context={**subscriber, **context}).node)


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
        # the handler's own range (shardlog/settings.py): it would refuse it at cold start
        (IC.CTX_SEGMENT_MAX_RECORDS, 0),
        (IC.CTX_PARTITIONS_TABLE, "p1"),
        (IC.CTX_STREAM_NAME, "has space"),
        (IC.CTX_ALARM_EMAIL, "not-an-address"),
        (IC.CTX_BREAK_GLASS_ROLE_ARN, "arn:aws:iam::123456789012:user/someone"),
        (IC.CTX_PRODUCER_PRINCIPAL_ARNS, "arn:aws:iam::123456789012:role/ok,arn:aws:s3:::x"),
        (IC.CTX_CONSUMER_GROUPS, "billing,$ingest"),
        (IC.CTX_CONSUMER_GROUPS, "billing,billing"),
        # fewer invocations than shards: some shards would never be ingested
        (IC.CTX_INGEST_RESERVED_CONCURRENCY, 0),
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
            IC.CTX_PARTITIONS_TABLE: "parts1",
            IC.CTX_CONSUMERS_TABLE: "cons1",
            IC.CTX_BUCKET_NAME: "b1-bucket",
        }
    )
    (stream,) = template.find_resources("AWS::Kinesis::Stream").values()
    assert stream["Properties"]["Name"] == "s1"
    names = {
        t["Properties"]["TableName"]
        for t in template.find_resources("AWS::DynamoDB::Table").values()
    }
    assert names == {"parts1", "cons1"}
    # Without context, CloudFormation names everything: several stacks can coexist.
    (default_stream,) = synth.resources("AWS::Kinesis::Stream").values()
    assert "Name" not in default_stream["Properties"]
    for table in synth.resources("AWS::DynamoDB::Table").values():
        assert "TableName" not in table["Properties"]
    for bucket in synth.resources("AWS::S3::Bucket").values():
        assert "BucketName" not in bucket["Properties"]


def test_synth_needs_an_alarm_subscriber_or_an_explicit_opt_out() -> None:
    with pytest.raises(SettingsError, match=IC.CTX_NO_ALARM_SUBSCRIBER) as refused:
        StackSettings.from_context(App(context={}).node)
    assert IC.CTX_ALARM_EMAIL in str(refused.value)
    assert _settings(**{IC.CTX_ALARM_EMAIL: TEST_ALARM_EMAIL}).alarm_email == TEST_ALARM_EMAIL
    opted_out = _settings(**{IC.CTX_NO_ALARM_SUBSCRIBER: "true"})
    assert opted_out.no_alarm_subscriber and opted_out.alarm_email is None
    with pytest.raises(SettingsError, match="contradict"):
        _settings(**{IC.CTX_NO_ALARM_SUBSCRIBER: True, IC.CTX_ALARM_EMAIL: TEST_ALARM_EMAIL})
    # "false" on the command line is no opt-out
    with pytest.raises(SettingsError, match=IC.CTX_ALARM_EMAIL):
        StackSettings.from_context(App(context={IC.CTX_NO_ALARM_SUBSCRIBER: "false"}).node)


def test_cdk_json_names_no_subscriber_so_a_bare_synth_says_so() -> None:
    context = cdk_context()
    del context[IC.CTX_ALARM_EMAIL]
    with pytest.raises(SettingsError, match=IC.CTX_ALARM_EMAIL):
        StackSettings.from_context(App(context=context).node)


def test_retention_is_a_week_and_records_are_given_up_before_the_stream_trims_them() -> None:
    settings = _settings()
    assert settings.retention_hours == 168
    assert settings.max_record_age_s == 168 * 3600 * 9 // 10
    # Lambda's own cap (7 days) applies to long retentions
    assert _settings(**{IC.CTX_RETENTION_HOURS: 8760}).max_record_age_s == 604_800
    day = _settings(**{IC.CTX_RETENTION_HOURS: 24})
    assert 60 <= day.max_record_age_s < 24 * 3600
    with pytest.raises(SettingsError, match=IC.CTX_ITERATOR_AGE_ALARM_MINUTES):
        _settings(**{IC.CTX_RETENTION_HOURS: 24, IC.CTX_ITERATOR_AGE_ALARM_MINUTES: 24 * 60})


def test_reserved_concurrency_follows_the_shards() -> None:
    assert _settings(**{IC.CTX_SHARD_COUNT: 3}).ingest_concurrency == 6
    assert _settings(**{IC.CTX_SHARD_COUNT: 0}).ingest_concurrency == (
        IC.DEFAULT_ON_DEMAND_RESERVED_CONCURRENCY
    )
    explicit = {IC.CTX_SHARD_COUNT: 3, IC.CTX_INGEST_RESERVED_CONCURRENCY: "3"}
    assert _settings(**explicit).ingest_concurrency == 3
    with pytest.raises(SettingsError, match=IC.CTX_INGEST_RESERVED_CONCURRENCY):
        _settings(**{IC.CTX_SHARD_COUNT: 4, IC.CTX_INGEST_RESERVED_CONCURRENCY: 3})


def test_lists_come_from_cdk_json_or_the_command_line() -> None:
    groups = ("billing", "search")
    assert _settings(**{IC.CTX_CONSUMER_GROUPS: list(groups)}).consumer_groups == groups
    assert _settings(**{IC.CTX_CONSUMER_GROUPS: "billing, search"}).consumer_groups == groups
    assert _settings(**{IC.CTX_CONSUMER_GROUPS: '["billing","search"]'}).consumer_groups == groups
    assert _settings().consumer_groups == ()


def test_deploy_docs_explain_every_context_key() -> None:
    docs = (REPO_ROOT / "docs" / "DEPLOY.md").read_text()
    keys = [value for name, value in vars(IC).items() if name.startswith("CTX_")]
    assert keys
    for key in keys:
        assert f"| `{key}`" in docs or f"`{key}` /" in docs or f"/ `{key}`" in docs, key
    outputs = [value for name, value in vars(IC).items() if name.startswith("OUTPUT_")]
    for output in outputs:
        assert f"`{output}`" in docs, output
