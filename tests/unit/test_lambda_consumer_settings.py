"""A Lambda consumer group's settings: Lambda's ranges at and past each edge."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from shardlog.consumer.positions import InitialPosition
from shardlog.lambda_consumer.settings import LambdaConsumerSettings

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
