"""The partition state machine and lineage (pure: no AWS)."""

from __future__ import annotations

import pytest

from shardlog import constants as C
from shardlog.dal.partitions import state_on_commit, transition
from shardlog.exceptions import ShardlogError
from shardlog.partitions import TRANSITIONS, PartitionState, lineage_order, reaches_end
from shardlog.tables import PartitionInfo

OPEN, CLOSED, ENDED = PartitionState.OPEN, PartitionState.CLOSED, PartitionState.ENDED


def test_states_are_the_table_values() -> None:
    assert [str(s) for s in PartitionState] == [C.STATE_OPEN, C.STATE_CLOSED, C.STATE_ENDED]


def test_only_open_to_closed_and_closed_to_ended() -> None:
    allowed = {(a, b) for a, targets in TRANSITIONS.items() for b in targets}
    assert allowed == {(OPEN, CLOSED), (CLOSED, ENDED)}
    for old in PartitionState:
        for new in PartitionState:
            if (old, new) not in allowed:
                with pytest.raises(ValueError, match="no transition"):
                    transition("t", "p", old, new)


def test_a_transition_holds_only_in_the_state_it_leaves() -> None:
    request = transition("t", "p", OPEN, CLOSED).request()
    assert request["ConditionExpression"] == "#state = :old"
    assert request["ExpressionAttributeValues"] == {":new": {"S": "CLOSED"}, ":old": {"S": "OPEN"}}


@pytest.mark.parametrize(
    ("state", "ending", "checkpoint", "ended"),
    [
        (CLOSED, "100", "100", True),
        (CLOSED, "100", "101", True),
        (CLOSED, "100", "99", False),
        (CLOSED, "100", None, False),
        (CLOSED, None, "100", False),
        (OPEN, "100", "100", False),
        (CLOSED, "9", "10", True),  # integers, not strings: "10" < "9" as text
        (CLOSED, "1" + "0" * 127, "9" * 127, False),  # 128 digits
    ],
)
def test_reaches_end_compares_kinesis_sequence_numbers_as_integers(
    state: PartitionState, ending: str | None, checkpoint: str | None, ended: bool
) -> None:
    partition = PartitionInfo("p", 5, state=state, ending_kinesis_seq=ending)
    assert reaches_end(partition, checkpoint) is ended


def test_a_commit_starts_a_new_item_open_and_ends_a_closed_shard() -> None:
    assert state_on_commit(PartitionInfo("p", -1), "5")[0] == (
        "#state = if_not_exists(#state, :open)",
        "#live = :live",  # a new item is in the live set (shardlog/retirement.py)
    )
    closed = PartitionInfo("p", 3, state=CLOSED, ending_kinesis_seq="7")
    assert state_on_commit(closed, "7") == (("#state = :ended",), {":ended": {"S": "ENDED"}})
    assert state_on_commit(closed, "6") == ((), {})


def test_lineage_order_puts_parents_before_children() -> None:
    parts = [
        PartitionInfo("m", parents=("c1", "c2")),
        PartitionInfo("c2", parents=("root",)),
        PartitionInfo("c1", parents=("root",)),
        PartitionInfo("root"),
        PartitionInfo("orphan", parents=("trimmed",)),
    ]
    order = [p.partition_id for p in lineage_order(parts)]
    assert order.index("root") < order.index("c1") < order.index("m")
    assert order.index("c2") < order.index("m")
    assert "orphan" in order


def test_a_lineage_cycle_is_an_error() -> None:
    with pytest.raises(ShardlogError, match="cycle"):
        lineage_order([PartitionInfo("a", parents=("b",)), PartitionInfo("b", parents=("a",))])
