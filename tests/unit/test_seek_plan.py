"""A group seek's pure parts: what AT_SEQUENCE moves (the partitions named, the re-opened
ones' descendants), which partitions a seek holds, the seqs it refuses, and the records a
move reprocesses or skips."""

from __future__ import annotations

import pytest

from shardlog import constants as C
from shardlog.consumer.positions import StartPosition
from shardlog.consumer.seek import Move, named_positions, scope, validate_named
from shardlog.exceptions import ValidationError
from shardlog.tables import PartitionInfo

# p0 split into c1 and c2; c1 and c2 merged into m3. p0, c1 and c2 are ENDED; m3 is OPEN.
P0 = PartitionInfo("p0", 10, C.STATE_ENDED, (), "0", "9")
C1 = PartitionInfo("c1", 4, C.STATE_ENDED, ("p0",), "0", "4")
C2 = PartitionInfo("c2", 6, C.STATE_ENDED, ("p0",), "5", "9")
M3 = PartitionInfo("m3", 7, C.STATE_OPEN, ("c1", "c2"), "0", "9")
ROOT = PartitionInfo("r9", 5, C.STATE_OPEN, (), "0", "9")
ALL = [M3, C2, ROOT, C1, P0]  # listed in no particular order
DONE = {"p0": C.SHARD_END, "c1": C.SHARD_END, "c2": C.SHARD_END, "m3": "3", "r9": "5"}


def test_reopening_a_finished_partition_restarts_every_descendant_at_zero() -> None:
    moved = named_positions(ALL, DONE, {"p0": 7})
    assert moved == {"p0": "7", "c1": "0", "c2": "0", "m3": "0"}  # r9 is not p0's: untouched


def test_a_partition_named_at_its_end_stays_done_and_its_children_keep_going() -> None:
    assert named_positions(ALL, DONE, {"c1": 4}) == {"c1": C.SHARD_END}
    assert named_positions(ALL, DONE, {"c1": 3}) == {"c1": "3", "m3": "0"}


def test_a_descendant_named_too_keeps_its_seq_and_still_waits_for_its_parent() -> None:
    moved = named_positions(ALL, DONE, {"p0": 2, "c2": 5})
    assert moved == {"p0": "2", "c1": "0", "c2": "5", "m3": "0"}


def test_moving_an_unfinished_partition_leaves_its_waiting_children_alone() -> None:
    """p0 not finished yet: its children have delivered nothing, their positions stand."""
    current = {"p0": "8", "c1": "2", "c2": None, "m3": None, "r9": "1"}
    assert named_positions(ALL, current, {"p0": 3}) == {"p0": "3"}
    assert named_positions(ALL, current, {"r9": 0}) == {"r9": "0"}


def test_an_ended_partition_named_at_its_end_is_not_done_ahead_of_a_reopened_parent() -> None:
    moved = named_positions(ALL, DONE, {"p0": 1, "c1": 4})
    assert moved["c1"] == "4"  # its end, but not SHARD_END: p0 is read again first


def test_the_scope_of_at_sequence_is_the_named_partitions_and_their_descendants() -> None:
    named = StartPosition.at_sequence({"c2": 1})
    assert [p.partition_id for p in scope(ALL, named)] == ["c2", "m3"]
    every = [p.partition_id for p in scope(ALL, StartPosition.trim_horizon())]
    assert every.index("p0") < every.index("c1") < every.index("m3")  # parents first
    assert sorted(every) == ["c1", "c2", "m3", "p0", "r9"]


@pytest.mark.parametrize(
    ("sequences", "message"),
    [
        ({"r9": 6}, "--at-seq: r9=6 is past partition r9's head 5"),
        ({"nosuch": 0}, "--at-seq: no partition 'nosuch' in the partitions table"),
        ({}, "--at-seq: name at least one PARTITION=SEQ"),
    ],
)
def test_at_sequence_refuses_a_seq_past_the_head_and_an_unknown_partition(
    sequences: dict[str, int], message: str
) -> None:
    with pytest.raises(ValidationError, match=message) as raised:
        validate_named(ALL, StartPosition.at_sequence(sequences))
    assert raised.value.field == "--at-seq"


def test_at_sequence_takes_every_seq_from_zero_to_the_head() -> None:
    validate_named(ALL, StartPosition.at_sequence({"r9": 5, "p0": 0}))  # both edges


@pytest.mark.parametrize(
    ("old", "new", "reprocess", "skip"),
    [
        ("6", "0", 6, 0),
        (C.SHARD_END, "2", 8, 0),  # an ENDED partition of 10 records, read again from 2
        (None, "4", 0, 4),
        ("3", C.SHARD_END, 0, 7),
        ("5", "5", 0, 0),
    ],
)
def test_a_move_counts_the_records_reprocessed_or_skipped(
    old: str | None, new: str, reprocess: int, skip: int
) -> None:
    move = Move("p0", C.STATE_ENDED, 10, old, new)
    assert (move.reprocess, move.skip) == (reprocess, skip)
