"""Seeking an existing consumer group (`shardlog group seek`): every partition's checkpoint
moved to a new position, for worker and Lambda groups alike, fenced against the consumers
that run meanwhile.

Invariants:

- **Fenced.** After ``seek`` returns, no consumer can write from its old position: every
  lease the seek moved was taken (its ``leaseCounter`` moved) and then written by the seek
  last, so the next renewal, checkpoint, retry state or give-up of whoever held it is
  refused and that consumer stops (a worker at its next lease write or listing, a Lambda
  runner at its next write). The one batch such a consumer has in flight may still be
  delivered, as after any lease loss; its checkpoint is refused. The next owner starts at
  the new position.
- **Parents before children.** The new positions are computed per partition in lineage
  order as group creation computes start positions (shardlog/consumer/creation.py); a
  partition is ``SHARD_END`` only when every parent is, and a child whose parent the seek
  re-opens (``SHARD_END`` before, a seq after) is read again from seq 0 once the parent is
  done: its records are all newer than the parent's.
- **Nothing lost without being asked.** The position is the caller's; the records it skips
  or reprocesses are counted per partition before anything is written (``preview``), and a
  Lambda group's give-up that is recorded but perhaps not sent yet (``pendingOnFailure``)
  refuses the seek, so no on-failure record is dropped.

Protocol (requests in shardlog/dal/seek.py):

1. **Lock.** One conditional write of the group's ``$group`` item takes the group's seek
   lock (``seekOwner`` until ``seekExpiresAt``): two seeks of one group never interleave.
2. **Hold.** Each lease item in scope (every partition the partitions table lists; for
   ``AT_SEQUENCE``, the partitions named and their descendants) is created if missing
   (so no consumer creates it later at the group's creation position) and *held*: one
   write that makes the seek its owner until the lock expires and moves ``leaseCounter``,
   whatever the owner and counter were. From here no consumer of these partitions can
   write, nor take one: a worker between process and checkpoint has its checkpoint
   refused; a runner mid-invocation has its checkpoint (or retry state, or give-up)
   refused; a runner that recorded a give-up and died left ``pendingOnFailure``, which the
   hold returns.
3. **Check.** A pending give-up on any held lease: every hold is released unchanged, the
   lock removed, the seek refused (the group's runner sends that record at its next wake;
   seek again then).
4. **Positions.** Computed from the held leases (nobody can move them now) and the
   partitions: ``TRIM_HORIZON``, ``LATEST`` and ``AT_TIMESTAMP`` as at group creation,
   for every partition; ``AT_SEQUENCE``: the seqs named (each within 0 and the partition's
   head), the re-opened partitions' descendants at 0, the rest unchanged.
5. **Place**, in lineage order (parents first): one write per lease, fenced on the hold,
   sets the new checkpoint, releases the lease (owner removed) and clears the checkpoint's
   sub-sequence number, a Lambda group's retry state and pending give-up, and any handoff
   request. A child is placed only after its parents, so when it becomes takeable its
   parents' new positions are already what a consumer sees. A lease held but not moved
   (a descendant that needs no reset) is released unchanged. A hold lost (the seek took
   longer than the lock and a consumer took the lease once it expired, or a worker stole
   it to balance, counting the seek as a loaded worker) is taken again, fencing that
   consumer, and placed again, once.
6. **Record.** The seek (time, position, who, the new checkpoints) is written to the group
   item with the lock's removal.

A seek that dies midway leaves the partitions it placed at the new position and the others
at their old checkpoint; its holds and lock expire after ``hold_ms``; running it again
finishes it. A Lambda group resumes at its next wake (a commit, or the sweep within a
minute); workers take the released leases at their next listing.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from shardlog import constants as C
from shardlog.clock import Clock, SystemClock
from shardlog.consumer.creation import WORKERS, positions_at_creation, read_group, settled
from shardlog.consumer.exceptions import SeekRefusedError
from shardlog.consumer.positions import InitialPosition, StartPosition
from shardlog.dal.seek import (
    Held,
    LastSeek,
    SeekLeases,
    abandon_seek,
    begin_seek,
    finish_seek,
)
from shardlog.exceptions import LeaseLostError, NotFoundError, ValidationError
from shardlog.partitions import PartitionState, lineage_order
from shardlog.reader import LogReader
from shardlog.retirement import revive_for
from shardlog.tables import Lease, PartitionInfo, Tables

logger = logging.getLogger("shardlog.consumer")

SEEK_HOLD_MS = 60_000  # how long the seek's lock and holds last if it dies midway


@dataclass(frozen=True)
class Move:
    """One partition's checkpoint before and after the seek (None: no checkpoint, seq 0)."""

    partition_id: str
    state: str
    head: int
    old: str | None
    new: str

    @property
    def reprocess(self) -> int:
        """Records the group had passed that it will deliver again."""
        return max(0, min(_seq(self.old, self.head), self.head) - _seq(self.new, self.head))

    @property
    def skip(self) -> int:
        """Committed records the group had not passed that it will not deliver."""
        return max(0, min(_seq(self.new, self.head), self.head) - _seq(self.old, self.head))

    def as_json(self) -> dict[str, Any]:
        return {
            "partitionId": self.partition_id,
            "state": self.state,
            "nextSeq": self.head,
            "oldCheckpoint": self.old,
            "newCheckpoint": self.new,
            "reprocess": self.reprocess,
            "skip": self.skip,
        }


