"""The consumers table's requests beyond the lease itself: group items, a Lambda group's
progress records, the compaction mirror.

The lease (owner, counter, expiry, checkpoint) is shardlog/lease.py's; the requests here
build on its fenced checkpoint write where they must be fenced, and own the rest:

- **group items** (``$group``, docs/TABLES.md): ``read_group``, ``group_kind`` and
  ``create_group``, one conditional PutItem that creates a group, or gives positions to
  one registered without them, and is refused when any other group item stands;
- **a Lambda group's progress** on a lease item (``LambdaProgress``, ``LaneProgress``): the
  retry state (``retryStartSeq``, ``retryEndSeq``, ``retryBatchSize``, ``retryAttempts``)
  and the pending give-up (``pendingOnFailure``), or at a parallelization factor above 1
  the same per lane in one map (``laneProgress``), written whole in the same fenced write
  as the checkpoint or the lease's renewal, so a runner that lost its lease writes none;
  the open tumbling window and its state (``windowState``, ``WindowState``) travel in the
  same write, so state and checkpoint move together and a zombie writes neither;
- **the compaction mirror** (``$compaction`` items, ``WatermarkItems``): every write
  conditional on ``leaseCounter`` as it was read, incrementing it; each lake table is a
  reader of the log under a group of its own (``lake_reader``: ``$compaction`` for the raw
  table, ``$compaction:<table>`` for a declared one), registered by a ``$group`` item of
  kind ``lake`` (``register_lake_reader``, shardlog/retirement.py says why);
- **every checkpoint** (``all_checkpoints``): one consistent Scan of the table's keys and
  checkpoints, what retention (shardlog/retention.py) holds segments for.

Every refusal leaves this module as an outcome (None) or a domain error
(``LeaseLostError``, ``WatermarkConflictError``), never as a ClientError.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from botocore.exceptions import ClientError

from shardlog import constants as C
from shardlog.aws import Clients
from shardlog.exceptions import LeaseLostError
from shardlog.lease import LeaseManager
from shardlog.spark.exceptions import WatermarkConflictError
from shardlog.tables import (
    Lease,
    Update,
    consumer_key,
    from_ddb,
    is_conditional_failure,
    n,
    put_items,
    put_new_consumer_item,
    s,
    update_item,
)

# --- group items ---------------------------------------------------------------------------
WORKERS, LAMBDA, LAKE = "workers", "lambda", "lake"  # groupKind


def lake_reader(table: str | None = None) -> str:
    """The group under which a lake table reads the log: ``$compaction`` for the raw table
    (None), ``$compaction:<table>`` for a declared table."""
    return C.COMPACTION_GROUP if table is None else f"{C.COMPACTION_GROUP}:{table}"


def is_lake_reader(group: str) -> bool:
    """A lake table's group (its checkpoints are the table's watermarks, mirrored)."""
    return group == C.COMPACTION_GROUP or group.startswith(f"{C.COMPACTION_GROUP}:")


@dataclass(frozen=True)
class GroupRecord:
    """A group's ``$group`` item. ``positions``: partition -> first seq (decimal) or
    SHARD_END, fixed at creation; a partition not in it appeared later (from seq 0)."""

    group: str
    kind: str
    created_at_ms: int
    start: str  # StartPosition.describe() of the position it was created with
    positions: Mapping[str, str] = field(default_factory=dict)
    positioned: bool = True  # False: registered by an earlier version, without positions

    def position(self, partition_id: str) -> str | None:
        """The checkpoint a new lease item of this partition starts with (None: seq 0, as
        for a partition that appeared later)."""
        position = self.positions.get(partition_id)
        return None if position == "0" else position


def _group_item(clients: Clients, consumers_table: str, group: str) -> dict[str, Any] | None:
    response = clients.dynamodb.get_item(
        TableName=consumers_table, Key=consumer_key(group, C.GROUP_ITEM_ID), ConsistentRead=True
    )
    item = response.get("Item")
    return dict(item) if item else None


def read_group(clients: Clients, consumers_table: str, group: str) -> GroupRecord | None:
    return _record(group, _group_item(clients, consumers_table, group))


def group_kind(clients: Clients, consumers_table: str, group: str) -> str | None:
    """What the group's "$group" item says it is ("lambda" for a Lambda consumer group), or
    None when it has no such item (a worker group, or no group)."""
    item = _group_item(clients, consumers_table, group) or {}
    kind = item.get(C.ATTR_GROUP_KIND, {}).get("S")
    return str(kind) if kind else None


def _record(group: str, raw: Mapping[str, object] | None) -> GroupRecord | None:
    if not raw:
        return None
    item = from_ddb(dict(raw))
    positions = item.get(C.ATTR_GROUP_START_POSITIONS)
    return GroupRecord(
        group,
        str(item.get(C.ATTR_GROUP_KIND, WORKERS)),
        int(item.get(C.ATTR_GROUP_CREATED_AT, 0)),
        str(item.get(C.ATTR_GROUP_START_POSITION, "")),
        json.loads(positions) if isinstance(positions, str) else {},
        positioned=positions is not None,
    )


def create_group(
    clients: Clients,
    consumers_table: str,
    group: str,
    kind: str,
    created_at_ms: int,
    start: str,
    positions: Mapping[str, str],
) -> GroupRecord | None:
    """Write the group's item: the record written, or None when refused (another group item
    stands: another kind, or one that has its positions already)."""
    item = {
        **consumer_key(group, C.GROUP_ITEM_ID),
        C.ATTR_GROUP_KIND: s(kind),
        C.ATTR_GROUP_CREATED_AT: n(created_at_ms),
        C.ATTR_GROUP_START_POSITION: s(start),
        C.ATTR_GROUP_START_POSITIONS: s(json.dumps(dict(positions), sort_keys=True)),
    }
    # A new group, or one registered before positions were recorded (same kind).
    condition = "attribute_not_exists(#g) OR (#kind = :kind AND attribute_not_exists(#pos))"
    try:
        clients.dynamodb.put_item(
            TableName=consumers_table,
            Item=item,
            ConditionExpression=condition,
            ExpressionAttributeNames={
                "#g": C.ATTR_CONSUMER_GROUP,
                "#kind": C.ATTR_GROUP_KIND,
                "#pos": C.ATTR_GROUP_START_POSITIONS,
            },
            ExpressionAttributeValues={":kind": s(kind)},
        )
    except ClientError as exc:
        if not is_conditional_failure(exc):
            raise
        return None
    return _record(group, item)


def register_lake_reader(
    clients: Clients, consumers_table: str, group: str, created_at_ms: int
) -> GroupRecord:
    """The lake reader's ``$group`` item, written (kind ``lake``, no positions) when there
    is none: from then on retirement waits for this reader. ``positioned`` False until
    ``mark_lake_reader_caught_up`` says it has every retired partition (retirement.py)."""
    record = read_group(clients, consumers_table, group)
    if record is not None:
        return record
    item = {
        **consumer_key(group, C.GROUP_ITEM_ID),
        C.ATTR_GROUP_KIND: s(LAKE),
        C.ATTR_GROUP_CREATED_AT: n(created_at_ms),
        C.ATTR_GROUP_START_POSITION: s("TRIM_HORIZON"),
    }
    if not put_new_consumer_item(clients, consumers_table, item):
        record = read_group(clients, consumers_table, group)  # a concurrent run wrote it
        if record is not None:
            return record
    return GroupRecord(group, LAKE, created_at_ms, "TRIM_HORIZON", positioned=False)


def mark_lake_reader_caught_up(clients: Clients, consumers_table: str, record: GroupRecord) -> None:
    """Record that the lake reader holds every ENDED partition it found by a full read
    (its positions, empty: the live set is enough from now on). Idempotent."""
    create_group(
        clients,
        consumers_table,
        record.group,
        LAKE,
        record.created_at_ms,
        record.start,
        {},
    )


def group_items(clients: Clients, consumers_table: str, group: str) -> list[dict[str, Any]]:
    """Every item of the group (its lease items and its ``$`` items) as stored, read
    consistently: what a display of the group's progress reads."""
    pages = clients.dynamodb.get_paginator("query").paginate(
        TableName=consumers_table,
        KeyConditionExpression="#g = :g",
        ExpressionAttributeNames={"#g": C.ATTR_CONSUMER_GROUP},
        ExpressionAttributeValues={":g": {"S": group}},
        ConsistentRead=True,
    )
    return [item for page in pages for item in page.get("Items", [])]


