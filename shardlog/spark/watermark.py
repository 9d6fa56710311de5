"""The compaction watermark: one ``$compaction`` item per partition in the consumers table.

``checkpoint`` is the next seq to compact (every record below it is in Parquet), or
``SHARD_END`` once an ENDED partition is fully compacted. ``pendingCheckpoint`` is the
end of the batch a run is writing: it is recorded *before* the Parquet files, so a run
that crashed between the files and the advance is redone over exactly the same records,
with exactly the same file names, whatever the log's head has become since.

Every write is conditional on ``leaseCounter`` as it was read and increments it (the
fencing token of docs/TABLES.md), so of two runs racing on one partition exactly one
moves the watermark. ``_conditional_update`` is the only place that writes, and a
``ConditionalCheckFailedException`` leaves it only as ``WatermarkConflictError``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from botocore.exceptions import ClientError

from shardlog import constants as C
from shardlog.aws import Clients
from shardlog.exceptions import aws_error_code
from shardlog.spark.exceptions import WatermarkConflictError
from shardlog.tables import consumer_key, from_ddb

_NAMES = {
    "#cp": C.ATTR_CHECKPOINT,
    "#pending": C.ATTR_PENDING_CHECKPOINT,
    "#counter": C.ATTR_LEASE_COUNTER,
}


@dataclass(frozen=True)
class Watermark:
    partition_id: str
    next_seq: int = 0
    pending_end: int | None = None
    counter: int = 0
    ended: bool = False
    exists: bool = False

    @classmethod
    def from_item(cls, raw: dict[str, Any]) -> Watermark:
        item = from_ddb(raw)
        checkpoint = item.get(C.ATTR_CHECKPOINT)
        pending = item.get(C.ATTR_PENDING_CHECKPOINT)
        ended = checkpoint == C.SHARD_END
        return cls(
            partition_id=item[C.ATTR_PARTITION_ID],
            next_seq=int(checkpoint) if checkpoint and not ended else 0,
            pending_end=int(pending) if pending is not None else None,
            counter=int(item.get(C.ATTR_LEASE_COUNTER, 0)),
            ended=ended,
            exists=True,
        )


class WatermarkStore:
    def __init__(
        self,
        clients: Clients,
        table_name: str = C.DEFAULT_CONSUMERS_TABLE,
        group: str = C.COMPACTION_GROUP,
    ) -> None:
        self.clients = clients
        self.table_name = table_name
        self.group = group

    def read(self, partition_id: str) -> Watermark:
        response = self.clients.dynamodb.get_item(
            TableName=self.table_name,
            Key=consumer_key(self.group, partition_id),
            ConsistentRead=True,
        )
        item = response.get("Item")
        return Watermark.from_item(item) if item else Watermark(partition_id)

    def read_all(self) -> dict[str, Watermark]:
        pages = self.clients.dynamodb.get_paginator("query").paginate(
            TableName=self.table_name,
            KeyConditionExpression="#g = :g",
            ExpressionAttributeNames={"#g": C.ATTR_CONSUMER_GROUP},
            ExpressionAttributeValues={":g": {"S": self.group}},
            ConsistentRead=True,
        )
        marks = [Watermark.from_item(i) for page in pages for i in page.get("Items", [])]
        return {m.partition_id: m for m in marks}

    def begin(self, mark: Watermark, end: int) -> Watermark:
        """Record the batch [next_seq, end) as being written (the redo record)."""
        if end <= mark.next_seq:
            raise ValueError(f"empty batch [{mark.next_seq}, {end})")
        written = self._write(
            mark,
            "SET #cp = :cp, #pending = :end",
            {":cp": {"S": str(mark.next_seq)}, ":end": {"N": str(end)}},
        )
        return replace(written, pending_end=end)

    def advance(self, mark: Watermark, *, ended: bool = False) -> Watermark:
        """Move the watermark to the pending end (``SHARD_END`` when the partition is done)."""
        if mark.pending_end is None:
            raise ValueError(f"{mark.partition_id}: no batch to commit")
        checkpoint = C.SHARD_END if ended else str(mark.pending_end)
        return self._write(mark, "SET #cp = :cp REMOVE #pending", {":cp": {"S": checkpoint}})

    def mark_ended(self, mark: Watermark) -> Watermark:
        """An ENDED partition with nothing left to compact: never look at it again."""
        return self._write(mark, "SET #cp = :cp", {":cp": {"S": C.SHARD_END}})

    def _write(self, mark: Watermark, expression: str, values: dict[str, Any]) -> Watermark:
        if mark.exists:
            condition = "#counter = :seen"
            values = {**values, ":seen": {"N": str(mark.counter)}}
        else:
            condition = "attribute_not_exists(#counter)"
        set_clause, _, remove_clause = expression.partition(" REMOVE ")
        update = f"{set_clause}, #counter = if_not_exists(#counter, :zero) + :one"
        if remove_clause:
            update += f" REMOVE {remove_clause}"
        request = {
            "TableName": self.table_name,
            "Key": consumer_key(self.group, mark.partition_id),
            "UpdateExpression": update,
            "ConditionExpression": condition,
            "ExpressionAttributeNames": {
                k: v for k, v in _NAMES.items() if k in f"{update} {condition}"
            },
            "ExpressionAttributeValues": {**values, ":zero": {"N": "0"}, ":one": {"N": "1"}},
        }
        return _conditional_update(self.clients, request, mark)


def _conditional_update(clients: Clients, request: dict[str, Any], mark: Watermark) -> Watermark:
    """The one write of the watermark: conditional, fenced by the counter as it was read."""
    try:
        response = clients.dynamodb.update_item(**request, ReturnValues="ALL_NEW")
    except ClientError as exc:
        if aws_error_code(exc) != "ConditionalCheckFailedException":
            raise
        raise WatermarkConflictError(
            mark.partition_id, f"expected leaseCounter {mark.counter if mark.exists else 'absent'}"
        ) from exc
    return Watermark.from_item(response["Attributes"])
