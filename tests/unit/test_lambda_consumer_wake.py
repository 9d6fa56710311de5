"""Which partitions-table changes wake a Lambda consumer group, and how wakes are named."""

from __future__ import annotations

from typing import Any

from shardlog.lambda_consumer.wake import (
    Wake,
    commit_wake,
    scope_tag,
    wake_queue_name,
    wakes_from_changes,
)


def image(head: int | None, state: str = "OPEN", pid: str = "p") -> dict[str, Any]:
    out: dict[str, Any] = {"partitionId": pid, "state": state}
    if head is not None:
        out["nextSequenceNumber"] = head
    return out


def test_a_head_that_moves_wakes_every_group_once_per_head() -> None:
    wakes = wakes_from_changes([(image(3), image(7))], ["a", "b"])
    assert [(w.group, w.partition_id, w.dedup) for w in wakes] == [
        ("a", "p", "p:7:OPEN"),
        ("b", "p", "p:7:OPEN"),
    ]


def test_a_new_item_with_records_wakes_and_one_without_does_not() -> None:
    assert len(wakes_from_changes([(None, image(4))], ["a"])) == 1
    assert wakes_from_changes([(None, image(0))], ["a"]) == []


def test_noop_lineage_and_closed_updates_do_not_wake() -> None:
    changes = [
        (image(5), image(5)),  # a no-op update (moto's stream records those too)
        (image(5, "OPEN"), image(5, "CLOSED")),
        (image(5), None),  # a delete
    ]
    assert wakes_from_changes(changes, ["a"]) == []


def test_becoming_ended_wakes_so_the_runner_can_checkpoint_shard_end() -> None:
    [wake] = wakes_from_changes([(image(5, "CLOSED"), image(5, "ENDED"))], ["a"])
    assert wake.dedup == "p:5:ENDED"


def test_wake_bodies_round_trip() -> None:
    wake = commit_wake("billing", "shardId-000000000002", 9, "OPEN")
    parsed = Wake.parse(wake.body())
    assert (parsed.group, parsed.partition_id, parsed.reason) == (
        "billing",
        "shardId-000000000002",
        "commit",
    )


def test_queue_names_are_fifo_and_safe() -> None:
    assert wake_queue_name("billing") == "shardlog-wake-billing.fifo"
    name = wake_queue_name("team/billing.v2" + "x" * 100)
    assert name.endswith(".fifo") and len(name) <= 80 and "/" not in name


def test_two_deployments_never_share_a_group_queue() -> None:
    one, other = wake_queue_name("billing", "stream-a"), wake_queue_name("billing", "stream-b")
    assert one != other and one.startswith("shardlog-wake-billing-") and one.endswith(".fifo")
    assert wake_queue_name("billing", "stream-a") == one  # the same deployment: the same queue
    long = wake_queue_name("team/billing.v2" + "x" * 100, "s" * 200)
    assert len(long) <= 80 and long.endswith(f"-{scope_tag('s' * 200)}.fifo")


def test_a_commit_wake_names_its_head_so_a_runner_past_it_can_skip_it() -> None:
    wake = commit_wake("billing", "p", 7, "OPEN")
    assert Wake.parse(wake.body()).head == 7
    [moved] = wakes_from_changes([(image(3), image(7))], ["a"])
    assert moved.head == 7


def test_an_ended_partitions_wake_names_no_head_so_its_shard_end_is_written() -> None:
    [wake] = wakes_from_changes([(image(5, "CLOSED"), image(5, "ENDED"))], ["a"])
    assert wake.head is None and Wake.parse(wake.body()).head is None


def test_a_wake_sent_before_heads_were_named_still_parses_and_names_none() -> None:
    old = '{"group": "billing", "partitionId": "p", "reason": "commit"}'
    assert Wake.parse(old).head is None
    assert Wake.parse('{"group": "g", "partitionId": "p", "head": -1}').head is None
