"""The consumers table's requests of a group seek (`shardlog group seek`,
shardlog/consumer/seek.py states the protocol).

- **the seek lock and record** on the group's ``$group`` item: ``begin_seek`` (one
  conditional write: no other seek in progress, or its lock expired), ``finish_seek`` (the
  record of the seek done, ``lastSeekAt``, ``lastSeekPosition``, ``lastSeekBy``,
  ``lastSeekPositions``, written with the lock's removal, conditional on holding it),
  ``abandon_seek`` (the lock removed, nothing recorded), ``read_group_summary`` (kind, last
  seek and lock in one read);
- **the lease writes** (``SeekLeases``): ``hold`` takes a lease item whatever its owner and
  counter (the counter moves, the owner becomes the seek, so every consumer's next fenced
  write is refused) and returns it with any pending give-up of a Lambda group; ``place``
  sets the new checkpoint and releases the lease in one write fenced on the hold, clearing
  the checkpoint's sub-sequence number, a Lambda group's retry state and pending give-up
  and any handoff request; ``release`` gives a held lease back unchanged.

A refused condition leaves this module as an outcome (None, False) or ``LeaseLostError``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from shardlog import constants as C
from shardlog.aws import Clients
from shardlog.clock import Clock
from shardlog.dal.consumers import PendingFailure
from shardlog.exceptions import LeaseLostError
from shardlog.lease import LeaseManager
from shardlog.tables import (
    ATTR_LAST_SEEK_AT,
    ATTR_LAST_SEEK_BY,
    ATTR_LAST_SEEK_POSITION,
    ATTR_LAST_SEEK_POSITIONS,
    ATTR_SEEK_EXPIRES_AT,
    ATTR_SEEK_OWNER,
    Lease,
    Update,
    consumer_key,
    from_ddb,
    n,
    s,
    update_item,
)

# What a placed lease no longer carries: a Lambda group's retry state and pending give-up, a
# handoff request addressed to an old owner (the checkpoint write removes the sub-sequence
# number itself), a Lambda group's open tumbling window (its state is of other records).
_CLEARED: Final = (
    "#rstart",
    "#rend",
    "#rsize",
    "#rattempts",
    "#pf",
    "#transferBy",
    "#transferAt",
    "#window",
)


@dataclass(frozen=True)
class LastSeek:
    """The record of a group's last seek."""

    at_ms: int
    position: str
    by: str
    positions: Mapping[str, str] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        return {"at": self.at_ms, "position": self.position, "by": self.by}


@dataclass(frozen=True)
class GroupSummary:
    """What the ``$group`` item says of a group: its kind (None: no item), its last seek,
    and the owner of a seek in progress (with its lock's expiry)."""

    kind: str | None
    last_seek: LastSeek | None
    seek_owner: str | None = None
    seek_expires_at_ms: int = 0


def read_group_summary(clients: Clients, consumers_table: str, group: str) -> GroupSummary:
    """The group item's kind, last seek and seek in progress (one consistent read)."""
    response = clients.dynamodb.get_item(
        TableName=consumers_table, Key=_group_key(group), ConsistentRead=True
    )
    return _summary(response.get("Item") or {})


def _summary(raw: dict[str, Any]) -> GroupSummary:
    item = from_ddb(raw)
    last = None
    if ATTR_LAST_SEEK_AT in item:
        positions = item.get(ATTR_LAST_SEEK_POSITIONS)
        last = LastSeek(
            int(item[ATTR_LAST_SEEK_AT]),
            str(item.get(ATTR_LAST_SEEK_POSITION, "")),
            str(item.get(ATTR_LAST_SEEK_BY, "")),
            json.loads(positions) if isinstance(positions, str) else {},
        )
    kind = item.get(C.ATTR_GROUP_KIND)
    owner = item.get(ATTR_SEEK_OWNER)
    return GroupSummary(
        str(kind) if kind is not None else None,
        last,
        str(owner) if owner is not None else None,
        int(item.get(ATTR_SEEK_EXPIRES_AT, 0)),
    )


def _group_key(group: str) -> dict[str, Any]:
    return consumer_key(group, C.GROUP_ITEM_ID)