def _seq(checkpoint: str | None, head: int) -> int:
    if checkpoint == C.SHARD_END:
        return head
    return int(checkpoint) if checkpoint is not None and checkpoint.isdigit() else 0


@dataclass(frozen=True)
class SeekPlan:
    """What a seek moves (``moves``, in lineage order) or moved."""

    group: str
    kind: str
    position: StartPosition
    moves: list[Move] = field(default_factory=list)
    at_ms: int = 0
    by: str = ""
    done: bool = False

    @property
    def reprocess(self) -> int:
        return sum(m.reprocess for m in self.moves)

    @property
    def skip(self) -> int:
        return sum(m.skip for m in self.moves)

    def as_json(self) -> dict[str, Any]:
        return {
            "group": self.group,
            "groupKind": self.kind,
            "position": self.position.describe(),
            "done": self.done,
            "at": self.at_ms,
            "by": self.by,
            "reprocess": self.reprocess,
            "skip": self.skip,
            "partitions": [m.as_json() for m in self.moves],
        }


# --- positions (pure, but AT_TIMESTAMP's search of the log) ----------------------------------
def validate_named(partitions: Iterable[PartitionInfo], position: StartPosition) -> None:
    """``AT_SEQUENCE``: each partition named exists, and its seq is at most its head."""
    if position.kind is not InitialPosition.AT_SEQUENCE:
        return
    if not position.sequences:
        raise ValidationError("--at-seq", "name at least one PARTITION=SEQ", limit=1)
    heads = {p.partition_id: p.next_seq for p in partitions}
    for partition_id, seq in sorted(position.sequences.items()):
        if partition_id not in heads:
            raise ValidationError(
                "--at-seq",
                f"no partition {partition_id!r} in the partitions table (known: "
                f"{', '.join(sorted(heads)) or 'none'})",
            )
        head = heads[partition_id]
        if seq > head:
            raise ValidationError(
                "--at-seq",
                f"{partition_id}={seq} is past partition {partition_id}'s head {head} "
                f"(seq 0 to {head}: {head} is the next record to be committed)",
                limit=head,
            )


def scope(partitions: Iterable[PartitionInfo], position: StartPosition) -> list[PartitionInfo]:
    """The partitions a seek holds, in lineage order: all of them, or for ``AT_SEQUENCE``
    the partitions named and every descendant of theirs (one of them may need a reset)."""
    ordered = lineage_order(partitions)
    if position.kind is not InitialPosition.AT_SEQUENCE:
        return ordered
    chosen = set(position.sequences)
    for partition in ordered:  # parents come first: a descendant's parent is decided
        if any(parent in chosen for parent in partition.parents):
            chosen.add(partition.partition_id)
    return [p for p in ordered if p.partition_id in chosen]


def new_positions(
    reader: LogReader,
    partitions: list[PartitionInfo],
    current: Mapping[str, str | None],
    position: StartPosition,
) -> dict[str, str]:
    """The new checkpoint of every partition the seek moves (``current``: the checkpoints as
    the seek holds them)."""
    if position.kind is not InitialPosition.AT_SEQUENCE:
        return positions_at_creation(reader, partitions, position)
    return named_positions(partitions, current, position.sequences)


