"""The partitions table's requests: the ingest state read and commit, lineage, transitions.

Protocol modules (shardlog/writer.py, shardlog/shardsync.py) decide what is fenced by what
and in which order; the request shapes, their conditions and the test of a refusal are
here, once:

- ``read_with_lease``: the partition item and a group's lease item as of one instant (one
  transactional read; the writer's step 2);
- ``commit_batch``: the new head, conditional on the head read (and, for a commit made
  from remembered state, on the partition still being OPEN), together with the fenced
  checkpoint write the lease layer built, in one transaction; a cancelled transaction is
  answered as a ``CommitRefusal`` naming which condition failed;
- ``record_lineage``: what shard sync records of a shard (creates the item OPEN);
- ``close`` and ``end``: the two transitions of shardlog/partitions.py, each conditional on
  the state it leaves;
- ``advance_horizon`` and ``mark_tagged``: retention's two writes (shardlog/retention.py),
  each conditional on only moving its field up, the horizon never past the head and the
  tagged mark never past the horizon.
- ``retire`` and ``revive``: the live set (shardlog/retirement.py): an ENDED partition
  leaves it, conditional on the revision it was judged at; a revival brings it back and
  bumps that revision, so a retirement judged before it cannot land after it.

The benchmarks' fixtures (``increment_head``, ``set_head``) write without a fence and are
never used by the log itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from botocore.exceptions import ClientError

from shardlog import constants as C
from shardlog.aws import Clients
from shardlog.constants import ATTR_NEXT_SEQUENCE_NUMBER
from shardlog.exceptions import ShardlogError
from shardlog.partitions import TRANSITIONS, PartitionState, reaches_end
from shardlog.tables import (
    TRANSACTION_CANCELED,
    Lease,
    PartitionInfo,
    TableNames,
    Update,
    cancelled_items,
    consumer_key,
    n,
    partition_key,
    put_items,
    s,
    update_item,
)

# The DynamoDB operations of the transactional read and commit (request meters name them).
TRANSACTIONAL_READ: Final = "TransactGetItems"
TRANSACTIONAL_WRITE: Final = "TransactWriteItems"


# --- state clauses -------------------------------------------------------------------------
def initial_state() -> tuple[tuple[str, ...], dict[str, dict[str, str]]]:
    """The state clauses of a write that may create the partition item: it starts OPEN
    (and an existing item keeps its state), in the live set."""
    return (
        "#state = if_not_exists(#state, :open)",
        "#live = :live",
    ), {":open": s(PartitionState.OPEN), ":live": s(C.LIVE_VALUE)}


def state_on_commit(
    partition: PartitionInfo, checkpoint: str | None
) -> tuple[tuple[str, ...], dict[str, dict[str, str]]]:
    """The state clauses of an ingest commit (SET clauses and their values): an item the
    commit creates starts OPEN (shard sync has not seen the shard yet); a commit whose
    checkpoint reaches the end of a CLOSED shard moves it to ENDED, in the same write."""
    if partition.next_seq < 0:  # no item yet
        return initial_state()
    if reaches_end(partition, checkpoint):
        return ("#state = :ended",), {":ended": s(PartitionState.ENDED)}
    return (), {}


def still_open() -> tuple[str, dict[str, dict[str, str]]]:
    """The condition (and its value) of a write that holds only while the partition is
    OPEN: the ingest commit made from remembered state (shard sync may have closed it). An
    item without ``state`` is OPEN, as ``PartitionInfo.from_item`` reads it."""
    return (
        "(attribute_not_exists(#state) OR #state = :stillOpen)",
        {":stillOpen": s(PartitionState.OPEN)},
    )


# --- transitions ---------------------------------------------------------------------------
def transition(table: str, partition_id: str, old: PartitionState, new: PartitionState) -> Update:
    """The conditional write of one transition (it holds only while the state is ``old``)."""
    if new not in TRANSITIONS[old]:
        raise ValueError(f"no transition {old} -> {new} (see shardlog/partitions.py)")
    return Update(
        table,
        partition_key(partition_id),
        ("#state = :new",),
        condition="#state = :old",
        values={":new": s(new), ":old": s(old)},
    )


def close(clients: Clients, table: str, partition_id: str, ending_kinesis_seq: str) -> bool:
    """OPEN -> CLOSED, recording where the shard ends. False when it was not OPEN."""
    update = transition(table, partition_id, PartitionState.OPEN, PartitionState.CLOSED)
    update = update.extended(sets=("#kend = :kend",), values={":kend": s(ending_kinesis_seq)})
    return update_item(clients, update).written


def end(clients: Clients, table: str, partition_id: str) -> bool:
    """CLOSED -> ENDED. False when it was not CLOSED (another sync or the commit did it)."""
    update = transition(table, partition_id, PartitionState.CLOSED, PartitionState.ENDED)
    return update_item(clients, update).written


# --- the live set ----------------------------------------------------------------------
def retire(clients: Clients, table: str, partition: PartitionInfo, now_ms: int) -> bool:
    """Take an ENDED partition out of the live set (``live`` removed, ``retiredAt`` set),
    only while it is still at the revision it was judged at (no revival since). False when
    refused: revived, already retired, or not ENDED."""
    if partition.live_revision:
        revision, values = "#liveRevision = :rev", {":rev": n(partition.live_revision)}
    else:
        revision, values = "attribute_not_exists(#liveRevision)", {}
    update = Update(
        table,
        partition_key(partition.partition_id),
        ("#retiredAt = :now",),
        ("#live",),
        condition=f"#state = :ended AND attribute_exists(#live) AND {revision}",
        values={":now": n(now_ms), ":ended": s(PartitionState.ENDED), **values},
    )
    return update_item(clients, update).written


def revive(clients: Clients, table: str, partition_id: str) -> bool:
    """Bring a partition (back) into the live set and bump its revision, which refuses any
    retirement judged before. False when there is no such partition item."""
    update = Update(
        table,
        partition_key(partition_id),
        ("#live = :live", "#liveRevision = if_not_exists(#liveRevision, :zero) + :one"),
        ("#retiredAt",),
        condition="attribute_exists(#state)",
        values={":live": s(C.LIVE_VALUE), ":zero": n(0), ":one": n(1)},
    )
    return update_item(clients, update).written


# --- the ingest commit ---------------------------------------------------------------------
@dataclass(frozen=True)
class HeadCommit:
    """What an ingest commit writes to the partition item."""

    partition: PartitionInfo  # as read (``next_seq`` < 0: no item yet)
    head: int  # the head the segments were cut at (the condition)
    new_head: int
    checkpoint: str  # the ingest checkpoint written with it (decides ENDED)
    committed_at_ms: int
    segments: int
    added_bytes: int
    only_while_open: bool = False  # the state came from memory: shard sync may have closed it


@dataclass(frozen=True)
class CommitRefusal:
    """The commit transaction was cancelled, nothing written: ``lease_fenced`` (the checkpoint
    write's fence failed), else ``head_moved`` (the head's condition failed)."""

    lease_fenced: bool
    head_moved: bool
    cause: ClientError


class PartitionsTable:
    def __init__(self, clients: Clients, names: TableNames | None = None) -> None:
        self.clients = clients
        self.names = names or TableNames()

    def read_with_lease(
        self, partition_id: str, group: str
    ) -> tuple[PartitionInfo | None, Lease | None]:
        """The partition item and the group's lease item on it, as of one instant."""
        response = self.clients.dynamodb.transact_get_items(
            TransactItems=[
                {"Get": {"TableName": self.names.partitions, "Key": partition_key(partition_id)}},
                {
                    "Get": {
                        "TableName": self.names.consumers,
                        "Key": consumer_key(group, partition_id),
                    }
                },
            ]
        )
        partition_item, lease_item = (r.get("Item") for r in response["Responses"])
        return (
            PartitionInfo.from_item(partition_item) if partition_item else None,
            Lease.from_item(lease_item) if lease_item else None,
        )

    def commit_batch(self, commit: HeadCommit, fenced_checkpoint: Update) -> CommitRefusal | None:
        """The new head and the fenced checkpoint in one transaction; None when it committed.

        Raises ShardlogError when the transaction was cancelled for another reason than a
        condition (a conflict with another transaction, throttling): nothing was written.
        """
        try:
            self.clients.dynamodb.transact_write_items(
                TransactItems=[
                    {"Update": self._head_update(commit).request()},
                    {"Update": fenced_checkpoint.request()},
                ]
            )
        except ClientError as exc:
            failed = cancelled_items(exc)
            if failed is None:
                raise
            if failed[1:2] == [True] or failed[:1] == [True]:
                return CommitRefusal(failed[1:2] == [True], failed[:1] == [True], exc)
            raise ShardlogError(
                f"commit of {commit.partition.partition_id} cancelled: {exc}",
                aws_error_code=TRANSACTION_CANCELED,
            ) from exc
        return None

    def _head_update(self, commit: HeadCommit) -> Update:
        partition = commit.partition
        sets = [
            "#next = :new",
            "#committedAt = :now",
            "#segs = if_not_exists(#segs, :zero) + :segs",
            "#bytes = if_not_exists(#bytes, :zero) + :bytes",
        ]
        values: dict[str, Any] = {
            ":new": n(commit.new_head),
            ":now": n(commit.committed_at_ms),
            ":segs": n(commit.segments),
            ":bytes": n(commit.added_bytes),
            ":zero": n(0),
        }
        if partition.next_seq < 0:  # no item yet: shard sync has not seen this shard
            condition = "attribute_not_exists(#next)"
        else:
            condition = "#next = :old"
            values[":old"] = n(commit.head)
        if commit.only_while_open:  # the partition as the writer's last commit left it: OPEN
            open_condition, open_values = still_open()
            condition = f"{condition} AND {open_condition}"
            values.update(open_values)
        state_sets, state_values = state_on_commit(partition, commit.checkpoint)
        values.update(state_values)
        return Update(
            self.names.partitions,
            partition_key(partition.partition_id),
            (*sets, *state_sets),
            condition=condition,
            values=values,
        )

    # --- shard sync ----------------------------------------------------------------------
    def record_lineage(
        self,
        partition_id: str,
        parents: Sequence[str],
        starting_hash_key: str,
        ending_hash_key: str,
        starting_kinesis_seq: str | None = None,
    ) -> None:
        """Create the partition item (OPEN, head 0), or add lineage to one the writer created
        first (its head and state kept)."""
        state_sets, state_values = initial_state()
        sets = [
            "#parents = :parents",
            "#hstart = :start",
            "#hend = :end",
            "#next = if_not_exists(#next, :zero)",
            *state_sets,
        ]
        values: dict[str, Any] = {
            ":parents": {"L": [s(p) for p in parents]},
            ":start": s(starting_hash_key),
            ":end": s(ending_hash_key),
            ":zero": n(0),
            **state_values,
        }
        if starting_kinesis_seq is not None:
            sets.insert(3, "#kstart = if_not_exists(#kstart, :kstart)")
            values[":kstart"] = s(starting_kinesis_seq)
        update = Update(
            self.names.partitions, partition_key(partition_id), tuple(sets), values=values
        )
        update_item(self.clients, update)

    def close(self, partition_id: str, ending_kinesis_seq: str) -> bool:
        return close(self.clients, self.names.partitions, partition_id, ending_kinesis_seq)

    def end(self, partition_id: str) -> bool:
        return end(self.clients, self.names.partitions, partition_id)

    # --- retention (shardlog/retention.py) -----------------------------------------------
    def advance_horizon(self, partition_id: str, horizon: int) -> bool:
        """Raise ``trimHorizonSeq`` to ``horizon``. False (nothing written) when it is
        already there or higher, or ``horizon`` is past the committed head."""
        update = Update(
            self.names.partitions,
            partition_key(partition_id),
            ("#horizon = :h",),
            condition="(attribute_not_exists(#horizon) OR #horizon < :h) AND #next >= :h",
            values={":h": n(horizon)},
        )
        return update_item(self.clients, update).written

    def mark_tagged(self, partition_id: str, tagged: int) -> bool:
        """Raise ``trimTaggedSeq`` to ``tagged``: every segment below it carries the expiry
        tag. False when it is already there or higher, or ``tagged`` is past the horizon."""
        update = Update(
            self.names.partitions,
            partition_key(partition_id),
            ("#tagged = :t",),
            condition="(attribute_not_exists(#tagged) OR #tagged < :t) AND #horizon >= :t",
            values={":t": n(tagged)},
        )
        return update_item(self.clients, update).written

    # --- benchmark fixtures (no fence: never part of the log's protocol) -----------------
    def increment_head(self, partition_id: str) -> int:
        """Safya's original write, the benchmarks' baseline: one atomic increment of the
        head, with no condition; the seq it hands out."""
        response = self.clients.dynamodb.update_item(
            TableName=self.names.partitions,
            Key=partition_key(partition_id),
            UpdateExpression=f"ADD {ATTR_NEXT_SEQUENCE_NUMBER} :one",
            ExpressionAttributeValues={":one": n(1)},
            ReturnValues="UPDATED_NEW",
        )
        return int(response["Attributes"][ATTR_NEXT_SEQUENCE_NUMBER]["N"]) - 1

    def write_history(self, partition_ids: Sequence[str], head: int, retired_at_ms: int) -> None:
        """Items of ENDED partitions already retired (out of the live set), as a long-lived
        stream leaves them: the history benchmark's and budget tests' fixture."""
        items = [
            {
                **partition_key(pid),
                C.ATTR_STATE: s(PartitionState.ENDED),
                C.ATTR_NEXT_SEQUENCE_NUMBER: n(head),
                C.ATTR_PARENT_PARTITION_IDS: {"L": []},
                C.ATTR_STARTING_HASH_KEY: s("0"),
                C.ATTR_ENDING_HASH_KEY: s(str(C.MAX_HASH_KEY)),
                C.ATTR_RETIRED_AT: n(retired_at_ms),
            }
            for pid in partition_ids
        ]
        put_items(self.clients, self.names.partitions, items)

    def set_head(self, partition_id: str, next_seq: int) -> None:
        """Set the head of a log whose segments a fixture wrote itself (no fence)."""
        update = Update(
            self.names.partitions,
            partition_key(partition_id),
            ("#next = :next",),
            values={":next": n(next_seq)},
        )
        update_item(self.clients, update)
