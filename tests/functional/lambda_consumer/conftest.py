"""The Lambda consumer tests' fixture: a group started on the embedded AWS (the local waker
and runner handlers, on the test's clock)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from shardlog.clock import ManualClock
from shardlog.lambda_consumer.settings import LambdaConsumerSettings
from shardlog.local.lambda_consumers import LocalGroup, LocalLambdaConsumers
from tests.support.aws import AwsEnv
from tests.support.lambda_consumers import Recorder

Start = Callable[..., LocalLambdaConsumers]


@pytest.fixture
def start_group(aws: AwsEnv, clock: ManualClock) -> Start:
    """``start_group(recorder, group="billing", **settings)``: a started local group."""

    def start(recorder: Recorder, group: str = "billing", **settings: Any) -> LocalLambdaConsumers:
        consumer = LambdaConsumerSettings(group=group, function_name="recorder", **settings)
        return LocalLambdaConsumers(
            aws.clients, aws.config, [LocalGroup(consumer, recorder, "tests:recorder")], clock=clock
        ).start()

    return start
