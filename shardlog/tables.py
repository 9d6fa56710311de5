"""The partitions and consumers tables: item shapes, reads, and the one way to write them.

The base of the data-access layer (shardlog/dal/__init__.py): docs/TABLES.md describes every
attribute. Every conditional write is an ``Update`` built in the layer and sent with
``update_item``, and only ``is_conditional_failure`` (``cancelled_items`` for a transaction)
decides that DynamoDB refused a condition; the layer turns that refusal into an outcome or
a domain error, so a ``ConditionalCheckFailedException`` never leaks past it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from boto3.dynamodb.types import TypeDeserializer
from botocore.exceptions import ClientError

from shardlog import constants as C
from shardlog.aws import Clients
from shardlog.exceptions import CONDITIONAL_CHECK_FAILED, ShardlogError, aws_error_code

_DESERIALIZER = TypeDeserializer()

# Graceful lease handoff (consumer groups, docs/TABLES.md 4.5): the worker that asked the
# owner to hand the lease over, and when it asked (its clock, epoch ms). Neither is a lease
# write: asking never moves leaseCounter, so it never fences the owner.
ATTR_TRANSFER_REQUESTED_BY: Final = "leaseTransferRequestedBy"
ATTR_TRANSFER_REQUESTED_AT: Final = "leaseTransferRequestedAt"

# A group seek (`shardlog group seek`, docs/TABLES.md 8.1), on the group's "$group" item: the
# seek in progress (its lock: who, until when, epoch ms) and the record of the last one done.
ATTR_SEEK_OWNER: Final = "seekOwner"
ATTR_SEEK_EXPIRES_AT: Final = "seekExpiresAt"
ATTR_LAST_SEEK_AT: Final = "lastSeekAt"  # epoch ms
ATTR_LAST_SEEK_POSITION: Final = "lastSeekPosition"  # StartPosition.describe()
ATTR_LAST_SEEK_BY: Final = "lastSeekBy"
ATTR_LAST_SEEK_POSITIONS: Final = "lastSeekPositions"  # JSON: partition -> checkpoint set


TRANSACTION_CANCELED: Final = "TransactionCanceledException"
# The cancellation reason of a transaction item whose condition did not hold.
CONDITION_FAILED_REASON: Final = "ConditionalCheckFailed"


def is_conditional_failure(exc: BaseException) -> bool:
    """DynamoDB refused a write because its condition did not hold (and wrote nothing)."""
    return aws_error_code(exc) == CONDITIONAL_CHECK_FAILED


def cancelled_items(exc: BaseException) -> list[bool] | None:
    """For a transaction DynamoDB cancelled, per item: did its condition fail?
    None when ``exc`` is not a cancelled transaction."""
    if aws_error_code(exc) != TRANSACTION_CANCELED:
        return None
    response: Any = getattr(exc, "response", {})
    reasons = response.get("CancellationReasons", [])
    return [r.get("Code") == CONDITION_FAILED_REASON for r in reasons]


def n(value: int) -> dict[str, str]:
    """A DynamoDB number value."""
    return {"N": str(value)}


def s(value: str) -> dict[str, str]:
    """A DynamoDB string value."""
    return {"S": value}


def from_ddb(item: dict[str, Any]) -> dict[str, Any]:
    return {name: _DESERIALIZER.deserialize(value) for name, value in item.items()}


def put_items(clients: Any, table: str, items: list[dict[str, Any]]) -> None:
    """Unconditional puts, 25 to a BatchWriteItem (its limit), unprocessed ones sent again:
    fixtures of history (benchmarks, budget tests), never a protocol's write."""
    for start in range(0, len(items), 25):
        pending = {table: [{"PutRequest": {"Item": i}} for i in items[start : start + 25]]}
        for _ in range(8):
            response = clients.dynamodb.batch_write_item(RequestItems=pending)
            pending = response.get("UnprocessedItems") or {}
            if not pending:
                break


