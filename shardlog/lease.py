"""Leases on partitions in the consumers table, fenced by ``leaseCounter``.

Every write that matters is a conditional write, and every one increments the
counter, so a worker that paused (GC, a frozen Lambda, a partition) and wakes up
holding an old counter can never write again: its condition fails. Expiry times
only decide *when* a lease may be taken (liveness); they never decide who may
write (safety), so clock skew can delay a takeover but never allow two writers.

Graceful handoff (consumer groups): a worker that wants a live lease *asks* for it
(``request_transfer``: it records ``leaseTransferRequestedBy``/``At`` and does not move
the counter, so the owner is not fenced); the owner, between two batches, checkpoints
and ``transfer``s the lease to the requester with one fenced write that also requires
the request to stand. Taking or releasing a lease clears a request (it was addressed to
the previous owner). A request is only a hint: when it is not honoured, the requester
falls back to ``take`` (a steal) or to expiry, so liveness never depends on the owner.

Part of the data-access layer (shardlog/dal/__init__.py): every request on a lease item's
ownership and checkpoint is built, sent and judged here; a refusal leaves this module only
as ``LeaseHeldError``, ``LeaseLostError`` or an outcome (None, False).
"""

from __future__ import annotations

from typing import Any

from shardlog import constants as C
from shardlog.aws import Clients
from shardlog.clock import Clock, SystemClock
from shardlog.exceptions import LeaseHeldError, LeaseLostError
from shardlog.tables import (
    Lease,
    Update,
    consumer_key,
    n,
    put_new_consumer_item,
    s,
    update_item,
)

_TRANSFER_ATTRIBUTES = ("#transferBy", "#transferAt")


