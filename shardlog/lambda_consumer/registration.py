"""Registering a Lambda consumer group: the group is created, and its start position fixed
per partition, before its runner is ever woken (shardlog/consumer/creation.py).

On AWS a CloudFormation custom resource calls ``register`` at deploy (``Create``, and
``Update``, which changes nothing of an existing group and refuses another starting
position); locally `shardlog local up` calls it before the poller starts. The runner reads
nothing for a group that is not registered.
"""

from __future__ import annotations

from shardlog.aws import Clients
from shardlog.consumer.creation import LAMBDA, GroupCreator, GroupRecord
from shardlog.consumer.positions import StartPosition
from shardlog.lease import LeaseManager
from shardlog.reader import LogReader
from shardlog.tables import TableNames, Tables


def register(
    clients: Clients,
    group: str,
    start: StartPosition,
    *,
    bucket: str,
    names: TableNames,
    now_ms: int,
) -> GroupRecord:
    """Create the group at its starting position (or find it, created at the same one)."""
    creator = GroupCreator(
        clients,
        Tables(clients, names),
        LogReader(clients, bucket, names),
        LeaseManager(clients, names.consumers),
    )
    return creator.create(group, LAMBDA, start, now_ms, strict=True)
