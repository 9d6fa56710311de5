"""Session fixtures: one embedded AWS (moto server on 127.0.0.1) per test session, fresh
uniquely named resources per test, an injectable clock. Helpers live in tests/support."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from shardlog.clock import ManualClock
from shardlog.local.embedded import EmbeddedAWS
from shardlog.local.quiet import quiet_powertools
from tests.support.aws import AwsEnv, make_env

# Never reach real AWS from a test, whatever the developer's environment holds.
for _name in ("AWS_PROFILE", "AWS_SESSION_TOKEN"):
    os.environ.pop(_name, None)
os.environ["AWS_ACCESS_KEY_ID"] = "testing"
os.environ["AWS_SECRET_ACCESS_KEY"] = "testing"
quiet_powertools()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """With pytest-xdist (`make test` runs two workers), keep the tests that share a costly
    session fixture on one worker: the synthesized stack (tests/infra) and the local
    SparkSession (tests/spark) are built once, not once per worker."""
    for item in items:
        for folder in ("infra", "spark"):
            if f"tests/{folder}/" in item.nodeid:
                item.add_marker(pytest.mark.xdist_group(folder))


@pytest.fixture(scope="session")
def endpoint_url() -> Iterator[str]:
    aws = EmbeddedAWS()
    url = aws.start()
    yield url
    aws.stop()


@pytest.fixture
def aws(endpoint_url: str) -> AwsEnv:
    return make_env(endpoint_url)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()