# --- a Lambda group's progress -------------------------------------------------------------
_RETRY_ATTRIBUTES = ("#rstart", "#rend", "#rsize", "#rattempts")


@dataclass(frozen=True)
class RetryState:
    """The records [start, end) of a batch that failed are being retried, in sub-batches of
    at most ``size`` records; the current one has failed ``attempts`` times. With lanes, the
    batch is the records of its lane in that range (``size`` counts those)."""

    start: int
    end: int
    size: int
    attempts: int

    def attribute(self) -> dict[str, Any]:
        fields = {"start": self.start, "end": self.end, "size": self.size}
        return {"M": {**{k: n(v) for k, v in fields.items()}, "attempts": n(self.attempts)}}

    @classmethod
    def from_value(cls, value: Mapping[str, Any]) -> RetryState:
        start, end = int(value["start"]), int(value["end"])
        return cls(start, end, int(value.get("size", end - start)), int(value.get("attempts", 0)))


@dataclass(frozen=True)
class PendingFailure:
    """The group gave up on the records [start, end) (recorded, fenced, before the on-failure
    record is sent); the next runner sends the record if this one could not. With lanes,
    the records of lane ``lane`` in that range."""

    start: int
    end: int
    condition: str
    attempts: int
    function_error: str | None
    lane: int = 0

    def attribute(self) -> dict[str, Any]:
        value: dict[str, Any] = {
            "start": n(self.start),
            "end": n(self.end),
            "condition": s(self.condition),
            "attempts": n(self.attempts),
        }
        if self.function_error is not None:
            value["functionError"] = s(self.function_error)
        return {"M": value}

    @classmethod
    def from_value(cls, value: Mapping[str, Any], lane: int = 0) -> PendingFailure:
        error = value.get("functionError")
        return cls(
            int(value["start"]),
            int(value["end"]),
            str(value["condition"]),
            int(value["attempts"]),
            str(error) if error is not None else None,
            lane,
        )


