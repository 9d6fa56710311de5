"""Leases on partitions in the consumers table, fenced by ``leaseCounter``.

Every write that matters is a conditional write, and every one increments the
counter, so a worker that paused (GC, a frozen Lambda, a partition) and wakes up
holding an old counter can never write again: its condition fails. Expiry times
only decide *when* a lease may be taken (liveness); they never decide who may
write (safety), so clock skew can delay a takeover but never allow two writers.
"""

from __future__ import annotations

import re
from typing import Any

from botocore.exceptions import ClientError

from shardlog import constants as C
from shardlog.aws import Clients
from shardlog.clock import Clock, SystemClock
from shardlog.exceptions import LeaseHeldError, LeaseLostError, aws_error_code
from shardlog.tables import Lease, consumer_key

_NAMES = {
    "#owner": C.ATTR_LEASE_OWNER,
    "#counter": C.ATTR_LEASE_COUNTER,
    "#expires": C.ATTR_LEASE_EXPIRES_AT,
    "#switches": C.ATTR_OWNER_SWITCHES,
    "#cp": C.ATTR_CHECKPOINT,
    "#sub": C.ATTR_CHECKPOINT_SUBSEQ,
}
_HELD = "#owner = :me AND #counter = :held"
_CONDITIONAL_FAILED = "ConditionalCheckFailedException"
_PLACEHOLDER = re.compile(r"[#:][A-Za-z]+")


