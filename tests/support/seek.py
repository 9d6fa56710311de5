"""Group seek tests: the seek as the CLI makes it, a finished split to seek back into, and
the order a seek must keep."""

from __future__ import annotations

from collections.abc import Sequence

from shardlog.clock import ManualClock
from shardlog.consumer.seek import GroupSeek
from shardlog.reader import LogReader
from shardlog.tables import Tables
from tests.support.aws import AwsEnv
from tests.support.factories import append, end_partition, incoming_records, register_partition

PARENT, LEFT, RIGHT = "parent", "left", "right"  # a child's id sorts before its parent's


def group_seek(aws: AwsEnv, clock: ManualClock) -> GroupSeek:
    """A seek with its own clients (another process, as the CLI)."""
    clients = aws.fresh_clients()
    return GroupSeek(
        Tables(clients, aws.config.tables),
        LogReader(clients, aws.config.bucket, aws.config.tables),
        clock=clock,
    )


def finished_split(aws: AwsEnv, parent_records: int) -> None:
    """PARENT, ended with ``parent_records`` records, and its children LEFT and RIGHT with 3
    records each (keys a and b, data numbered on from the parent's)."""
    register_partition(aws, PARENT, ())
    append(aws, PARENT, incoming_records(parent_records, start=0, keys=["a", "b"]))
    end_partition(aws, PARENT)
    for child, start in ((LEFT, parent_records), (RIGHT, parent_records + 3)):
        register_partition(aws, child, (PARENT,))
        append(aws, child, incoming_records(3, start=start, keys=["a", "b"]))


def assert_parent_first(
    delivered: Sequence[tuple[str, int]], parent: str, parent_seqs: list[int], child_seqs: list[int]
) -> None:
    """``delivered`` ((partition, seq) in delivery order) is the parent's ``parent_seqs``, all
    of them before any record of its children, whose seqs (sorted) are ``child_seqs``."""
    assert [seq for p, seq in delivered if p == parent] == parent_seqs
    assert sorted(seq for p, seq in delivered if p != parent) == child_seqs
    last_parent = max(i for i, (p, _) in enumerate(delivered) if p == parent)
    first_child = min(i for i, (p, _) in enumerate(delivered) if p != parent)
    assert last_parent < first_child, f"a child delivered before its parent: {delivered}"