@dataclass(frozen=True)
class WindowState:
    """The open tumbling window ``[start_ms, end_ms)`` of a Lambda group's partition and the
    state its last successful invocation returned, as compact JSON text (stored
    zlib-compressed: an item holds at most 400 KB, a state may be 1 MB)."""

    start_ms: int
    end_ms: int
    state_json: bytes = b"{}"

    def attribute(self) -> dict[str, Any]:
        return {
            "M": {
                "start": n(self.start_ms),
                "end": n(self.end_ms),
                "state": {"B": zlib.compress(self.state_json)},
            }
        }

    @classmethod
    def from_value(cls, value: Mapping[str, Any]) -> WindowState:
        state = value["state"]
        return cls(
            int(value["start"]),
            int(value["end"]),
            zlib.decompress(bytes(getattr(state, "value", state))),
        )

    @property
    def stored_bytes(self) -> int:
        """What the state takes in the item."""
        return len(zlib.compress(self.state_json))


class Clauses(NamedTuple):
    sets: tuple[str, ...]
    removes: tuple[str, ...]
    values: dict[str, Any]


@dataclass(frozen=True)
class LaneProgress:
    """What a restart of a Lambda group's partition needs beyond its checkpoint: each lane's
    batch being retried and give-up not yet sent (by lane), for the parallelization factor
    they were written with (a lane means nothing under another factor)."""

    factor: int = 1
    retries: Mapping[int, RetryState] = field(default_factory=dict)
    pending: Mapping[int, PendingFailure] = field(default_factory=dict)
    window: WindowState | None = None  # tumbling windows (factor 1 only)

    def _flat(self) -> Clauses:
        """Factor 1, one lane: the item's own attributes (``retryStartSeq``, ...,
        ``pendingOnFailure``), as before lanes."""
        retry, pending = self.retries.get(0), self.pending.get(0)
        sets: list[str] = []
        removes = ["#lanes"]
        values: dict[str, Any] = {}
        if retry is None:
            removes += _RETRY_ATTRIBUTES
        else:
            sets += ["#rstart = :rstart", "#rend = :rend", "#rsize = :rsize"]
            sets.append("#rattempts = :rattempts")
            values |= {
                ":rstart": n(retry.start),
                ":rend": n(retry.end),
                ":rsize": n(retry.size),
                ":rattempts": n(retry.attempts),
            }
        if pending is None:
            removes.append("#pf")
        else:
            sets.append("#pf = :pf")
            values[":pf"] = pending.attribute()
        if self.window is None:
            removes.append("#window")
        else:
            sets.append("#window = :window")
            values[":window"] = self.window.attribute()
        return Clauses(tuple(sets), tuple(removes), values)

    def _mapped(self) -> Clauses:
        """Factor 2 to 10: one map, ``laneProgress`` = {factor, lanes: {lane: {retry,
        pending}}}, written whole by the one runner that holds the lease."""
        removes = (*_RETRY_ATTRIBUTES, "#pf", "#window")
        lanes: dict[str, Any] = {}
        for lane in sorted({*self.retries, *self.pending}):
            value: dict[str, Any] = {}
            if lane in self.retries:
                value["retry"] = self.retries[lane].attribute()
            if lane in self.pending:
                value["pending"] = self.pending[lane].attribute()
            lanes[str(lane)] = {"M": value}
        if not lanes:
            return Clauses((), (*removes, "#lanes"), {})
        attribute = {"M": {"factor": n(self.factor), "lanes": {"M": lanes}}}
        return Clauses(("#lanes = :lanes",), removes, {":lanes": attribute})

    def clauses(self) -> Clauses:
        """The SET and REMOVE clauses that store it (the other layout's attributes removed,
        so a factor changed between runs leaves nothing stale)."""
        return self._flat() if self.factor == 1 else self._mapped()

    @classmethod
    def from_item(cls, item: Mapping[str, Any]) -> LaneProgress:
        mapped = item.get(C.ATTR_LANE_PROGRESS)
        if mapped is not None:
            lanes = {int(k): v for k, v in mapped.get("lanes", {}).items()}
            return cls(
                int(mapped["factor"]),
                {k: RetryState.from_value(v["retry"]) for k, v in lanes.items() if "retry" in v},
                {
                    k: PendingFailure.from_value(v["pending"], k)
                    for k, v in lanes.items()
                    if "pending" in v
                },
            )
        pending = item.get(C.ATTR_PENDING_FAILURE)
        window = item.get(C.ATTR_WINDOW_STATE)
        retry = None
        if C.ATTR_RETRY_START in item:
            names = {
                "start": C.ATTR_RETRY_START,
                "end": C.ATTR_RETRY_END,
                "size": C.ATTR_RETRY_SIZE,
                "attempts": C.ATTR_RETRY_ATTEMPTS,
            }
            retry = RetryState.from_value({k: item[a] for k, a in names.items() if a in item})
        return cls(
            1,
            {0: retry} if retry is not None else {},
            {0: PendingFailure.from_value(pending)} if pending is not None else {},
            WindowState.from_value(window) if window is not None else None,
        )


