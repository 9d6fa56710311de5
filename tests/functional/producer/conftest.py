"""The producer API tests' fixture: the handler served on 127.0.0.1 over a fresh stream."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from shardlog.clock import ManualClock
from tests.support.api import ApiUnderTest, serve
from tests.support.aws import stream_env


@pytest.fixture
def api(endpoint_url: str, clock: ManualClock) -> Iterator[ApiUnderTest]:
    yield from serve(stream_env(endpoint_url), clock)
