"""A consumer group's creation: its start position fixed once, per partition, for worker and
Lambda groups alike.

Invariant: a group's start position is fixed when the group is created, per partition; a
partition that appears later starts from its beginning once its parents are consumed.

Protocol:

1. **Positions.** For every partition the partitions table lists at creation (lineage known
   or not), the first seq the group will read, or ``SHARD_END`` (nothing to read). In
   lineage order (docs/CONSUMERS.md, "Start positions"):

   - ``TRIM_HORIZON``: 0;
   - ``LATEST``: an OPEN partition's head at creation; a CLOSED or ENDED one is done
     (every record of it arrived before the group existed);
   - ``AT_TIMESTAMP T``: the first committed record that arrived at or after T, else the
     head at creation;
   - ``AT_SEQUENCE``: the listed seq (at most the head), 0 for an unlisted partition.

   A position at or past the end of an ENDED partition, and a done CLOSED one, becomes
   ``SHARD_END`` only when every known parent did too, so no child starts ahead of an
   ancestor the group still reads.
2. **Creation.** One conditional write of the group's ``$group`` item (``groupKind``,
   ``groupCreatedAt``, ``groupStartPosition`` and the map ``groupStartPositions``;
   ``create_group`` in shardlog/dal/consumers.py): the first writer creates the group; a
   later one reads the group it found (same kind, else refused; for a Lambda group the
   same start position, else refused: it cannot change).
3. **Lease items.** Each lease item is created (``LeaseManager.ensure``, conditional, so
   never twice) with the position of step 1 as its checkpoint, by creation itself and by
   any worker or runner that finds it missing, so a crash between 2 and 3 loses nothing:
   the map in ``$group`` is the record. A partition absent from the map appeared after
   creation: its lease item has no checkpoint and it is read from seq 0.

4. **History.** Every ENDED partition the group does not start at ``SHARD_END`` is revived
   into the live set (shardlog/retirement.py): a retired partition holds history the new
   group reads, and the revival refuses any retirement judged before the group existed.

A group registered before the map existed (an earlier version) gets the map on its next
registration, computed then; partitions it already has lease items for keep them.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterable, Mapping

from shardlog import constants as C
from shardlog.aws import Clients
from shardlog.consumer.positions import InitialPosition, StartPosition, resolve_start
from shardlog.dal.consumers import LAMBDA, WORKERS, GroupRecord, create_group, read_group
from shardlog.exceptions import ConfigurationError
from shardlog.lease import LeaseManager
from shardlog.partitions import PartitionState, lineage_known, lineage_order
from shardlog.reader import LogReader
from shardlog.retirement import needs_history, revive_for
from shardlog.tables import PartitionInfo, Tables

logger = logging.getLogger("shardlog.consumer")

__all__ = [
    "LAMBDA",
    "WORKERS",
    "GroupCreator",
    "GroupRecord",
    "positions_at_creation",
    "read_group",
    "settled",
]
_KIND_NAMES = {WORKERS: "worker", LAMBDA: "Lambda"}


def positions_at_creation(
    reader: LogReader, partitions: Iterable[PartitionInfo], start: StartPosition
) -> dict[str, str]:
    """Step 1: every listed partition's position, parents before children."""
    ordered = lineage_order(partitions)
    known = {p.partition_id for p in ordered}
    positions: dict[str, str] = {}
    for partition in ordered:
        seq, done = _start_of(reader, partition, start)
        positions[partition.partition_id] = settled(partition, seq, done, positions, known)
    return positions


def settled(
    partition: PartitionInfo,
    seq: int,
    done: bool,
    positions: Mapping[str, str],
    known: Collection[str],
) -> str:
    """A partition's position: ``SHARD_END`` when nothing is left to read in it and every
    known parent's position is ``SHARD_END`` too (so no child is marked done ahead of an
    ancestor the group still reads), else the seq (also used by shardlog/consumer/seek.py)."""
    parents_done = all(positions.get(p) == C.SHARD_END for p in partition.parents if p in known)
    return C.SHARD_END if done and parents_done else str(seq)


def _start_of(
    reader: LogReader, partition: PartitionInfo, start: StartPosition
) -> tuple[int, bool]:
    """(first seq, nothing left to read in it) for one partition at creation."""
    if start.kind is InitialPosition.TRIM_HORIZON:  # the oldest record the log still has
        horizon = partition.trim_horizon
        return horizon, partition.state == PartitionState.ENDED and partition.next_seq <= horizon
    if start.kind is InitialPosition.LATEST and partition.state != PartitionState.OPEN:
        return partition.next_seq, True  # closed before the group existed: nothing after it
    seq = resolve_start(reader, partition.partition_id, start, head=partition.next_seq)
    return seq, partition.state == PartitionState.ENDED and seq >= partition.next_seq


class GroupCreator:
    """Creates a group (steps 1 to 3), or finds the one that exists."""

    def __init__(
        self, clients: Clients, tables: Tables, reader: LogReader, leases: LeaseManager
    ) -> None:
        self.clients = clients
        self.tables = tables
        self.reader = reader
        self.leases = leases

    def create(
        self, group: str, kind: str, start: StartPosition, now_ms: int, *, strict: bool
    ) -> GroupRecord:
        """The group's record, creating it if it does not exist. ``strict``: an existing
        group created with another start position is refused (Lambda groups: the setting
        cannot change); else it keeps its own (worker groups: the group's, not the worker's)."""
        consumers = self.tables.names.consumers
        existing = read_group(self.clients, consumers, group)
        if existing is not None and (existing.kind != kind or existing.positioned):
            return self._found(existing, kind, start, strict=strict)
        partitions = self.tables.list_partitions()
        positions = positions_at_creation(self.reader, partitions, start)
        record = create_group(
            self.clients,
            consumers,
            group,
            kind,
            existing.created_at_ms if existing else now_ms,
            start.describe(),
            positions,
        )
        if record is None:  # refused: another creation came first
            found = read_group(self.clients, consumers, group)
            assert found is not None, "a refused creation leaves the group that refused it"
            return self._found(found, kind, start, strict=strict)
        self.ensure_leases(record, partitions)
        # After the $group item: a retirement pass that did not see this group is refused.
        revive_for(self.clients, self.tables.names, needs_history(partitions, positions))
        logger.info(
            "group %s (%s) created at %s: %s",
            group,
            kind,
            start.describe(),
            ", ".join(f"{p}={v}" for p, v in sorted(positions.items())) or "no partitions yet",
        )
        return record

    def ensure_leases(self, record: GroupRecord, partitions: Iterable[PartitionInfo]) -> None:
        """Step 3 for every partition whose lineage is known (the others wait for it)."""
        for partition in partitions:
            if lineage_known(partition):
                self.leases.ensure(
                    record.group,
                    partition.partition_id,
                    partition.parents,
                    checkpoint=record.position(partition.partition_id),
                )

    def _found(
        self, record: GroupRecord, kind: str, start: StartPosition, *, strict: bool
    ) -> GroupRecord:
        if record.kind != kind:
            raise ConfigurationError(
                f"consumer group {record.group!r} is not a {_KIND_NAMES.get(kind, kind)} consumer "
                f"group (its kind is {record.kind!r}); a group is one or the other: pick another "
                "group name"
            )
        if strict and record.start != start.describe():
            raise ConfigurationError(
                f"consumer group {record.group!r}: starting position {start.describe()} refused: "
                f"the group was created at {record.start} and its positions were fixed then; "
                "keep that setting and move the group with `shardlog group seek`, or create a "
                "new group (another name)"
            )
        return record