class LambdaProgress:
    """A Lambda group's checkpoint and lane progress (retry states, pending give-ups) on its
    lease items.

    Every write is fenced on the lease (and renews it) and returns the lease written;
    LeaseLostError when the fence refused it (nothing written)."""

    def __init__(self, leases: LeaseManager) -> None:
        self.leases = leases

    @staticmethod
    def of(lease: Lease) -> LaneProgress:
        """The batches being retried, and give-ups whose records may not have been sent, on
        the lease item as ``lease`` was read or written: a take's answer is the whole item
        as its write left it, so the runner reads them with its take, not after it (a
        write of anyone else since would have moved the counter and fences the runner)."""
        return LaneProgress.from_item(lease.item)

    def save(self, lease: Lease, progress: LaneProgress, *, checkpoint: int | None) -> Lease:
        """The lane progress as it now stands (whole: what is not in it is removed), with the
        checkpoint when given, else a renewal of the lease."""
        if checkpoint is not None:
            base = self.leases.checkpoint_update(
                lease, str(checkpoint), now_ms=self.leases.clock.now_ms()
            )
        else:
            base = self.leases.renew_update(lease)
        clauses = progress.clauses()
        update = base.extended(sets=clauses.sets, removes=clauses.removes, values=clauses.values)
        outcome = update_item(self.leases.clients, update)
        if not outcome.written or outcome.item is None:
            raise LeaseLostError(lease.group, lease.partition_id, "fenced by leaseCounter")
        return Lease.from_item(outcome.item)