def put_new_consumer_item(clients: Any, table: str, item: dict[str, Any]) -> bool:
    """Put a consumers-table item only if none stands at its key; False when one does."""
    try:
        clients.dynamodb.put_item(
            TableName=table,
            Item=item,
            ConditionExpression="attribute_not_exists(#g)",
            ExpressionAttributeNames={"#g": C.ATTR_CONSUMER_GROUP},
        )
    except ClientError as exc:
        if not is_conditional_failure(exc):
            raise
        return False
    return True


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
    trim_horizon: int = 0  # below it the log answers "trimmed" (shardlog/retention.py)
    trim_tagged: int = 0  # segments below it carry the expiry tag
    retired: bool = False  # out of the live set: done for every group and the lake
    live_revision: int = 0  # revivals so far (a retirement is conditional on it)
    indexed: bool = True  # carries ``live`` (False: retired, or written before the index)

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
            trim_horizon=int(item.get(C.ATTR_TRIM_HORIZON, 0)),
            trim_tagged=int(item.get(C.ATTR_TRIM_TAGGED, 0)),
            retired=C.ATTR_RETIRED_AT in item and C.ATTR_LIVE not in item,
            live_revision=int(item.get(C.ATTR_LIVE_REVISION, 0)),
            indexed=C.ATTR_LIVE in item,
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
    transfer_requested_by: str | None = None  # a worker asked for a graceful handoff
    transfer_requested_at_ms: int | None = None
    window_end_ms: int | None = None  # a Lambda group's open tumbling window: its end
    # The whole item as read or written (deserialised): a Lambda group's lane progress is
    # read from the item its runner's take returned (shardlog/dal/consumers.py).
    item: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def from_item(cls, raw: dict[str, Any]) -> Lease:
        item = from_ddb(raw)
        subseq = item.get(C.ATTR_CHECKPOINT_SUBSEQ)
        requested_at = item.get(ATTR_TRANSFER_REQUESTED_AT)
        window = item.get(C.ATTR_WINDOW_STATE)
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
            transfer_requested_by=item.get(ATTR_TRANSFER_REQUESTED_BY),
            transfer_requested_at_ms=int(requested_at) if requested_at is not None else None,
            window_end_ms=int(window["end"]) if window is not None else None,
            item=item,
        )

    def is_live(self, now_ms: int) -> bool:
        return self.owner is not None and self.expires_at_ms > now_ms


def partition_key(partition_id: str) -> dict[str, Any]:
    return {C.ATTR_PARTITION_ID: {"S": partition_id}}


def consumer_key(group: str, partition_id: str) -> dict[str, Any]:
    return {C.ATTR_CONSUMER_GROUP: {"S": group}, C.ATTR_PARTITION_ID: {"S": partition_id}}


@dataclass(frozen=True)
class LiveLineage:
    """What a hot path reads: ``live`` (the partitions to act on) and ``known`` (those and
    their parents out of the live set, for parents-before-children checks)."""

    live: list[PartitionInfo]
    known: dict[str, PartitionInfo]


_BATCH_GET_MAX = 100  # keys per BatchGetItem (DynamoDB's limit)
_BATCH_GET_ROUNDS = 8  # rounds of UnprocessedKeys before giving up (bounded)


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

    def live_partitions(self) -> list[PartitionInfo]:
        """The live set: the partitions not retired (shardlog/retirement.py), by one Query of
        the sparse index, whatever the history. The index is eventually consistent: a state
        read here may lag, never run ahead (every state change is one way)."""
        paginator = self.clients.dynamodb.get_paginator("query")
        pages = paginator.paginate(
            TableName=self.names.partitions,
            IndexName=C.LIVE_INDEX,
            KeyConditionExpression="#live = :live",
            ExpressionAttributeNames={"#live": C.ATTR_LIVE},
            ExpressionAttributeValues={":live": {"S": C.LIVE_VALUE}},
        )
        partitions = [PartitionInfo.from_item(i) for page in pages for i in page.get("Items", [])]
        return sorted(partitions, key=lambda p: p.partition_id)

    def live_lineage(self) -> LiveLineage:
        """The live set, and (consistent reads) every parent of it the index does not show:
        a retired parent (done for everyone), or one the index has not caught up with yet,
        which must not pass for done."""
        live = self.live_partitions()
        by_id = {p.partition_id: p for p in live}
        absent = sorted({q for p in live for q in p.parents} - set(by_id))
        items = self._batch_get(self.names.partitions, [partition_key(q) for q in absent])
        parents = {p.partition_id: p for p in map(PartitionInfo.from_item, items)}
        return LiveLineage(live, {**parents, **by_id})

    def leases_on(self, group: str, partition_ids: Iterable[str]) -> dict[str, Lease]:
        """The group's lease items on these partitions (consistent reads, 100 a request):
        what a hot path needs, without reading the leases of retired partitions."""
        keys = [consumer_key(group, pid) for pid in sorted(set(partition_ids))]
        leases = map(Lease.from_item, self._batch_get(self.names.consumers, keys))
        return {lease.partition_id: lease for lease in leases}

    def group_view(
        self, group: str, *, history: bool = False
    ) -> tuple[LiveLineage, dict[str, Lease]]:
        """What a status reads of a group: the live set (``history``: every partition, one
        Scan, and the group's every lease) and the group's leases on them."""
        if history:
            every = self.list_partitions()
            leases = {lease.partition_id: lease for lease in self.list_leases(group)}
            return LiveLineage(every, {p.partition_id: p for p in every}), leases
        lineage = self.live_lineage()
        if not lineage.known:  # no key to read: still ask the table, so a missing one says so
            self.clients.dynamodb.query(
                TableName=self.names.consumers,
                KeyConditionExpression="#g = :g",
                ExpressionAttributeNames={"#g": C.ATTR_CONSUMER_GROUP},
                ExpressionAttributeValues={":g": {"S": group}},
                Limit=1,
            )
        return lineage, self.leases_on(group, lineage.known)

    def _batch_get(self, table: str, keys: list[dict[str, Any]]) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        for start in range(0, len(keys), _BATCH_GET_MAX):
            pending: dict[str, Any] = {
                table: {"Keys": keys[start : start + _BATCH_GET_MAX], "ConsistentRead": True}
            }
            for _ in range(_BATCH_GET_ROUNDS):
                response = self.clients.dynamodb.batch_get_item(RequestItems=pending)
                items += response.get("Responses", {}).get(table, [])
                pending = response.get("UnprocessedKeys") or {}
                if not pending:
                    break
            if pending:
                raise ShardlogError(
                    f"BatchGetItem on {table}: keys still unprocessed after "
                    f"{_BATCH_GET_ROUNDS} rounds (throttled); nothing was decided from them"
                )
        return items

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
        items = (item for page in pages for item in page.get("Items", []))
        # Items whose partitionId starts with "$" describe the group itself (e.g. "$group",
        # written by a Lambda consumer group); they are not leases on partitions.
        return [
            Lease.from_item(item)
            for item in items
            if not item[C.ATTR_PARTITION_ID]["S"].startswith(C.GROUP_ITEM_PREFIX)
        ]