def named_positions(
    partitions: Iterable[PartitionInfo],
    current: Mapping[str, str | None],
    sequences: Mapping[str, int],
) -> dict[str, str]:
    """``AT_SEQUENCE``: each named partition at its seq; a descendant of a re-opened one
    (``SHARD_END`` before, a seq now) at 0; nothing else moves."""
    ordered = lineage_order(partitions)
    known = {p.partition_id for p in ordered}
    positions = {p.partition_id: current.get(p.partition_id) or "0" for p in ordered}
    moved: dict[str, str] = {}
    reopened: set[str] = set()
    for partition in ordered:
        pid = partition.partition_id
        ended = partition.state == PartitionState.ENDED
        if pid in sequences:
            seq = sequences[pid]
            value = settled(partition, seq, ended and seq >= partition.next_seq, positions, known)
        elif reopened.intersection(partition.parents):
            value = settled(partition, 0, ended and partition.next_seq == 0, positions, known)
        else:
            continue
        if positions[pid] == C.SHARD_END and value != C.SHARD_END:
            reopened.add(pid)
        positions[pid] = moved[pid] = value
    return moved


def moves_of(
    partitions: Iterable[PartitionInfo],
    current: Mapping[str, str | None],
    positions: Mapping[str, str],
) -> list[Move]:
    return [
        Move(
            p.partition_id,
            p.state,
            p.next_seq,
            current.get(p.partition_id),
            positions[p.partition_id],
        )
        for p in lineage_order(partitions)
        if p.partition_id in positions
    ]