# --- the compaction mirror -----------------------------------------------------------------
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


class WatermarkItems:
    """The ``$compaction`` group's items: reads, and the one counter-fenced write."""

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

    def write_checkpoint(self, mark: Watermark, checkpoint: str) -> Watermark:
        """The one write of the watermark: the checkpoint (the old redo record removed),
        conditional on the counter as it was read (absent: no item yet), incrementing it."""
        update = Update(
            self.table_name,
            consumer_key(self.group, mark.partition_id),
            ("#cp = :cp",),
            ("#pending",),
            values={":cp": s(checkpoint)},
        ).counter_fenced(mark.counter if mark.exists else None)
        outcome = update_item(self.clients, update)
        if not outcome.written or outcome.item is None:
            raise WatermarkConflictError(
                mark.partition_id,
                f"expected leaseCounter {mark.counter if mark.exists else 'absent'}",
            )
        return Watermark.from_item(outcome.item)


# --- every group's checkpoint (retention) ------------------------------------------------
@dataclass(frozen=True)
class Checkpoints:
    """Every consumers-table checkpoint, as one Scan saw them: ``groups`` lists every group
    with an item (shardlog's own ``$`` groups included); ``by_partition`` maps a partition to
    each group's ``checkpoint`` on it (None: a lease item with no checkpoint yet)."""

    groups: frozenset[str]
    by_partition: Mapping[str, Mapping[str, str | None]]


def all_checkpoints(clients: Clients, consumers_table: str) -> Checkpoints:
    """One consistent, paginated Scan of the keys and checkpoints of the consumers table."""
    pages = clients.dynamodb.get_paginator("scan").paginate(
        TableName=consumers_table,
        ProjectionExpression="#g, #p, #cp",
        ExpressionAttributeNames={
            "#g": C.ATTR_CONSUMER_GROUP,
            "#p": C.ATTR_PARTITION_ID,
            "#cp": C.ATTR_CHECKPOINT,
        },
        ConsistentRead=True,
    )
    groups: set[str] = set()
    by_partition: dict[str, dict[str, str | None]] = {}
    for page in pages:
        for raw in page.get("Items", []):
            item = from_ddb(raw)
            group, partition_id = item[C.ATTR_CONSUMER_GROUP], item[C.ATTR_PARTITION_ID]
            groups.add(group)
            if partition_id.startswith(C.GROUP_ITEM_PREFIX):  # "$group": not a lease
                continue
            checkpoint = item.get(C.ATTR_CHECKPOINT)
            by_partition.setdefault(partition_id, {})[group] = (
                None if checkpoint is None else str(checkpoint)
            )
    return Checkpoints(frozenset(groups), by_partition)


def write_checkpoints(
    clients: Clients, consumers_table: str, group: str, partition_ids: list[str], checkpoint: str
) -> None:
    """Lease items of ``group`` holding ``checkpoint`` on each partition, with no owner: a
    fixture of history (the history benchmark), never a consumer's write."""
    items = [{**consumer_key(group, p), C.ATTR_CHECKPOINT: s(checkpoint)} for p in partition_ids]
    put_items(clients, consumers_table, items)