# --- writes --------------------------------------------------------------------------------
# Every attribute of both tables, by the placeholder update expressions use for it.
PLACEHOLDERS: Final = {
    "#owner": C.ATTR_LEASE_OWNER,
    "#counter": C.ATTR_LEASE_COUNTER,
    "#expires": C.ATTR_LEASE_EXPIRES_AT,
    "#switches": C.ATTR_OWNER_SWITCHES,
    "#cp": C.ATTR_CHECKPOINT,
    "#sub": C.ATTR_CHECKPOINT_SUBSEQ,
    "#pending": C.ATTR_PENDING_CHECKPOINT,
    "#group": C.ATTR_CONSUMER_GROUP,
    "#next": C.ATTR_NEXT_SEQUENCE_NUMBER,
    "#state": C.ATTR_STATE,
    "#parents": C.ATTR_PARENT_PARTITION_IDS,
    "#hstart": C.ATTR_STARTING_HASH_KEY,
    "#hend": C.ATTR_ENDING_HASH_KEY,
    "#kstart": C.ATTR_STARTING_KINESIS_SEQ,
    "#kend": C.ATTR_ENDING_KINESIS_SEQ,
    "#committedAt": C.ATTR_LAST_COMMITTED_AT,
    "#segs": C.ATTR_SEGMENT_COUNT,
    "#bytes": C.ATTR_COMMITTED_BYTES,
    "#horizon": C.ATTR_TRIM_HORIZON,
    "#tagged": C.ATTR_TRIM_TAGGED,
    "#live": C.ATTR_LIVE,
    "#liveRevision": C.ATTR_LIVE_REVISION,
    "#retiredAt": C.ATTR_RETIRED_AT,
    "#kind": C.ATTR_GROUP_KIND,
    "#created": C.ATTR_GROUP_CREATED_AT,
    "#seekOwner": ATTR_SEEK_OWNER,
    "#seekUntil": ATTR_SEEK_EXPIRES_AT,
    "#lastSeekAt": ATTR_LAST_SEEK_AT,
    "#lastSeekPosition": ATTR_LAST_SEEK_POSITION,
    "#lastSeekBy": ATTR_LAST_SEEK_BY,
    "#lastSeekPositions": ATTR_LAST_SEEK_POSITIONS,
    "#rstart": C.ATTR_RETRY_START,
    "#rend": C.ATTR_RETRY_END,
    "#rsize": C.ATTR_RETRY_SIZE,
    "#rattempts": C.ATTR_RETRY_ATTEMPTS,
    "#pf": C.ATTR_PENDING_FAILURE,
    "#lanes": C.ATTR_LANE_PROGRESS,
    "#window": C.ATTR_WINDOW_STATE,
    "#transferBy": ATTR_TRANSFER_REQUESTED_BY,
    "#transferAt": ATTR_TRANSFER_REQUESTED_AT,
}
_PLACEHOLDER = re.compile(r"[#:][A-Za-z0-9_]+")
_HELD = "#owner = :me AND #counter = :held"