def begin_seek(
    clients: Clients,
    consumers_table: str,
    group: str,
    seeker: str,
    kind: str,
    *,
    now_ms: int,
    hold_ms: int,
) -> GroupSummary | None:
    """Take the group's seek lock until now + hold_ms: None when taken, else the summary of
    the item that refused it (another seek holds a live lock). A worker group from before
    group items gets one (``groupKind`` = ``kind``, no start positions)."""
    update = Update(
        consumers_table,
        _group_key(group),
        ("#seekOwner = :me", "#seekUntil = :until", "#kind = if_not_exists(#kind, :kind)"),
        condition="attribute_not_exists(#seekOwner) OR #seekUntil <= :now",
        values={
            ":me": s(seeker),
            ":until": n(now_ms + hold_ms),
            ":now": n(now_ms),
            ":kind": s(kind),
        },
    )
    outcome = update_item(clients, update, item_on_failure=True)
    if outcome.written:
        return None
    return _summary(outcome.item or {})


def finish_seek(
    clients: Clients, consumers_table: str, group: str, seeker: str, record: LastSeek
) -> bool:
    """Record the seek done and remove its lock; False when the lock was not ours any more."""
    update = Update(
        consumers_table,
        _group_key(group),
        (
            "#lastSeekAt = :at",
            "#lastSeekPosition = :position",
            "#lastSeekBy = :by",
            "#lastSeekPositions = :positions",
        ),
        ("#seekOwner", "#seekUntil"),
        condition="#seekOwner = :me",
        values={
            ":at": n(record.at_ms),
            ":position": s(record.position),
            ":by": s(record.by),
            ":positions": s(json.dumps(dict(record.positions), sort_keys=True)),
            ":me": s(seeker),
        },
    )
    return update_item(clients, update).written


def abandon_seek(clients: Clients, consumers_table: str, group: str, seeker: str) -> bool:
    """Remove our seek lock, recording nothing; False when it was not ours any more."""
    update = Update(
        consumers_table,
        _group_key(group),
        removes=("#seekOwner", "#seekUntil"),
        condition="#seekOwner = :me",
        values={":me": s(seeker)},
    )
    return update_item(clients, update).written


@dataclass(frozen=True)
class Held:
    """A lease item as the seek's hold left it, with a Lambda group's pending give-up."""

    lease: Lease
    pending: PendingFailure | None


class SeekLeases:
    """The seek's writes of lease items (each returns the item written)."""

    def __init__(self, clients: Clients, table_name: str, clock: Clock, hold_ms: int) -> None:
        self.leases = LeaseManager(clients, table_name, clock=clock, lease_duration_ms=hold_ms)
        self.clients = clients
        self.table_name = table_name

    def ensure(
        self, group: str, partition_id: str, parents: tuple[str, ...], checkpoint: str | None
    ) -> None:
        """The lease item, created at ``checkpoint`` if missing, so it can be held."""
        self.leases.ensure(group, partition_id, parents, checkpoint=checkpoint)

    def hold(self, group: str, partition_id: str, seeker: str) -> Held:
        """Take the lease whatever its owner and counter: the counter moves and the owner
        becomes the seek until now + hold_ms, so no consumer's fenced write passes any
        more and no consumer can take it meanwhile."""
        update = Update(
            self.table_name,
            consumer_key(group, partition_id),
            (
                "#owner = :me",
                "#counter = if_not_exists(#counter, :zero) + :one",
                "#expires = :expires",
            ),
            ("#transferBy", "#transferAt"),
            condition="attribute_exists(#group)",
            values={
                ":me": s(seeker),
                ":zero": n(0),
                ":one": n(1),
                ":expires": n(self.leases.clock.now_ms() + self.leases.lease_duration_ms),
            },
        )
        outcome = update_item(self.clients, update)
        if not outcome.written or outcome.item is None:
            raise LeaseLostError(group, partition_id, "its lease item is missing")
        pending = from_ddb(outcome.item).get(C.ATTR_PENDING_FAILURE)
        return Held(
            Lease.from_item(outcome.item),
            PendingFailure.from_value(pending) if pending is not None else None,
        )

    def place(self, held: Lease, checkpoint: str) -> Lease:
        """The new checkpoint, and the lease released, in one write fenced on the hold.
        LeaseLostError when the hold was lost (it expired and a consumer took the lease)."""
        update = self.leases.checkpoint_update(held, checkpoint, release=True)
        return self._send(held, update.extended(removes=_CLEARED))

    def release(self, held: Lease) -> Lease:
        """Give a held lease back unchanged (checkpoint and retry state kept)."""
        return self.leases.release(held)

    def _send(self, held: Lease, update: Update) -> Lease:
        outcome = update_item(self.clients, update)
        if not outcome.written or outcome.item is None:
            raise LeaseLostError(
                held.group, held.partition_id, f"the seek's hold was lost (counter {held.counter})"
            )
        return Lease.from_item(outcome.item)
