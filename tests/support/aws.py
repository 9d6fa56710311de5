"""One test's view of the embedded AWS: a config with unique resource names, its clients,
and a counter of every request they send."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from shardlog.aws import Clients, RequestCounter
from shardlog.config import ShardlogConfig
from shardlog.local.embedded import provision


@dataclass
class AwsEnv:
    config: ShardlogConfig
    clients: Clients
    requests: RequestCounter

    def fresh_clients(self) -> Clients:
        """Another client set (another 'process') against the same resources."""
        return self.config.clients()


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
    """Fresh stream, tables and bucket on the embedded AWS."""
    config = unique_config(endpoint_url)
    clients = config.clients()
    provision(clients, config, shard_count)
    return AwsEnv(config, clients, RequestCounter().attach(clients))


def stream_env(endpoint_url: str, shard_count: int = 2) -> AwsEnv:
    """A fresh stream only (the producer API needs no table or bucket): quicker than make_env."""
    config = ShardlogConfig(stream_name=f"api-{uuid.uuid4().hex[:12]}", endpoint_url=endpoint_url)
    clients = config.clients()
    clients.kinesis.create_stream(StreamName=config.stream_name, ShardCount=shard_count)
    clients.kinesis.get_waiter("stream_exists").wait(
        StreamName=config.stream_name, WaiterConfig={"Delay": 0.05, "MaxAttempts": 200}
    )
    return AwsEnv(config, clients, RequestCounter().attach(clients))
