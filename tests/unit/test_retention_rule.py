"""The retention rule (shardlog/retention.py) at its edges: age exactly the retention, a
group's checkpoint exactly at a segment's end, the lake watermark below and at it; and the
horizon a run of segments gives."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from shardlog.dal.consumers import Checkpoints
from shardlog.exceptions import CorruptLogError, ValidationError
from shardlog.retention import (
    ALL,
    DAY_MS,
    Holds,
    RetentionPolicy,
    eligible,
    holds_of,
    plan_horizon,
)
from shardlog.segments import AgedStart
from shardlog.tables import PartitionInfo

WEEK = RetentionPolicy(days=7)
OLD = 7 * DAY_MS


def test_age_exactly_the_retention_is_eligible_a_millisecond_less_is_not() -> None:
    holds = Holds(watermark=10)
    assert eligible(10, OLD, WEEK, holds)
    assert not eligible(10, OLD - 1, WEEK, holds)


def test_the_lake_watermark_at_the_segments_end_lets_it_go_below_holds_it() -> None:
    assert eligible(10, OLD, WEEK, Holds(watermark=10))
    assert not eligible(10, OLD, WEEK, Holds(watermark=9))


def test_a_group_checkpoint_exactly_at_the_segments_end_lets_it_go() -> None:
    assert eligible(10, OLD, WEEK, Holds(watermark=10, groups={"a": 10, "b": ALL}))
    assert not eligible(10, OLD, WEEK, Holds(watermark=10, groups={"a": 10, "lagging": 9}))


def test_without_holding_for_groups_a_lagging_group_holds_nothing() -> None:
    policy = RetentionPolicy(days=7, hold_for_groups=False)
    assert eligible(10, OLD, policy, Holds(watermark=10, groups={"lagging": 0}))
    assert not eligible(10, OLD, policy, Holds(watermark=9, groups={}))


def test_keep_forever_by_default() -> None:
    assert RetentionPolicy().days is None
    assert not eligible(1, 10**6 * DAY_MS, RetentionPolicy(), Holds(watermark=ALL))


def test_the_horizon_stops_at_the_first_segment_kept() -> None:
    segments = [AgedStart(0, 0), AgedStart(4, 0), AgedStart(9, 5 * DAY_MS), AgedStart(12, 0)]
    now = 12 * DAY_MS - 1  # segment 9 is a millisecond short of 7 days old
    horizon, reason = plan_horizon(segments, 0, 15, now, WEEK, Holds(ALL))
    assert (horizon, reason) == (9, "segment 9: younger than 7 days")
    assert plan_horizon(segments, 0, 15, now + 1, WEEK, Holds(ALL))[0] == 15
    assert plan_horizon(segments, 0, 15, now + 1, WEEK, Holds(12))[0] == 12
    horizon, reason = plan_horizon(segments, 0, 15, now + 1, WEEK, Holds(ALL, {"g": 8}))
    assert (horizon, reason) == (4, "segment 4: group g has read up to 8")


def test_the_horizon_starts_from_the_one_written_and_needs_its_segment() -> None:
    segments = [AgedStart(4, 0), AgedStart(9, 0)]
    assert plan_horizon(segments, 4, 12, OLD, WEEK, Holds(ALL))[0] == 12
    with pytest.raises(CorruptLogError, match="segment at the trim horizon 3 is missing"):
        plan_horizon(segments, 3, 12, OLD, WEEK, Holds(ALL))


def test_holds_read_from_the_checkpoints() -> None:
    checkpoints = Checkpoints(
        frozenset({"$ingest", "$compaction", "done", "reading", "new", "unstarted"}),
        {
            "p": {
                "$ingest": "4959",
                "$compaction": "30",
                "done": "SHARD_END",
                "reading": "12",
                "unstarted": None,
            }
        },
    )
    holds = holds_of(PartitionInfo("p", next_seq=40), checkpoints)
    # a group without a lease item on the partition, or without a checkpoint, holds it all
    assert holds == Holds(30, {"done": ALL, "reading": 12, "new": 0, "unstarted": 0})


def test_every_lake_table_holds_what_it_does_not_have_yet() -> None:
    """A declared table's watermark (its mirror, ``$compaction:<table>``) holds like the raw
    table's: the lowest one wins, is named in the reason, and a table registered without a
    mirror item on the partition (its ``$group`` item only) holds the whole partition. Its
    watermark is never mistaken for a consumer group's checkpoint."""
    behind = Checkpoints(
        frozenset({"$compaction", "$compaction:orders", "$compaction:refunds", "billing"}),
        {"p": {"$compaction": "30", "$compaction:orders": "20", "$compaction:refunds": "35"}},
    )
    holds = holds_of(PartitionInfo("p", next_seq=40), behind)
    assert (holds.watermark, holds.lake_table) == (20, "lake table orders")
    assert holds.groups == {"billing": 0}
    assert holds.reason(20, hold_for_groups=False) is None
    assert (
        holds.reason(21, hold_for_groups=False) == "lake table orders holds records below 20 only"
    )

    registered = Checkpoints(
        frozenset({"$compaction", "$compaction:orders"}), {"p": {"$compaction": "SHARD_END"}}
    )
    assert holds_of(PartitionInfo("p", next_seq=40), registered).watermark == 0
    done = Checkpoints(
        frozenset({"$compaction", "$compaction:orders"}),
        {"p": {"$compaction": "SHARD_END", "$compaction:orders": "SHARD_END"}},
    )
    assert holds_of(PartitionInfo("p", next_seq=40), done) == Holds(ALL, {}, "the lake")


@pytest.mark.parametrize(("days", "ok"), [(0, False), (1, True), (36_500, True), (36_501, False)])
def test_retention_days_limits(days: int, ok: bool) -> None:
    if ok:
        assert RetentionPolicy(days=days).days == days
    else:
        with pytest.raises(ValidationError, match=r"recordRetentionDays: .* outside 1\.\.36500"):
            RetentionPolicy(days=days)


def test_policy_from_the_environment() -> None:
    assert RetentionPolicy.from_env({}) == RetentionPolicy(None, True)
    env = {"SHARDLOG_RECORD_RETENTION_DAYS": "30", "SHARDLOG_RETENTION_HOLD_FOR_GROUPS": "false"}
    assert RetentionPolicy.from_env(env) == RetentionPolicy(30, False)
    with pytest.raises(ValidationError, match="SHARDLOG_RECORD_RETENTION_DAYS: 'x'"):
        RetentionPolicy.from_env({"SHARDLOG_RECORD_RETENTION_DAYS": "x"})


def test_the_plan_reads_the_listing_only_one_past_the_first_segment_kept() -> None:
    taken: list[int] = []

    def listing() -> Iterator[AgedStart]:
        for start in range(0, 10**6, 10):
            taken.append(start)
            yield AgedStart(start, 10 * DAY_MS if start >= 20 else 0)

    horizon, _ = plan_horizon(listing(), 0, 10**6, 12 * DAY_MS, WEEK, Holds(ALL))
    assert horizon == 20 and taken == [0, 10, 20, 30]