def _n(value: int) -> dict[str, str]:
    return {"N": str(value)}


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
            ":me": {"S": owner},
            ":zero": _n(0),
            ":one": _n(1),
            ":now": _n(now),
            ":expires": _n(now + self.lease_duration_ms),
        }
        sets = [
            "#owner = :me",
            "#counter = if_not_exists(#counter, :zero) + :one",
            "#expires = :expires",
        ]
        # A takeover (the common case: every ingest invocation is a new owner) counts an
        # owner switch. Only when that fails because we already own it, renew without one.
        takeover = self._request(
            group,
            partition_id,
            sets=[*sets, "#switches = if_not_exists(#switches, :zero) + :one"],
            condition="attribute_not_exists(#owner) OR (#expires <= :now AND NOT #owner = :me)",
            values=values,
        )
        written, held = self._try_update(takeover)
        if written:
            return held  # type: ignore[return-value]
        if held is not None and held.owner == owner:
            mine = self._request(
                group, partition_id, sets=sets, condition="#owner = :me", values=values
            )
            written, held = self._try_update(mine)
            if written:
                return held  # type: ignore[return-value]
        raise LeaseHeldError(
            group,
            partition_id,
            (held.owner if held else None) or "?",
            held.expires_at_ms if held else 0,
        )

    def _try_update(self, request: dict[str, Any]) -> tuple[bool, Lease | None]:
        """(True, the lease after the write), or (False, the lease that stood in the way)."""
        try:
            response = self.clients.dynamodb.update_item(
                **request, ReturnValues="ALL_NEW", ReturnValuesOnConditionCheckFailure="ALL_OLD"
            )
        except ClientError as exc:
            if aws_error_code(exc) != _CONDITIONAL_FAILED:
                raise
            item = exc.response.get("Item")
            return False, Lease.from_item(item) if item else None
        return True, Lease.from_item(response["Attributes"])

    def take(self, seen: Lease, owner: str) -> Lease:
        """Take or steal a lease as it was seen: conditional on the counter seen (KCL's take).

        Raises LeaseLostError when anyone wrote the lease since it was seen.
        """
        now = self.clock.now_ms()
        request = self._request(
            seen.group,
            seen.partition_id,
            sets=[
                "#owner = :me",
                "#counter = :seen + :one",
                "#expires = :expires",
                "#switches = if_not_exists(#switches, :zero) + :switch",
            ],
            condition="#counter = :seen",
            values={
                ":me": {"S": owner},
                ":one": _n(1),
                ":zero": _n(0),
                ":seen": _n(seen.counter),
                ":expires": _n(now + self.lease_duration_ms),
                ":switch": _n(0 if seen.owner == owner else 1),
            },
        )
        return self._send(seen, request, "another worker wrote it first")

    def renew(self, lease: Lease) -> Lease:
        expires = self.clock.now_ms() + self.lease_duration_ms
        return self._send(lease, self._fenced(lease, ["#expires = :expires"], [], expires=expires))

    def release(self, lease: Lease) -> Lease:
        """Give the lease up for immediate takeover (graceful handoff)."""
        return self._send(lease, self._fenced(lease, ["#expires = :zero"], ["#owner"]))

    def checkpoint(self, lease: Lease, checkpoint: str, subseq: int | None = None) -> Lease:
        """Record progress; also renews the lease. Raises LeaseLostError when fenced."""
        request = self.checkpoint_update(lease, checkpoint, subseq, now_ms=self.clock.now_ms())
        return self._send(lease, request)

    def checkpoint_update(
        self,
        lease: Lease,
        checkpoint: str,
        subseq: int | None = None,
        *,
        release: bool = False,
        now_ms: int | None = None,
    ) -> dict[str, Any]:
        """The fenced checkpoint write, usable as an UpdateItem request or a transact ``Update``.

        The ingest writer puts it in the same transaction as the partition head, so
        log and checkpoint never disagree; with ``release`` it also hands the lease
        back (the ingest Lambda holds a lease for one batch only).
        """
        sets = ["#cp = :cp", "#switches = :zero"]
        removes = []
        extra: dict[str, Any] = {":cp": {"S": checkpoint}}
        if subseq is None:
            removes.append("#sub")
        else:
            sets.append("#sub = :sub")
            extra[":sub"] = _n(subseq)
        expires = None
        if release:
            sets.append("#expires = :zero")
            removes.append("#owner")
        elif now_ms is not None:
            expires = now_ms + self.lease_duration_ms
            sets.append("#expires = :expires")
        return self._fenced(lease, sets, removes, expires=expires, extra=extra)

    def ensure(self, group: str, partition_id: str, parents: tuple[str, ...] = ()) -> None:
        """Create the lease item if it is missing (no owner, counter 0)."""
        try:
            self.clients.dynamodb.put_item(
                TableName=self.table_name,
                Item={
                    **consumer_key(group, partition_id),
                    C.ATTR_LEASE_COUNTER: _n(0),
                    C.ATTR_LEASE_EXPIRES_AT: _n(0),
                    C.ATTR_OWNER_SWITCHES: _n(0),
                    C.ATTR_PARENT_PARTITION_IDS: {"L": [{"S": p} for p in parents]},
                },
                ConditionExpression="attribute_not_exists(#g)",
                ExpressionAttributeNames={"#g": C.ATTR_CONSUMER_GROUP},
            )
        except ClientError as exc:
            if aws_error_code(exc) != _CONDITIONAL_FAILED:
                raise

    # --- request building ----------------------------------------------------------------
    def _fenced(
        self,
        lease: Lease,
        sets: list[str],
        removes: list[str],
        *,
        expires: int | None = None,
        extra: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """An update only the holder may make; it increments the fencing counter."""
        values: dict[str, Any] = {
            ":me": {"S": lease.owner or ""},
            ":held": _n(lease.counter),
            ":one": _n(1),
            ":zero": _n(0),
            **(extra or {}),
        }
        if expires is not None:
            values[":expires"] = _n(expires)
        return self._request(
            lease.group,
            lease.partition_id,
            sets=[*sets, "#counter = #counter + :one"],
            removes=removes,
            condition=_HELD,
            values=values,
        )

    def _request(
        self,
        group: str,
        partition_id: str,
        *,
        sets: list[str],
        condition: str,
        values: dict[str, Any],
        removes: list[str] | None = None,
    ) -> dict[str, Any]:
        expression = "SET " + ", ".join(sets)
        if removes:
            expression += " REMOVE " + ", ".join(removes)
        used = set(_PLACEHOLDER.findall(expression + " " + condition))
        return {
            "TableName": self.table_name,
            "Key": consumer_key(group, partition_id),
            "UpdateExpression": expression,
            "ConditionExpression": condition,
            "ExpressionAttributeNames": {k: v for k, v in _NAMES.items() if k in used},
            "ExpressionAttributeValues": {k: v for k, v in values.items() if k in used},
        }

    def _send(
        self, lease: Lease, request: dict[str, Any], detail: str = "fenced by leaseCounter"
    ) -> Lease:
        try:
            response = self.clients.dynamodb.update_item(**request, ReturnValues="ALL_NEW")
        except ClientError as exc:
            if aws_error_code(exc) != _CONDITIONAL_FAILED:
                raise
            raise LeaseLostError(
                lease.group, lease.partition_id, f"{detail} (held counter {lease.counter})"
            ) from exc
        return Lease.from_item(response["Attributes"])
