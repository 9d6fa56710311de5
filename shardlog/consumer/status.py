"""A group's progress per partition: owner, checkpoint, lag (`shardlog status --group`).

Read only, through the data-access layer (``Tables``, shardlog/dal/consumers.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from shardlog import constants as C
from shardlog.dal.consumers import group_kind as read_group_kind
from shardlog.exceptions import NotFoundError
from shardlog.partitions import lineage_known, parents_done
from shardlog.reader import LogReader
from shardlog.tables import Tables


@dataclass(frozen=True)
class PartitionProgress:
    partition_id: str
    state: str
    next_seq: int
    owner: str | None  # None when unowned; see live
    live: bool  # the owner's lease has not expired (by this machine's clock)
    checkpoint: str | None
    checkpoint_subseq: int | None
    lag_records: int  # committed records the group has not checkpointed past
    waiting_on_parents: bool  # or on shard sync to record its lineage
    parents: tuple[str, ...]

    def as_json(self) -> dict[str, Any]:
        return {
            "partitionId": self.partition_id,
            "state": self.state,
            "nextSeq": self.next_seq,
            "leaseOwner": self.owner,
            "leaseLive": self.live,
            "checkpoint": self.checkpoint,
            "checkpointSubSequenceNumber": self.checkpoint_subseq,
            "lagRecords": self.lag_records,
            "waitingOnParents": self.waiting_on_parents,
            "parents": list(self.parents),
        }


def lag_records(next_seq: int, checkpoint: str | None) -> int:
    """Records below the head past the checkpoint: 0 at SHARD_END, all of them without one."""
    if checkpoint == C.SHARD_END:
        return 0
    done = int(checkpoint) if checkpoint is not None and checkpoint.isdigit() else 0
    return max(0, next_seq - done)


def group_progress(
    tables: Tables, group: str, now_ms: int, *, history: bool = False
) -> list[PartitionProgress]:
    """Per partition of the live set (``history``: every partition), the group's progress;
    NotFoundError for a group that has neither a lease nor a group item (no worker of it
    ever started, no Lambda group of that name)."""
    lineage, leases = tables.group_view(group, history=history)
    partitions = lineage.known
    if not leases and group_kind(tables, group) is None:
        raise NotFoundError(
            f"no consumer group {group!r} in table {tables.names.consumers}: it has no lease "
            "and no group item (a worker group appears when its first worker starts, a Lambda "
            "group when it is deployed or `shardlog local up` registers it)"
        )
    rows = []
    for partition in lineage.live:
        partition_id = partition.partition_id
        lease = leases.get(partition_id)
        checkpoint = lease.checkpoint if lease else None
        rows.append(
            PartitionProgress(
                partition_id=partition_id,
                state=partition.state,
                next_seq=partition.next_seq,
                owner=lease.owner if lease else None,
                live=bool(lease and lease.is_live(now_ms)),
                checkpoint=checkpoint,
                checkpoint_subseq=lease.checkpoint_subseq if lease else None,
                lag_records=lag_records(partition.next_seq, checkpoint),
                waiting_on_parents=checkpoint != C.SHARD_END
                and not (
                    lineage_known(partition) and parents_done(partition.parents, partitions, leases)
                ),
                parents=partition.parents,
            )
        )
    return rows


def lag_ms(reader: LogReader, row: PartitionProgress, now_ms: int) -> int:
    """How old (by Kinesis arrival) the partition's oldest undelivered record is: the
    group's IteratorAge on the log. 0 when it is caught up (one read when it is not)."""
    if row.lag_records <= 0:
        return 0
    start = int(row.checkpoint) if row.checkpoint and row.checkpoint.isdigit() else 0
    first = next(iter(reader.records(row.partition_id, start, start + 1)), None)
    return max(0, now_ms - first.arrival_ms) if first is not None else 0


def group_kind(tables: Tables, group: str) -> str | None:
    """What the group's "$group" item says it is ("lambda" for a Lambda consumer group), or
    None when it has no such item (a worker group, or no group)."""
    return read_group_kind(tables.clients, tables.names.consumers, group)
