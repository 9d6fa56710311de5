"""Shared fixtures: one embedded AWS (moto server on 127.0.0.1) per test session,
fresh uniquely named resources per test, an injectable clock."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from shardlog.aws import Clients, RequestCounter
from shardlog.clock import ManualClock
from shardlog.config import ShardlogConfig
from shardlog.local.embedded import EmbeddedAWS, provision

# Never reach real AWS from a test, whatever the developer's environment holds.
for _name in ("AWS_PROFILE", "AWS_SESSION_TOKEN"):
    os.environ.pop(_name, None)
os.environ["AWS_ACCESS_KEY_ID"] = "testing"
os.environ["AWS_SECRET_ACCESS_KEY"] = "testing"
os.environ.setdefault("POWERTOOLS_METRICS_DISABLED", "true")
os.environ.setdefault("POWERTOOLS_TRACE_DISABLED", "true")
os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "WARNING")


@dataclass
class AwsEnv:
    config: ShardlogConfig
    clients: Clients
    requests: RequestCounter

    def fresh_clients(self) -> Clients:
        """Another client set (another 'process') against the same resources."""
        return self.config.clients()


@pytest.fixture(scope="session")
def endpoint_url() -> Iterator[str]:
    aws = EmbeddedAWS()
    url = aws.start()
    yield url
    aws.stop()


def unique_config(endpoint_url: str | None = None) -> ShardlogConfig:
    """Resource names no other test uses: moto's state is global to the process, so two
    embedded servers in one test run share it."""
    suffix = uuid.uuid4().hex[:10]
    return ShardlogConfig(
        stream_name=f"stream-{suffix}",
        bucket=f"shardlog-test-{suffix}",
        partitions_table=f"partitions-{suffix}",
        consumers_table=f"consumers-{suffix}",
        endpoint_url=endpoint_url,
    )


def make_env(endpoint_url: str, shard_count: int = 2) -> AwsEnv:
    config = unique_config(endpoint_url)
    clients = config.clients()
    provision(clients, config, shard_count)
    return AwsEnv(config, clients, RequestCounter().attach(clients))


@pytest.fixture
def aws(endpoint_url: str) -> AwsEnv:
    return make_env(endpoint_url)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()
