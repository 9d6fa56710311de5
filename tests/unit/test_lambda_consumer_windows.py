"""Tumbling windows, the pure rules: which window a record belongs to (epoch-aligned, at
and past each boundary), when the clock closes one, the ISO 8601 bounds of the event, the
state limit at and past 1 MB, and the setting's range (0 to 900, factor 1 only) in both
spellings."""

from __future__ import annotations

import base64
import random

import pytest
from pydantic import ValidationError

from shardlog.dal.consumers import LaneProgress, WindowState
from shardlog.exceptions import ShardlogError
from shardlog.lambda_consumer.settings import LambdaConsumerSettings
from shardlog.lambda_consumer.windows import (
    CLOSE_GRACE_MS,
    MAX_WINDOW_S,
    STATE_LIMIT_BYTES,
    Window,
    closed_by_clock,
    encode_state,
    keepable,
    window_of,
)
from shardlog.local.lambda_consumers import parse_group
from shardlog.tables import from_ddb

MINUTE = 60_000
T = 1_700_000_040_000  # a multiple of a minute


def test_windows_are_aligned_to_the_epoch_and_half_open() -> None:
    assert window_of(T, 60) == Window(T, T + MINUTE)
    assert window_of(T + MINUTE - 1, 60) == Window(T, T + MINUTE)  # the last ms of it
    assert window_of(T + MINUTE, 60) == Window(T + MINUTE, T + 2 * MINUTE)  # the next one
    assert window_of(T - 1, 60) == Window(T - MINUTE, T)
    assert window_of(0, 1) == Window(0, 1_000)


def test_the_longest_window_is_900_seconds() -> None:
    assert window_of(T, MAX_WINDOW_S).end_ms - window_of(T, MAX_WINDOW_S).start_ms == 900_000
    assert window_of(900_000 * 5 + 1, 900) == Window(900_000 * 5, 900_000 * 6)
    for bad in (0, 901):
        with pytest.raises(ValueError, match="tumblingWindowS"):
            window_of(T, bad)


def test_the_event_bounds_are_iso_8601_utc() -> None:
    assert Window(T, T + MINUTE).event() == {
        "start": "2023-11-14T22:14:00Z",
        "end": "2023-11-14T22:15:00Z",
    }


def test_the_clock_closes_a_window_after_its_end_and_the_grace() -> None:
    assert not closed_by_clock(T + MINUTE, T + MINUTE + CLOSE_GRACE_MS - 1)
    assert closed_by_clock(T + MINUTE, T + MINUTE + CLOSE_GRACE_MS)


def state_of(size: int) -> bytes:
    encoded = encode_state({"s": "x" * (size - len('{"s":""}'))})
    assert len(encoded) == size
    return encoded


def test_a_state_is_kept_up_to_1_mb_and_not_past_it() -> None:
    assert keepable(state_of(STATE_LIMIT_BYTES))
    assert not keepable(state_of(STATE_LIMIT_BYTES + 1))


def test_a_state_within_1_mb_that_cannot_be_stored_is_not_kept() -> None:
    noise = base64.b64encode(random.Random(7).randbytes(STATE_LIMIT_BYTES // 2)).decode()
    encoded = encode_state({"s": noise})  # compresses to about 3/4 of its size
    assert len(encoded) <= STATE_LIMIT_BYTES
    assert not keepable(encoded)


def test_the_stored_state_round_trips_through_its_item_attribute() -> None:
    state = WindowState(T, T + MINUTE, encode_state({"k": 1, "é": [1, 2]}))
    item = {"windowState": state.attribute(), "leaseCounter": {"N": "1"}}
    assert LaneProgress.from_item(from_ddb(item)).window == state
    assert LaneProgress.from_item({}).window is None


def refused(**changes: object) -> str:
    with pytest.raises(ValidationError) as caught:
        LambdaConsumerSettings(group="billing", function_name="f", **changes)  # type: ignore[arg-type]
    return str(caught.value)


def test_the_setting_is_0_to_900_seconds() -> None:
    for good in (0, 1, 900):
        settings = LambdaConsumerSettings(group="b", function_name="f", tumbling_window_s=good)
        assert settings.tumbling_window_s == good
    assert LambdaConsumerSettings(group="b", function_name="f").tumbling_window_s == 0
    for bad in (-1, 901):
        assert "tumbling_window_s" in refused(tumbling_window_s=bad)


def test_windows_need_parallelization_factor_1() -> None:
    message = refused(tumbling_window_s=60, parallelization_factor=2)
    assert "tumblingWindowS needs parallelizationFactor 1" in message
    LambdaConsumerSettings(
        group="b", function_name="f", tumbling_window_s=0, parallelization_factor=10
    )


@pytest.mark.parametrize(
    ("query", "words"),
    [
        (
            "tumblingWindowS=901",
            "group 'billing': tumblingWindowS: Input should be less than or equal to 900",
        ),
        (
            "tumblingWindowS=-1",
            "group 'billing': tumblingWindowS: Input should be greater than or equal to 0",
        ),
        (
            "tumblingWindowS=60&parallelizationFactor=2",
            "tumblingWindowS needs parallelizationFactor 1",
        ),
    ],
)
def test_the_command_line_refuses_it_naming_the_key(query: str, words: str) -> None:
    with pytest.raises(ShardlogError) as caught:
        parse_group(f"billing=json:dumps?{query}")
    assert words in str(caught.value)


def test_the_command_line_takes_it() -> None:
    assert parse_group("billing=json:dumps?tumblingWindowS=900").settings.tumbling_window_s == 900


def test_cdk_jsons_key_is_checked_by_the_same_schema() -> None:
    """What synth reads from cdk.json's shardlog:lambdaConsumers (infra/settings.py)."""
    group = {"group": "billing", "functionArn": "arn:aws:lambda:us-east-1:1:function:f"}
    assert LambdaConsumerSettings.from_camel({**group, "tumblingWindowS": 0}).tumbling_window_s == 0
    with pytest.raises(ShardlogError, match="group 'billing': tumblingWindowS: Input should be"):
        LambdaConsumerSettings.from_camel({**group, "tumblingWindowS": 901})