# --- the seek ------------------------------------------------------------------------------
class GroupSeek:
    """Previews (reads only) and performs seeks of the groups of one deployment."""

    def __init__(
        self,
        tables: Tables,
        reader: LogReader,
        *,
        clock: Clock | None = None,
        hold_ms: int = SEEK_HOLD_MS,
    ) -> None:
        if hold_ms <= 0:
            raise ValueError("hold_ms must be positive")
        self.tables = tables
        self.reader = reader
        self.clock = clock or SystemClock()
        self.hold_ms = hold_ms
        self.consumers_table = tables.names.consumers
        self.writes = SeekLeases(tables.clients, self.consumers_table, self.clock, hold_ms)

    def preview(self, group: str, position: StartPosition) -> SeekPlan:
        """What the seek would move now, from one listing (nothing written)."""
        kind, creation = self._group(group)
        partitions = self.tables.list_partitions()
        validate_named(partitions, position)
        current = self._listed(group, partitions, creation)
        in_scope = scope(partitions, position)
        positions = new_positions(self.reader, partitions, current, position)
        return SeekPlan(group, kind, position, moves_of(in_scope, current, positions))

    def seek(self, group: str, position: StartPosition, by: str) -> SeekPlan:
        """Steps 1 to 6; the plan carried out. SeekRefusedError when refused or stopped."""
        kind, creation = self._group(group)
        partitions = self.tables.list_partitions()
        validate_named(partitions, position)
        seeker = f"seek:{by}:{uuid.uuid4().hex[:8]}"
        now = self.clock.now_ms()
        self._lock(group, seeker, kind, now)
        held: dict[str, Held] = {}
        try:
            in_scope = scope(partitions, position)
            for partition in in_scope:
                held[partition.partition_id] = self._hold(group, partition, seeker, creation)
            self._refuse_pending_give_ups(group, held)
            current = self._listed(group, partitions, creation)  # the parents out of scope
            current.update({pid: h.lease.checkpoint for pid, h in held.items()})
            positions = new_positions(self.reader, partitions, current, position)
            moves = moves_of(in_scope, current, positions)
            for move in moves:
                self._place(group, held.pop(move.partition_id).lease, move.new, seeker)
            for unmoved in list(held):
                self.writes.release(held.pop(unmoved).lease)
            # After the moves: history the group reads again is live (shardlog/retirement.py).
            back = [m for m in moves if m.state == C.STATE_ENDED and m.new != C.SHARD_END]
            revive_for(self.tables.clients, self.tables.names, (m.partition_id for m in back))
        except BaseException:
            self._give_back(group, held, seeker)
            raise
        record = LastSeek(now, position.describe(), by, {m.partition_id: m.new for m in moves})
        if not finish_seek(self.tables.clients, self.consumers_table, group, seeker, record):
            logger.warning("%s: the seek's lock expired before it was recorded", group)
        logger.info(
            "%s: seek to %s by %s done: %d partitions moved", group, record.position, by, len(moves)
        )
        return SeekPlan(group, kind, position, moves, now, by, done=True)

    # --- steps ---------------------------------------------------------------------------
    def _group(self, group: str) -> tuple[str, Mapping[str, str]]:
        """(kind, start positions at creation); NotFoundError for no group of that name."""
        record = read_group(self.tables.clients, self.consumers_table, group)
        if record is not None:
            return record.kind, record.positions
        if self.tables.list_leases(group):  # a worker group from before group items
            return WORKERS, {}
        raise NotFoundError(
            f"no consumer group {group!r} in table {self.consumers_table}: it has no lease and "
            "no group item (a worker group appears when its first worker starts, a Lambda "
            "group when it is deployed or `shardlog local up` registers it)"
        )

    def _listed(
        self, group: str, partitions: Iterable[PartitionInfo], creation: Mapping[str, str]
    ) -> dict[str, str | None]:
        """Each partition's checkpoint as listed; without a lease item, the position the
        group would create it at (its start position at creation, else none: seq 0)."""
        leases = {lease.partition_id: lease for lease in self.tables.list_leases(group)}
        return {
            p.partition_id: leases[p.partition_id].checkpoint
            if p.partition_id in leases
            else creation.get(p.partition_id)
            for p in partitions
        }

    def _lock(self, group: str, seeker: str, kind: str, now: int) -> None:
        refused = begin_seek(
            self.tables.clients,
            self.consumers_table,
            group,
            seeker,
            kind,
            now_ms=now,
            hold_ms=self.hold_ms,
        )
        if refused is not None:
            raise SeekRefusedError(
                f"group {group!r}: another seek ({refused.seek_owner}) is in progress until "
                f"{refused.seek_expires_at_ms} (epoch ms); nothing was moved: wait for it and "
                "look at `shardlog status --group`, then seek again if needed"
            )

    def _hold(
        self, group: str, partition: PartitionInfo, seeker: str, creation: Mapping[str, str]
    ) -> Held:
        """A missing lease item is created first, at the group's creation position (as a
        consumer would create it), so a seek that stops before placing it changes nothing."""
        start = creation.get(partition.partition_id)
        self.writes.ensure(
            group, partition.partition_id, partition.parents, None if start == "0" else start
        )
        return self.writes.hold(group, partition.partition_id, seeker)

    def _refuse_pending_give_ups(self, group: str, held: Mapping[str, Held]) -> None:
        pending = {pid: h.pending for pid, h in held.items() if h.pending is not None}
        if not pending:
            return
        ranges = ", ".join(
            f"{pid} seqs {p.start} to {p.end - 1}" for pid, p in sorted(pending.items()) if p
        )
        raise SeekRefusedError(
            f"group {group!r}: a give-up is recorded and its on-failure record may not be sent "
            f"yet ({ranges}); nothing was moved: the group's runner sends it at its next wake "
            "(a commit, or the sweep within a minute): seek again after that"
        )

    def _place(self, group: str, held: Lease, checkpoint: str, seeker: str) -> Lease:
        """The placement, fenced on the hold; a hold lost is taken again once."""
        try:
            return self.writes.place(held, checkpoint)
        except LeaseLostError:
            logger.warning(
                "%s/%s: the seek's hold expired and the lease was taken: taking it again",
                group,
                held.partition_id,
            )
        again = self.writes.hold(group, held.partition_id, seeker)
        try:
            return self.writes.place(again.lease, checkpoint)
        except LeaseLostError as exc:
            raise SeekRefusedError(
                f"group {group!r}: the seek lost its hold on {held.partition_id} twice (the "
                f"seek took longer than {self.hold_ms} ms); partitions before it in lineage "
                "order are moved, the rest are not: seek again"
            ) from exc

    def _give_back(self, group: str, held: Mapping[str, Held], seeker: str) -> None:
        """The seek stops: its remaining holds released unchanged, its lock removed (what
        cannot be written now expires after hold_ms)."""
        for item in held.values():
            try:
                self.writes.release(item.lease)
            except Exception:  # expires after hold_ms; the error that stopped us matters more
                logger.warning("%s/%s: hold left to expire", group, item.lease.partition_id)
        try:
            abandon_seek(self.tables.clients, self.consumers_table, group, seeker)
        except Exception:
            logger.warning("%s: the seek's lock is left to expire", group)
