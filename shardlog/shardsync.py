"""Shard sync: ListShards into the partitions table.

Records lineage (parents, hash ranges) for every shard, moves a partition to
CLOSED when Kinesis closed its shard, and to ENDED once every record of the
closed shard is committed: the ingest checkpoint reached EndingSequenceNumber,
or (since AWS's EndingSequenceNumber is a range bound, not always a record) a
read after the checkpoint finds the end of the shard with no record left.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from botocore.exceptions import ClientError

from shardlog import constants as C
from shardlog.aws import Clients
from shardlog.exceptions import aws_error_code
from shardlog.tables import PartitionInfo, TableNames, Tables, kinesis_seq_int, partition_key

_END_PROBE_CALLS = 5


@dataclass
class SyncResult:
    created: list[str] = field(default_factory=list)
    closed: list[str] = field(default_factory=list)
    ended: list[str] = field(default_factory=list)
    shards: int = 0


def list_shards(kinesis: Any, stream_name: str) -> list[dict[str, Any]]:
    shards: list[dict[str, Any]] = []
    response = kinesis.list_shards(StreamName=stream_name)
    while True:
        shards.extend(response["Shards"])
        token = response.get("NextToken")
        if not token:
            return shards
        response = kinesis.list_shards(NextToken=token)


def parents_of(shard: dict[str, Any]) -> tuple[str, ...]:
    return tuple(p for p in (shard.get("ParentShardId"), shard.get("AdjacentParentShardId")) if p)


class ShardSync:
    def __init__(
        self, clients: Clients, stream_name: str, tables: TableNames | None = None
    ) -> None:
        self.clients = clients
        self.stream_name = stream_name
        self.tables = Tables(clients, tables)

    def sync(self) -> SyncResult:
        result = SyncResult()
        shards = list_shards(self.clients.kinesis, self.stream_name)
        known = {p.partition_id: p for p in self.tables.list_partitions()}
        result.shards = len(shards)
        for shard in shards:
            shard_id = shard["ShardId"]
            ending = shard["SequenceNumberRange"].get("EndingSequenceNumber")
            partition = known.get(shard_id)
            if partition is None or partition.starting_hash_key is None:
                if self._record_lineage(shard, exists=partition is not None):
                    result.created.append(shard_id)
                partition = self.tables.get_partition(shard_id)
                assert partition is not None
            if ending is not None and partition.state == C.STATE_OPEN:
                self._update_state(shard_id, C.STATE_OPEN, C.STATE_CLOSED, ending)
                result.closed.append(shard_id)
                partition = replace(partition, state=C.STATE_CLOSED, ending_kinesis_seq=ending)
            if partition.state == C.STATE_CLOSED and self._fully_ingested(partition):
                self._update_state(shard_id, C.STATE_CLOSED, C.STATE_ENDED)
                result.ended.append(shard_id)
        return result

    def _record_lineage(self, shard: dict[str, Any], *, exists: bool) -> bool:
        """Create the partition item, or add lineage to one the writer created first."""
        hash_range = shard["HashKeyRange"]
        ranges = shard["SequenceNumberRange"]
        values: dict[str, Any] = {
            ":parents": {"L": [{"S": p} for p in parents_of(shard)]},
            ":start": {"S": hash_range["StartingHashKey"]},
            ":end": {"S": hash_range["EndingHashKey"]},
            ":kstart": {"S": ranges["StartingSequenceNumber"]},
            ":zero": {"N": "0"},
            ":open": {"S": C.STATE_OPEN},
        }
        self.clients.dynamodb.update_item(
            TableName=self.tables.names.partitions,
            Key=partition_key(shard["ShardId"]),
            UpdateExpression=(
                "SET #parents = :parents, #hstart = :start, #hend = :end, "
                "#kstart = if_not_exists(#kstart, :kstart), "
                "#next = if_not_exists(#next, :zero), #state = if_not_exists(#state, :open)"
            ),
            ExpressionAttributeNames={
                "#parents": C.ATTR_PARENT_PARTITION_IDS,
                "#hstart": C.ATTR_STARTING_HASH_KEY,
                "#hend": C.ATTR_ENDING_HASH_KEY,
                "#kstart": C.ATTR_STARTING_KINESIS_SEQ,
                "#next": C.ATTR_NEXT_SEQUENCE_NUMBER,
                "#state": C.ATTR_STATE,
            },
            ExpressionAttributeValues=values,
        )
        return not exists

    def _update_state(
        self, shard_id: str, expected: str, new: str, ending: str | None = None
    ) -> None:
        sets = "#state = :new" + (", #ending = :ending" if ending is not None else "")
        values: dict[str, Any] = {":new": {"S": new}, ":expected": {"S": expected}}
        names = {"#state": C.ATTR_STATE}
        if ending is not None:
            values[":ending"] = {"S": ending}
            names["#ending"] = C.ATTR_ENDING_KINESIS_SEQ
        try:
            self.clients.dynamodb.update_item(
                TableName=self.tables.names.partitions,
                Key=partition_key(shard_id),
                UpdateExpression="SET " + sets,
                ConditionExpression="#state = :expected",
                ExpressionAttributeNames=names,
                ExpressionAttributeValues=values,
            )
        except ClientError as exc:
            # Another sync (or the writer's commit) moved the state first: fine.
            if aws_error_code(exc) != "ConditionalCheckFailedException":
                raise

    def _fully_ingested(self, partition: PartitionInfo) -> bool:
        lease = self.tables.get_lease(C.INGEST_GROUP, partition.partition_id)
        checkpoint = lease.checkpoint if lease else None
        if partition.ending_kinesis_seq is not None and kinesis_seq_int(
            checkpoint
        ) >= kinesis_seq_int(partition.ending_kinesis_seq):
            return True
        return self._nothing_after(partition.partition_id, checkpoint)

    def _nothing_after(self, shard_id: str, checkpoint: str | None) -> bool:
        """True when reading the closed shard after the checkpoint reaches its end empty."""
        kinesis = self.clients.kinesis
        kwargs: dict[str, Any] = {"StreamName": self.stream_name, "ShardId": shard_id}
        if checkpoint is None:
            kwargs["ShardIteratorType"] = "TRIM_HORIZON"
        else:
            kwargs["ShardIteratorType"] = "AFTER_SEQUENCE_NUMBER"
            kwargs["StartingSequenceNumber"] = checkpoint
        iterator = kinesis.get_shard_iterator(**kwargs).get("ShardIterator")
        for _ in range(_END_PROBE_CALLS):
            if iterator is None:
                return True
            response = kinesis.get_records(ShardIterator=iterator, Limit=1)
            if response.get("Records"):
                return False
            iterator = response.get("NextShardIterator")
        return iterator is None