class LeaseManager:
    def __init__(
        self,
        clients: Clients,
        table_name: str = C.DEFAULT_CONSUMERS_TABLE,
        *,
        clock: Clock | None = None,
        lease_duration_ms: int = C.DEFAULT_LEASE_DURATION_MS,
    ) -> None:
        if lease_duration_ms <= 0:
            raise ValueError("lease_duration_ms must be positive")
        self.clients = clients
        self.table_name = table_name
        self.clock = clock or SystemClock()
        self.lease_duration_ms = lease_duration_ms

    def acquire(self, group: str, partition_id: str, owner: str) -> Lease:
        """Take the lease if it is unowned, expired or already ours, in one request.

        DynamoDB evaluates the condition atomically on the lease's current state,
        so this is a compare-and-set just like a take conditioned on the counter;
        it saves the read such a take needs, which keeps ingest within budget.
        Raises LeaseHeldError when another owner's lease is live.
        """
        now = self.clock.now_ms()
        values = {
            ":me": s(owner),
            ":zero": n(0),
            ":one": n(1),
            ":now": n(now),
            ":expires": n(now + self.lease_duration_ms),
        }
        sets = (
            "#owner = :me",
            "#counter = if_not_exists(#counter, :zero) + :one",
            "#expires = :expires",
        )
        # A takeover (the common case: every ingest invocation is a new owner) counts an
        # owner switch. Only when that fails because we already own it, renew without one.
        key = consumer_key(group, partition_id)
        takeover = Update(
            self.table_name,
            key,
            (*sets, "#switches = if_not_exists(#switches, :zero) + :one"),
            condition="attribute_not_exists(#owner) OR (#expires <= :now AND NOT #owner = :me)",
            values=values,
        )
        written, held = self._try(takeover)
        if not written and held is not None and held.owner == owner:
            mine = Update(self.table_name, key, sets, condition="#owner = :me", values=values)
            written, held = self._try(mine)
        if written:
            assert held is not None
            return held
        raise LeaseHeldError(
            group,
            partition_id,
            (held.owner if held else None) or "?",
            held.expires_at_ms if held else 0,
        )

    def _try(self, update: Update) -> tuple[bool, Lease | None]:
        """(True, the lease written), or (False, the lease that stood in the way)."""
        outcome = update_item(self.clients, update, item_on_failure=True)
        return outcome.written, Lease.from_item(outcome.item) if outcome.item else None

    def take(self, seen: Lease, owner: str) -> Lease:
        """Take or steal a lease as it was seen: conditional on the counter seen (KCL's take).

        Raises LeaseLostError when anyone wrote the lease since it was seen.
        """
        now = self.clock.now_ms()
        update = Update(
            self.table_name,
            consumer_key(seen.group, seen.partition_id),
            (
                "#owner = :me",
                "#counter = :seen + :one",
                "#expires = :expires",
                "#switches = if_not_exists(#switches, :zero) + :switch",
            ),
            _TRANSFER_ATTRIBUTES,  # a request was addressed to the previous owner
            condition="#counter = :seen",
            values={
                ":me": s(owner),
                ":one": n(1),
                ":zero": n(0),
                ":seen": n(seen.counter),
                ":expires": n(now + self.lease_duration_ms),
                ":switch": n(0 if seen.owner == owner else 1),
            },
        )
        return self._send(seen, update, "another worker wrote it first")

    def renew(self, lease: Lease) -> Lease:
        return self._send(lease, self.renew_update(lease))

    def renew_update(self, lease: Lease) -> Update:
        """The fenced renewal, to send alone or with more clauses (a Lambda group's retry
        state, shardlog/dal/consumers.py)."""
        expires = self.clock.now_ms() + self.lease_duration_ms
        update = self._update(lease, ("#expires = :expires",), values={":expires": n(expires)})
        return update.fenced(lease)

    def release(self, lease: Lease) -> Lease:
        """Give the lease up for immediate takeover (graceful handoff)."""
        update = self._update(
            lease, ("#expires = :zero",), ("#owner", *_TRANSFER_ATTRIBUTES), {":zero": n(0)}
        )
        return self._send(lease, update.fenced(lease))

    # --- graceful handoff ----------------------------------------------------------------
    def request_transfer(self, seen: Lease, requester: str, *, stale_after_ms: int) -> Lease | None:
        """Ask the owner of a live lease to hand it over; the lease written, or None if refused.

        Not a lease write: the counter does not move, so the owner's next fenced write
        still succeeds (and returns the request to it). Refused when the owner changed,
        the lease is not live, or another worker's request younger than
        ``stale_after_ms`` stands.
        """
        now = self.clock.now_ms()
        update = Update(
            self.table_name,
            consumer_key(seen.group, seen.partition_id),
            ("#transferBy = :me", "#transferAt = :now"),
            condition=(
                "#owner = :owner AND #expires > :now AND (attribute_not_exists(#transferBy)"
                " OR #transferBy = :me OR #transferAt <= :stale)"
            ),
            values={
                ":me": s(requester),
                ":owner": s(seen.owner or ""),
                ":now": n(now),
                ":stale": n(now - stale_after_ms),
            },
        )
        outcome = update_item(self.clients, update)
        return Lease.from_item(outcome.item) if outcome.written and outcome.item else None

    def withdraw_transfer(self, group: str, partition_id: str, requester: str) -> bool:
        """Take back this requester's request, if it still stands; True if it did."""
        update = Update(
            self.table_name,
            consumer_key(group, partition_id),
            removes=_TRANSFER_ATTRIBUTES,
            condition="#transferBy = :me",
            values={":me": s(requester)},
        )
        return update_item(self.clients, update).written

    def transfer(self, lease: Lease, to_owner: str) -> Lease | None:
        """Hand the lease to the worker that asked for it: one fenced write.

        The new owner holds it at once (``leaseExpiresAt`` = now + duration) and starts
        from the checkpoint stored; the counter moves, so every older copy is fenced.
        Returns None when the request no longer stands (withdrawn or replaced) while the
        lease is still ours; raises LeaseLostError when it is not ours any more.
        """
        update = self._update(
            lease,
            (
                "#owner = :to",
                "#expires = :expires",
                "#switches = if_not_exists(#switches, :zero) + :one",
            ),
            _TRANSFER_ATTRIBUTES,
            {
                ":to": s(to_owner),
                ":zero": n(0),
                ":expires": n(self.clock.now_ms() + self.lease_duration_ms),
            },
        ).and_condition("#transferBy = :to")
        outcome = update_item(self.clients, update.fenced(lease), item_on_failure=True)
        if outcome.written and outcome.item is not None:
            return Lease.from_item(outcome.item)
        current = Lease.from_item(outcome.item) if outcome.item else None
        if current is not None and (current.owner, current.counter) == (lease.owner, lease.counter):
            return None
        raise LeaseLostError(
            lease.group,
            lease.partition_id,
            f"fenced by leaseCounter while handing it to {to_owner} (held counter {lease.counter})",
        )

    def checkpoint(self, lease: Lease, checkpoint: str, subseq: int | None = None) -> Lease:
        """Record progress; also renews the lease. Raises LeaseLostError when fenced."""
        update = self.checkpoint_update(lease, checkpoint, subseq, now_ms=self.clock.now_ms())
        return self._send(lease, update)

    def checkpoint_and_release(self, lease: Lease, checkpoint: str) -> Lease:
        """Record progress and give the lease up in one fenced write (an ingest batch that
        committed nothing new). Raises LeaseLostError when fenced."""
        update = self.checkpoint_update(lease, checkpoint, release=True)
        return self._send(lease, update, "checkpoint fenced by leaseCounter")

    def checkpoint_update(
        self,
        lease: Lease,
        checkpoint: str,
        subseq: int | None = None,
        *,
        release: bool = False,
        now_ms: int | None = None,
    ) -> Update:
        """The fenced checkpoint write, to send alone or as an item of a transaction.

        The ingest writer puts it in the same transaction as the partition head, so
        log and checkpoint never disagree; with ``release`` it also hands the lease
        back (the ingest Lambda holds a lease for one batch only).
        """
        sets = ["#cp = :cp", "#switches = :zero"]
        removes = []
        values: dict[str, Any] = {":cp": s(checkpoint), ":zero": n(0)}
        if subseq is None:
            removes.append("#sub")
        else:
            sets.append("#sub = :sub")
            values[":sub"] = n(subseq)
        if release:
            sets.append("#expires = :zero")
            removes.append("#owner")
        elif now_ms is not None:
            sets.append("#expires = :expires")
            values[":expires"] = n(now_ms + self.lease_duration_ms)
        return self._update(lease, tuple(sets), tuple(removes), values).fenced(lease)

    def ensure(
        self,
        group: str,
        partition_id: str,
        parents: tuple[str, ...] = (),
        *,
        checkpoint: str | None = None,
    ) -> None:
        """Create the lease item if it is missing (no owner, counter 0), at ``checkpoint``
        (a group's start position, shardlog/consumer/creation.py) or with none (seq 0)."""
        item = {
            **consumer_key(group, partition_id),
            C.ATTR_LEASE_COUNTER: n(0),
            C.ATTR_LEASE_EXPIRES_AT: n(0),
            C.ATTR_OWNER_SWITCHES: n(0),
            C.ATTR_PARENT_PARTITION_IDS: {"L": [s(p) for p in parents]},
        }
        if checkpoint is not None:
            item[C.ATTR_CHECKPOINT] = s(checkpoint)
        put_new_consumer_item(self.clients, self.table_name, item)

    # --- helpers -------------------------------------------------------------------------
    def _update(
        self,
        lease: Lease,
        sets: tuple[str, ...],
        removes: tuple[str, ...] = (),
        values: dict[str, Any] | None = None,
    ) -> Update:
        return Update(
            self.table_name,
            consumer_key(lease.group, lease.partition_id),
            sets,
            removes,
            values=values or {},
        )

    def _send(self, lease: Lease, update: Update, detail: str = "fenced by leaseCounter") -> Lease:
        outcome = update_item(self.clients, update)
        if not outcome.written or outcome.item is None:
            raise LeaseLostError(
                lease.group, lease.partition_id, f"{detail} (held counter {lease.counter})"
            )
        return Lease.from_item(outcome.item)
