"""The partitions and consumers tables: item shapes and plain reads.

docs/TABLES.md describes every attribute. Conditional writes live with the logic
that owns them (lease.py, writer.py, shardsync.py); this module only reads.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from boto3.dynamodb.types import TypeDeserializer

from shardlog import constants as C
from shardlog.aws import Clients

_DESERIALIZER = TypeDeserializer()


def from_ddb(item: dict[str, Any]) -> dict[str, Any]:
    return {name: _DESERIALIZER.deserialize(value) for name, value in item.items()}


def kinesis_seq_int(value: str | None) -> int:
    """Kinesis sequence numbers are decimal strings of up to 128 digits: compare as ints."""
    return -1 if value is None else int(value)


@dataclass(frozen=True)
class TableNames:
    partitions: str = C.DEFAULT_PARTITIONS_TABLE
    consumers: str = C.DEFAULT_CONSUMERS_TABLE


@dataclass(frozen=True)
class PartitionInfo:
    partition_id: str
    next_seq: int = 0
    state: str = C.STATE_OPEN
    parents: tuple[str, ...] = ()
    starting_hash_key: str | None = None
    ending_hash_key: str | None = None
    starting_kinesis_seq: str | None = None
    ending_kinesis_seq: str | None = None
    last_committed_at_ms: int | None = None
    segment_count: int = 0
    committed_bytes: int = 0

    @classmethod
    def from_item(cls, raw: dict[str, Any]) -> PartitionInfo:
        item = from_ddb(raw)

        def opt_int(name: str) -> int | None:
            return int(item[name]) if name in item else None

        return cls(
            partition_id=item[C.ATTR_PARTITION_ID],
            next_seq=int(item.get(C.ATTR_NEXT_SEQUENCE_NUMBER, 0)),
            state=item.get(C.ATTR_STATE, C.STATE_OPEN),
            parents=tuple(item.get(C.ATTR_PARENT_PARTITION_IDS, ())),
            starting_hash_key=item.get(C.ATTR_STARTING_HASH_KEY),
            ending_hash_key=item.get(C.ATTR_ENDING_HASH_KEY),
            starting_kinesis_seq=item.get(C.ATTR_STARTING_KINESIS_SEQ),
            ending_kinesis_seq=item.get(C.ATTR_ENDING_KINESIS_SEQ),
            last_committed_at_ms=opt_int(C.ATTR_LAST_COMMITTED_AT),
            segment_count=int(item.get(C.ATTR_SEGMENT_COUNT, 0)),
            committed_bytes=int(item.get(C.ATTR_COMMITTED_BYTES, 0)),
        )


@dataclass(frozen=True)
class Lease:
    """One consumers-table item: a group's lease and checkpoint on one partition."""

    group: str
    partition_id: str
    owner: str | None = None
    counter: int = 0
    expires_at_ms: int = 0
    checkpoint: str | None = None
    checkpoint_subseq: int | None = None
    owner_switches: int = 0
    parents: tuple[str, ...] = ()

    @classmethod
    def from_item(cls, raw: dict[str, Any]) -> Lease:
        item = from_ddb(raw)
        subseq = item.get(C.ATTR_CHECKPOINT_SUBSEQ)
        return cls(
            group=item[C.ATTR_CONSUMER_GROUP],
            partition_id=item[C.ATTR_PARTITION_ID],
            owner=item.get(C.ATTR_LEASE_OWNER),
            counter=int(item.get(C.ATTR_LEASE_COUNTER, 0)),
            expires_at_ms=int(item.get(C.ATTR_LEASE_EXPIRES_AT, 0)),
            checkpoint=item.get(C.ATTR_CHECKPOINT),
            checkpoint_subseq=int(subseq) if subseq is not None else None,
            owner_switches=int(item.get(C.ATTR_OWNER_SWITCHES, 0)),
            parents=tuple(item.get(C.ATTR_PARENT_PARTITION_IDS, ())),
        )

    def is_live(self, now_ms: int) -> bool:
        return self.owner is not None and self.expires_at_ms > now_ms


def partition_key(partition_id: str) -> dict[str, Any]:
    return {C.ATTR_PARTITION_ID: {"S": partition_id}}


def consumer_key(group: str, partition_id: str) -> dict[str, Any]:
    return {C.ATTR_CONSUMER_GROUP: {"S": group}, C.ATTR_PARTITION_ID: {"S": partition_id}}


class Tables:
    """Reads of both tables."""

    def __init__(self, clients: Clients, names: TableNames | None = None) -> None:
        self.clients = clients
        self.names = names or TableNames()

    def get_partition(self, partition_id: str) -> PartitionInfo | None:
        response = self.clients.dynamodb.get_item(
            TableName=self.names.partitions, Key=partition_key(partition_id), ConsistentRead=True
        )
        item = response.get("Item")
        return PartitionInfo.from_item(item) if item else None

    def list_partitions(self) -> list[PartitionInfo]:
        paginator = self.clients.dynamodb.get_paginator("scan")
        partitions = [
            PartitionInfo.from_item(item)
            for page in paginator.paginate(TableName=self.names.partitions, ConsistentRead=True)
            for item in page.get("Items", [])
        ]
        return sorted(partitions, key=lambda p: p.partition_id)

    def get_lease(self, group: str, partition_id: str) -> Lease | None:
        response = self.clients.dynamodb.get_item(
            TableName=self.names.consumers,
            Key=consumer_key(group, partition_id),
            ConsistentRead=True,
        )
        item = response.get("Item")
        return Lease.from_item(item) if item else None

    def list_leases(self, group: str) -> list[Lease]:
        paginator = self.clients.dynamodb.get_paginator("query")
        pages = paginator.paginate(
            TableName=self.names.consumers,
            KeyConditionExpression="#g = :g",
            ExpressionAttributeNames={"#g": C.ATTR_CONSUMER_GROUP},
            ExpressionAttributeValues={":g": {"S": group}},
            ConsistentRead=True,
        )
        return [Lease.from_item(item) for page in pages for item in page.get("Items", [])]