@dataclass(frozen=True)
class Update:
    """One conditional UpdateItem, from readable parts.

    ``sets`` and ``removes`` are clauses over the placeholders of PLACEHOLDERS and the
    ``values`` given; ``request()`` keeps only the names and values the expressions use.
    """

    table: str
    key: Mapping[str, Any]
    sets: tuple[str, ...] = ()
    removes: tuple[str, ...] = ()
    condition: str | None = None
    values: Mapping[str, Any] = field(default_factory=dict)

    def and_condition(self, condition: str) -> Update:
        combined = condition if self.condition is None else f"({self.condition}) AND {condition}"
        return Update(self.table, self.key, self.sets, self.removes, combined, self.values)

    def fenced(self, lease: Lease) -> Update:
        """Only the holder of ``lease`` may make this write; it increments the fencing counter."""
        return self.and_condition(_HELD)._plus(
            "#counter = #counter + :one",
            {":me": s(lease.owner or ""), ":held": n(lease.counter), ":one": n(1)},
        )

    def counter_fenced(self, counter: int | None) -> Update:
        """Only a writer that saw the item at ``counter`` (None: no item yet) may make this
        write; it increments the counter (the owner-less fence of the compaction watermark)."""
        if counter is None:
            update, seen = self.and_condition("attribute_not_exists(#counter)"), {}
        else:
            update, seen = self.and_condition("#counter = :seen"), {":seen": n(counter)}
        return update._plus(
            "#counter = if_not_exists(#counter, :zero) + :one",
            {**seen, ":zero": n(0), ":one": n(1)},
        )

    def extended(
        self,
        *,
        sets: tuple[str, ...] = (),
        removes: tuple[str, ...] = (),
        values: Mapping[str, Any] | None = None,
    ) -> Update:
        """The same write (same key and condition) with more clauses and their values."""
        return Update(
            self.table,
            self.key,
            (*self.sets, *sets),
            (*self.removes, *removes),
            self.condition,
            {**self.values, **(values or {})},
        )

    def _plus(self, clause: str, values: Mapping[str, Any]) -> Update:
        return self.extended(sets=(clause,), values=values)

    def request(self) -> dict[str, Any]:
        """The UpdateItem parameters (also the ``Update`` of a TransactWriteItems item)."""
        expression = "SET " + ", ".join(self.sets) if self.sets else ""
        if self.removes:
            expression += " REMOVE " + ", ".join(self.removes)
        text = f"{expression} {self.condition or ''}"
        used = set(_PLACEHOLDER.findall(text))
        missing = {p for p in used if p.startswith(":")} - set(self.values)
        if missing:
            raise ValueError(f"update of {self.table} has no value for {sorted(missing)}")
        request: dict[str, Any] = {
            "TableName": self.table,
            "Key": dict(self.key),
            "UpdateExpression": expression.strip(),
            "ExpressionAttributeNames": {k: v for k, v in PLACEHOLDERS.items() if k in used},
        }
        values = {k: v for k, v in self.values.items() if k in used}
        if values:
            request["ExpressionAttributeValues"] = values
        if self.condition is not None:
            request["ConditionExpression"] = self.condition
        return request


@dataclass(frozen=True)
class UpdateOutcome:
    """``written``: the condition held. ``item``: the item after the write, or (when
    asked for) the item that failed the condition; None when there was none."""

    written: bool
    item: dict[str, Any] | None


def update_item(
    clients: Clients, update: Update, *, item_on_failure: bool = False
) -> UpdateOutcome:
    """Send a conditional update. A refused condition is an outcome, not an exception;
    every other error raises."""
    extra: dict[str, Any] = {"ReturnValues": "ALL_NEW"}
    if item_on_failure:
        extra["ReturnValuesOnConditionCheckFailure"] = "ALL_OLD"
    try:
        response = clients.dynamodb.update_item(**update.request(), **extra)
    except ClientError as exc:
        if not is_conditional_failure(exc):
            raise
        return UpdateOutcome(False, exc.response.get("Item"))
    return UpdateOutcome(True, response.get("Attributes"))
