"""A Lambda consumer group's settings: Lambda's ranges at and past each edge."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import ValidationError

from shardlog.constants import ENV_LAMBDA_CONSUMER
from shardlog.consumer.positions import InitialPosition
from shardlog.exceptions import ConfigurationError
from shardlog.lambda_consumer.settings import LambdaConsumerSettings, RunnerSettings
from shardlog.tables import TableNames

BASE: dict[str, Any] = {"group": "billing", "function_name": "f"}


def settings(**changes: Any) -> LambdaConsumerSettings:
    return LambdaConsumerSettings(**{**BASE, **changes})


def refused(**changes: Any) -> str:
    with pytest.raises(ValidationError) as caught:
        settings(**changes)
    return str(caught.value)


@pytest.mark.parametrize(
    ("field", "good", "bad"),
    [
        ("batch_size", [1, 10_000], [0, 10_001]),
        ("batching_window_ms", [0, 300_000], [-1, 300_001]),
        ("parallelization_factor", [1, 10], [0, 11]),
        ("maximum_retry_attempts", [-1, 0, 10_000], [-2, 10_001]),
        ("maximum_record_age_s", [-1, 60, 604_800], [-2, 0, 59, 604_801]),
        ("function_timeout_ms", [1_000, 900_000], [999, 900_001]),
    ],
)
def test_ranges_at_and_past_the_edges(field: str, good: list[int], bad: list[int]) -> None:
    for value in good:
        assert getattr(settings(**{field: value}), field) == value
    for value in bad:
        assert field in refused(**{field: value})


def test_defaults_are_finite_retries_with_bisect() -> None:
    s = settings()
    assert (s.maximum_retry_attempts, s.bisect_batch_on_function_error, s.batch_size) == (
        3,
        True,
        100,
    )
    assert s.report_batch_item_failures


@pytest.mark.parametrize("group", ["", "$ingest", "x" * 257])
def test_group_names_follow_the_consumer_rules(group: str) -> None:
    assert "group" in refused(group=group)


@pytest.mark.parametrize(
    "arn",
    [
        "arn:aws:sqs:us-east-1:123456789012:failures",
        "arn:aws:sns:eu-west-1:123456789012:failures",
        "arn:aws:s3:::my-failures-bucket",
    ],
)
def test_destinations_sqs_sns_s3(arn: str) -> None:
    assert settings(on_failure_destination=arn).destination_kind == arn.split(":")[2]


@pytest.mark.parametrize("arn", ["failures", "arn:aws:lambda:us-east-1:123456789012:function:f"])
def test_other_destinations_are_refused(arn: str) -> None:
    assert "on_failure_destination" in refused(on_failure_destination=arn)


def test_at_timestamp_needs_a_timestamp_and_only_it_has_one() -> None:
    assert "starting_position_timestamp_ms" in refused(starting_position="AT_TIMESTAMP")
    assert "starting_position_timestamp_ms" in refused(starting_position_timestamp_ms=5)
    start = settings(
        starting_position="AT_TIMESTAMP", starting_position_timestamp_ms=5
    ).start_position()
    assert (start.kind, start.timestamp_ms) == (InitialPosition.AT_TIMESTAMP, 5)


def test_latest_is_the_head_of_each_partition_at_the_groups_creation() -> None:
    start = settings(starting_position="LATEST").start_position()
    assert (start.kind, start.timestamp_ms) == (InitialPosition.LATEST, None)


def test_the_lease_outlasts_an_invocation() -> None:
    assert settings(function_timeout_ms=60_000).lease_ms == 90_000
    assert "lease_duration_ms" in refused(function_timeout_ms=60_000, lease_duration_ms=89_999)
    assert settings(function_timeout_ms=60_000, lease_duration_ms=90_000).lease_ms == 90_000


def test_unknown_settings_are_refused() -> None:
    assert "batchsize" in refused(batchsize=5)


# --- filterCriteria and the camelCase spelling ---------------------------------------------
BUY = {"data": {"order": {"type": ["buy"]}}}


def test_filters_are_kept_as_compact_json_and_survive_the_runners_document() -> None:
    group = settings(filter_criteria=[{"pattern": BUY}, {"pattern": '{"partitionKey": ["a"]}'}])
    assert [p.pattern for p in group.filter_criteria] == [
        '{"data":{"order":{"type":["buy"]}}}',
        '{"partitionKey":["a"]}',
    ]
    runner = RunnerSettings(
        consumer=group,
        bucket="log-bucket",
        tables=TableNames("partitions", "consumers"),
        wake_queue_url="q",
        event_source_arn="s",
    )
    again = RunnerSettings.from_env({ENV_LAMBDA_CONSUMER: runner.model_dump_json()})
    assert again.consumer == group
    assert len(again.consumer.criteria().filters) == 2
    assert settings(filter_criteria=group.filter_criteria) == group  # the model's own values


def test_no_filters_by_default() -> None:
    assert settings().filter_criteria == ()
    assert not settings().criteria()


def test_an_invalid_filter_is_refused_naming_its_field() -> None:
    message = refused(filter_criteria=[{"pattern": {"data": {"amount": [{"numeric": [">"]}]}}}])
    assert "filterCriteria[0].pattern.data.amount[0].numeric: must be" in message


def test_from_camel_takes_cdk_json_keys_and_names_them_when_refused() -> None:
    group = LambdaConsumerSettings.from_camel(
        {
            "group": "g",
            "functionArn": "arn:aws:lambda:us-east-1:123456789012:function:f",
            "batchSize": 10,
            "maximumRecordAgeS": 60,
            "filterCriteria": {"Filters": [{"Pattern": json.dumps(BUY)}]},
        }
    )
    assert (group.function_name, group.batch_size, group.maximum_record_age_s) == (
        "arn:aws:lambda:us-east-1:123456789012:function:f",
        10,
        60,
    )
    with pytest.raises(ConfigurationError) as caught:
        LambdaConsumerSettings.from_camel(
            {
                "group": "g",
                "functionName": "f",
                "batchSize": 0,
                "bisectBatchOnFunctionErrors": True,
                "filterCriteria": [{"pattern": {"data": {"amount": 5}}}],
            }
        )
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith("group 'g': ")
    assert "batchSize: Input should be greater than or equal to 1" in message
    assert "bisectBatchOnFunctionErrors: Extra inputs are not permitted" in message
    assert "; filterCriteria[0].pattern.data.amount: must be a list of rules" in message
