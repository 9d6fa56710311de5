"""Shard sync: ListShards into the partitions table.

Records lineage (parents, hash ranges) for every shard, moves a partition to
CLOSED when Kinesis closed its shard, and to ENDED once every record of the
closed shard is committed: the ingest checkpoint reached EndingSequenceNumber,
or (since AWS's EndingSequenceNumber is a range bound, not always a record) a
read after the checkpoint finds the end of the shard with no record left.

It reads the live set only (shardlog/retirement.py): one Query of the live index, and by
key each listed shard the index does not show (a new shard, or a retired one still in
Kinesis's retention: skipped, it is done for everyone). Its last step is a retirement pass.

Its writes are shardlog/dal/partitions.py's (``record_lineage``, ``close``, ``end``,
``retire``).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from shardlog import constants as C
from shardlog.aws import Clients
from shardlog.dal.partitions import PartitionsTable
from shardlog.partitions import PartitionState, reaches_end
from shardlog.retirement import Retirement
from shardlog.tables import PartitionInfo, TableNames, Tables

_END_PROBE_CALLS = 5


@dataclass
class SyncResult:
    created: list[str] = field(default_factory=list)
    closed: list[str] = field(default_factory=list)
    ended: list[str] = field(default_factory=list)
    retired: list[str] = field(default_factory=list)
    shards: int = 0


def list_shards(kinesis: Any, stream: str) -> list[dict[str, Any]]:
    """Every shard of the stream (its name, or its ARN as a Kinesis event names it), open
    and closed, through every page."""
    shards: list[dict[str, Any]] = []
    named = {"StreamARN": stream} if stream.startswith("arn:") else {"StreamName": stream}
    response = kinesis.list_shards(**named)
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
        self,
        clients: Clients,
        stream_name: str,
        tables: TableNames | None = None,
        *,
        retirement: Retirement | None = None,
    ) -> None:
        self.clients = clients
        self.stream_name = stream_name
        self.tables = Tables(clients, tables)
        self.partitions = PartitionsTable(clients, tables)
        self.retirement = retirement or Retirement(clients, tables)

    def sync(self) -> SyncResult:
        result = SyncResult()
        shards = list_shards(self.clients.kinesis, self.stream_name)
        known = {p.partition_id: p for p in self.tables.live_partitions()}
        result.shards = len(shards)
        for shard in shards:
            shard_id = shard["ShardId"]
            ending = shard["SequenceNumberRange"].get("EndingSequenceNumber")
            partition = known.get(shard_id)
            unindexed = False
            if partition is None:  # new, retired, or an item written before the index
                partition = self.tables.get_partition(shard_id)
                if partition is not None and partition.retired:
                    continue  # done for everyone: history, not work
                unindexed = partition is not None
            if partition is None or partition.starting_hash_key is None or unindexed:
                if self._record_lineage(shard, exists=partition is not None):
                    result.created.append(shard_id)
                partition = self.tables.get_partition(shard_id)
                assert partition is not None
            if ending is not None and partition.state == PartitionState.OPEN:
                # False: another sync closed it first; either way it is CLOSED now.
                self.partitions.close(shard_id, ending)
                result.closed.append(shard_id)
                partition = replace(
                    partition, state=PartitionState.CLOSED, ending_kinesis_seq=ending
                )
            if partition.state == PartitionState.CLOSED and self._fully_ingested(partition):
                self.partitions.end(shard_id)
                result.ended.append(shard_id)
        result.retired = self.retirement.run().retired
        return result

    def _record_lineage(self, shard: dict[str, Any], *, exists: bool) -> bool:
        """Create the partition item, or add lineage to one the writer created first."""
        hash_range = shard["HashKeyRange"]
        self.partitions.record_lineage(
            shard["ShardId"],
            parents_of(shard),
            hash_range["StartingHashKey"],
            hash_range["EndingHashKey"],
            shard["SequenceNumberRange"]["StartingSequenceNumber"],
        )
        return not exists

    def _fully_ingested(self, partition: PartitionInfo) -> bool:
        lease = self.tables.get_lease(C.INGEST_GROUP, partition.partition_id)
        checkpoint = lease.checkpoint if lease else None
        if reaches_end(partition, checkpoint):
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
