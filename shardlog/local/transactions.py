"""Cancel moto's DynamoDB transactions in place, item by item.

DynamoDB's TransactWriteItems applies all of its writes or none, and a cancelled transaction
leaves no record in the table's stream. moto gets "none" by deep-copying, before every
transaction, each table the transaction names, and by putting the copies in the tables'
place when it is cancelled. That has two costs:

- **Time that grows with the run.** The copy includes every item of the table and every
  record its stream ever had (moto keeps them all), so each commit costs more the longer the
  embedded AWS runs: after a few hundred ingest batches, the copy was a fifth of a batch.
- **A stream that goes stale.** After a cancelled transaction the table is a new object with
  a new stream shard, but an iterator opened before it keeps reading the old shard: it gets
  the cancelled writes (which DynamoDB never streams), then nothing more, ever. A local
  DynamoDB-stream event source (the Lambda consumers' waker) stops waking.

``apply()`` keeps moto's transaction code and changes only its undo: before the transaction
it copies just the items the transaction names (at most 100) and notes the length of each
touched table's stream; tables are no longer copied. If the transaction fails, those items are
put back and the stream records it added are removed, in the same objects. DynamoDB requests
are serialized (``conditional_writes``), and so are DynamoDB Streams requests, under the same
lock, so no reader sees the state in between.
"""

from __future__ import annotations

import copy
import functools
import threading
from collections.abc import Callable
from typing import Any

import moto.dynamodb.models as dynamodb_models
from moto.dynamodb.models import DynamoDBBackend
from moto.dynamodb.models.dynamo_type import DynamoType
from moto.dynamodb.models.table import Table

_applied = False
_apply_lock = threading.Lock()
_in_transaction = threading.local()


class _CopyTablesByReference:
    """moto's ``copy`` module for its DynamoDB models: inside a transaction a table's
    "backup" is the table itself (``_Undo`` keeps what is needed); everything else is the
    standard library's."""

    def __getattr__(self, name: str) -> Any:
        return getattr(copy, name)

    @staticmethod
    def deepcopy(value: Any, memo: dict[int, Any] | None = None) -> Any:
        if isinstance(value, Table) and getattr(_in_transaction, "undo", None) is not None:
            return value
        return copy.deepcopy(value, memo)


class _Undo:
    """What a transaction can change: the items it names, and its tables' streams."""

    def __init__(self) -> None:
        self.items: list[tuple[Table, DynamoType, DynamoType | None, Any]] = []
        self.streams: list[tuple[Any, list[Any], int]] = []

    @classmethod
    def of(cls, backend: DynamoDBBackend, transact_items: list[dict[str, Any]]) -> _Undo | None:
        """None when an entry is not well formed: moto's own path (copies) reports it."""
        undo = cls()
        seen: set[int] = set()
        try:
            for entry in transact_items:
                op = next(iter(entry.values()))
                table = backend.tables.get(op.get("TableName"))
                if table is None:
                    continue  # moto cancels the transaction for it; nothing here changes
                key = op["Item"] if "Item" in op else op["Key"]
                hash_value = DynamoType(key[table.hash_key_attr])
                range_value = (
                    DynamoType(key[table.range_key_attr]) if table.range_key_attr else None
                )
                current = table.get_item(hash_value, range_value)
                undo.items.append((table, hash_value, range_value, copy.deepcopy(current)))
                shard = table.stream_shard
                if shard is not None and id(table) not in seen:
                    undo.streams.append((shard, shard.items, len(shard.items)))
                seen.add(id(table))
        except (KeyError, TypeError, AttributeError, StopIteration, ValueError):
            return None
        return undo

    def restore(self) -> None:
        for table, hash_value, range_value, old in reversed(self.items):
            if range_value is None:
                if old is None:
                    table.items.pop(hash_value, None)
                else:
                    table.items[hash_value] = old
                continue
            rows = table.items.get(hash_value)
            if old is not None:
                table.items[hash_value][range_value] = old
            elif rows is not None:
                rows.pop(range_value, None)
                if not rows:
                    del table.items[hash_value]
        for shard, records, length in self.streams:
            if shard.items is records:  # moto swaps the list only for Lambda mappings
                del records[length:]


def _undone_in_place(transact: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(transact)
    def transact_write_items(self: DynamoDBBackend, transact_items: list[dict[str, Any]]) -> Any:
        undo = _Undo.of(self, transact_items)
        if undo is None:
            return transact(self, transact_items)
        _in_transaction.undo = undo
        try:
            return transact(self, transact_items)
        except BaseException:
            undo.restore()
            raise
        finally:
            _in_transaction.undo = None

    return transact_write_items


def apply() -> None:
    """Install the in-place undo (idempotent)."""
    global _applied
    with _apply_lock:
        if _applied:
            return
        dynamodb_models.copy = _CopyTablesByReference()  # type: ignore[assignment]
        DynamoDBBackend.transact_write_items = _undone_in_place(  # type: ignore[method-assign]
            DynamoDBBackend.transact_write_items
        )
        _applied = True
