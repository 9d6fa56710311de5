"""A partition's life and lineage: the one place that knows OPEN, CLOSED and ENDED.

States (attribute ``state`` of the partitions table):

- ``OPEN``: its Kinesis shard takes new records;
- ``CLOSED``: Kinesis closed the shard (a split or a merge); ingest has not reached its
  end yet. Shard sync moves OPEN -> CLOSED and records ``endingKinesisSequenceNumber``;
- ``ENDED``: closed, and every record of the shard is committed to the log: its head will
  never move again. The ingest commit that reaches the shard's end, or shard sync once it
  sees that nothing is left after the ingest checkpoint, moves CLOSED -> ENDED.

No other transition exists, and every one is a conditional write on the state it leaves
(shardlog/dal/partitions.py), so two writers (two syncs, a sync and a commit) can race
without harm.

Lineage: a partition's parents (ParentShardId, AdjacentParentShardId) are consumed before
it, so the records of one partition key are always read in the order they were produced.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from enum import StrEnum

from shardlog import constants as C
from shardlog.exceptions import ShardlogError
from shardlog.tables import Lease, PartitionInfo, kinesis_seq_int


class PartitionState(StrEnum):
    OPEN = C.STATE_OPEN
    CLOSED = C.STATE_CLOSED
    ENDED = C.STATE_ENDED


TRANSITIONS: Mapping[PartitionState, frozenset[PartitionState]] = {
    PartitionState.OPEN: frozenset({PartitionState.CLOSED}),
    PartitionState.CLOSED: frozenset({PartitionState.ENDED}),
    PartitionState.ENDED: frozenset(),
}


def reaches_end(partition: PartitionInfo, checkpoint: str | None) -> bool:
    """A CLOSED partition whose ingest checkpoint reached the shard's ending sequence
    number (compared as integers: Kinesis sequence numbers are up to 128 digits)."""
    return (
        partition.state == PartitionState.CLOSED
        and partition.ending_kinesis_seq is not None
        and checkpoint is not None
        and kinesis_seq_int(checkpoint) >= kinesis_seq_int(partition.ending_kinesis_seq)
    )


# --- lineage -----------------------------------------------------------------------------
def lineage_known(partition: PartitionInfo | None) -> bool:
    """Shard sync recorded the partition's lineage. An item the ingest commit created first
    has no parents *yet*: taking it for a root would run a child ahead of its parents."""
    return partition is not None and partition.starting_hash_key is not None


def parents_done(
    parents: Iterable[str],
    partitions: Mapping[str, PartitionInfo],
    leases: Mapping[str, Lease],
) -> bool:
    """Every parent is ENDED and consumed to its end by the group (checkpoint SHARD_END).

    A parent the partitions table does not know (trimmed from Kinesis before shard sync
    ever saw it) holds nothing of the log and does not block its children, the
    way KCL treats a missing parent lease; this avoids KCL's stuck children. A retired
    parent (shardlog/retirement.py) is done for every group.
    """
    for parent in parents:
        info = partitions.get(parent)
        if info is None or info.retired:
            continue
        lease = leases.get(parent)
        if info.state != PartitionState.ENDED or lease is None or lease.checkpoint != C.SHARD_END:
            return False
    return True


def lineage_order(partitions: Iterable[PartitionInfo]) -> list[PartitionInfo]:
    """Partitions with every parent before its children (stable by id otherwise)."""
    by_id = {p.partition_id: p for p in partitions}
    ordered: list[PartitionInfo] = []
    placed: set[str] = set()
    pending = sorted(by_id)
    while pending:
        ready = [
            pid
            for pid in pending
            if all(parent in placed or parent not in by_id for parent in by_id[pid].parents)
        ]
        if not ready:
            raise ShardlogError(f"lineage has a cycle among {pending}")
        for pid in ready:
            ordered.append(by_id[pid])
            placed.add(pid)
        pending = [pid for pid in pending if pid not in placed]
    return ordered
