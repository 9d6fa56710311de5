"""The compaction mirror: one ``$compaction`` item per partition in the consumers table.

The lake table is the truth (``shardlog.lake.commit``: watermarks in the snapshot that
appended the records). These items only mirror it for status displays and the consumers
table's vocabulary: ``checkpoint`` is the next seq the table does not hold, or
``SHARD_END`` once an ENDED partition is all in the table. Compaction writes them after
its commit and never reads them back to decide anything. ``pendingCheckpoint`` (the redo
record of the Parquet-directory compaction) is read for old items and removed on write.

Every write is conditional on ``leaseCounter`` as it was read and increments it (the
fencing token of docs/TABLES.md), so two runs mirroring at once cannot interleave.
``_write`` is the only place that writes (through the tables' ``Update``, fenced by
``counter_fenced``), and a refused condition leaves it only as ``WatermarkConflictError``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from shardlog import constants as C
from shardlog.aws import Clients
from shardlog.spark.exceptions import WatermarkConflictError
from shardlog.tables import Update, consumer_key, from_ddb, s, update_item


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

    def mirror(self, mark: Watermark, next_seq: int, *, ended: bool = False) -> Watermark:
        """Set the item to the table's watermark (``SHARD_END`` when the partition is done)."""
        checkpoint = C.SHARD_END if ended else str(next_seq)
        return self._write(mark, ("#cp = :cp",), ("#pending",), {":cp": s(checkpoint)})

    def _write(
        self,
        mark: Watermark,
        sets: tuple[str, ...],
        removes: tuple[str, ...],
        values: dict[str, Any],
    ) -> Watermark:
        """The one write of the watermark: conditional, fenced by the counter as it was read."""
        update = Update(
            self.table_name,
            consumer_key(self.group, mark.partition_id),
            sets,
            removes,
            values=values,
        ).counter_fenced(mark.counter if mark.exists else None)
        outcome = update_item(self.clients, update)
        if not outcome.written or outcome.item is None:
            raise WatermarkConflictError(
                mark.partition_id,
                f"expected leaseCounter {mark.counter if mark.exists else 'absent'}",
            )
        return Watermark.from_item(outcome.item)
