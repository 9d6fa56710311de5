"""Lanes of a Lambda consumer group's partition (parallelizationFactor): each key in one
lane, the checkpoint the lowest seq not done over the lanes, a restart's progress kept (and
stored) per lane."""

from __future__ import annotations

import pytest

from shardlog import constants as C
from shardlog.dal.consumers import LaneProgress, PendingFailure, RetryState
from shardlog.format import LogRecord
from shardlog.lambda_consumer.feed import FedRecord
from shardlog.lambda_consumer.lanes import Lanes, lane_of
from shardlog.tables import PLACEHOLDERS, from_ddb


def key_in(lane: int, factor: int, *, skip: int = 0) -> str:
    """A partition key of that lane (the ``skip``-th one found)."""
    found = (f"key-{i}" for i in range(1_000) if lane_of(f"key-{i}", factor) == lane)
    for _ in range(skip):
        next(found)
    return next(found)


def fed(seq: int, key: str) -> FedRecord:
    return FedRecord(LogRecord("p", seq, key, b"", str(seq), 1_000 + seq), 500)


def test_a_key_always_goes_to_the_same_lane_and_keys_spread_over_every_lane() -> None:
    for factor in (1, 4, 10):
        lanes = {lane_of(f"user-{i}", factor) for i in range(200)}
        assert lanes == set(range(factor))
        assert all(lane_of("user-7", factor) == lane_of("user-7", factor) for _ in range(3))
    # The Kinesis hash key of the key (MD5, big-endian) mod the factor: known values.
    assert [lane_of(k, 4) for k in "abe"] == [1, 3, 2]


@pytest.mark.parametrize("factor", [0, 11])
def test_a_factor_outside_1_to_10_is_refused(factor: int) -> None:
    with pytest.raises(ValueError, match=f"parallelization factor {factor} is not 1 to 10"):
        Lanes(factor, 10, 0)


@pytest.mark.parametrize(("factor", "read_ahead"), [(1, 10), (2, 40), (10, 200)])
def test_the_factors_at_the_edges_make_that_many_lanes(factor: int, read_ahead: int) -> None:
    lanes = Lanes(factor, 10, 0)  # one batch at factor 1, else two batches a lane
    assert len(list(lanes)) == factor and lanes.limit == read_ahead


def test_the_checkpoint_is_the_lowest_seq_not_done_over_the_lanes() -> None:
    a, b = key_in(0, 2), key_in(1, 2)
    lanes = Lanes(2, 10, 5)
    assert lanes.checkpoint() == 5  # nothing taken: the position
    for seq, key in enumerate([a, b, b, a, b], start=5):
        lanes.add(fed(seq, key))
    assert lanes.checkpoint() == 5  # lane a's first, below lane b's
    lane_a, lane_b = lanes.lanes
    assert [f.record.seq for f in lane_a.waiting] == [5, 8]
    assert [f.record.seq for f in lane_b.waiting] == [6, 7, 9]
    lane_b.done(3)  # lane b delivered past lane a's first record: the checkpoint stays
    assert lanes.checkpoint() == 5 and lanes.oldest() == fed(5, a).record
    lane_a.done(1)
    assert lanes.checkpoint() == 8
    lane_a.done(1)
    assert lanes.checkpoint() == 10 and lanes.oldest() is None  # all done: the frontier
    assert lanes.room == 40 and lanes.empty


def test_a_restart_skips_what_a_lane_had_done_and_keeps_its_retry_and_give_up() -> None:
    a, b, c = key_in(0, 3), key_in(1, 3), key_in(2, 3)
    retry = RetryState(7, 9, 1, 2)
    pending = PendingFailure(6, 7, "RetryAttemptsExhausted", 4, "Unhandled", lane=2)
    lanes = Lanes(3, 10, 5, LaneProgress(3, {0: retry}, {2: pending}))
    assert not lanes.dropped and lanes.retrying
    for seq, key in enumerate([a, b, c, a, a], start=5):
        lanes.add(fed(seq, key))
    lane_a, lane_b, lane_c = lanes.lanes
    assert [f.record.seq for f in lane_a.waiting] == [8, 9]  # 5 was done before the retry
    assert [f.record.seq for f in lane_b.waiting] == [6]  # no progress: from the checkpoint
    assert [f.record.seq for f in lane_c.waiting] == [7]
    assert (lane_a.retry, lane_c.pending) == (retry, pending)
    assert lanes.checkpoint() == 6
    assert lanes.progress() == LaneProgress(3, {0: retry}, {2: pending})
    assert [f.record.seq for f in lane_a.records(5, below=9)] == [8]


def test_progress_written_at_another_factor_is_dropped() -> None:
    lanes = Lanes(4, 10, 5, LaneProgress(1, {0: RetryState(5, 9, 4, 1)}, {}))
    assert lanes.dropped and not lanes.retrying
    assert lanes.progress() == LaneProgress(4, {}, {})


def stored(progress: LaneProgress) -> dict[str, object]:
    """The attributes its clauses leave on an item (every clause is ``#name = :value``)."""
    clauses = progress.clauses()
    item = {}
    for clause in clauses.sets:
        name, value = (part.strip() for part in clause.split("="))
        item[PLACEHOLDERS[name]] = clauses.values[value]
    assert not {PLACEHOLDERS[r] for r in clauses.removes} & set(item)
    return from_ddb(item)


def test_factor_1_keeps_the_attributes_of_before_lanes() -> None:
    retry = RetryState(3, 9, 2, 1)
    pending = PendingFailure(3, 5, "RecordAgeExceeded", 0, None)
    item = stored(LaneProgress(1, {0: retry}, {0: pending}))
    assert set(item) == {
        C.ATTR_RETRY_START,
        C.ATTR_RETRY_END,
        C.ATTR_RETRY_SIZE,
        C.ATTR_RETRY_ATTEMPTS,
        C.ATTR_PENDING_FAILURE,
    }
    assert LaneProgress.from_item(item) == LaneProgress(1, {0: retry}, {0: pending})
    removes = LaneProgress(1).clauses().removes
    assert set(removes) == {"#rstart", "#rend", "#rsize", "#rattempts", "#pf", "#lanes", "#window"}


def test_lanes_above_factor_1_are_one_map_and_clear_the_other_layout() -> None:
    progress = LaneProgress(
        4,
        {1: RetryState(3, 9, 2, 1), 3: RetryState(4, 6, 2, 0)},
        {3: PendingFailure(4, 5, "RetryAttemptsExhausted", 4, "Unhandled", lane=3)},
    )
    item = stored(progress)
    assert set(item) == {C.ATTR_LANE_PROGRESS}
    assert LaneProgress.from_item(item) == progress
    assert set(progress.clauses().removes) == {
        *("#rstart", "#rend", "#rsize", "#rattempts", "#pf"),
        "#window",  # tumbling windows are at factor 1 only
    }
    assert "#lanes" in LaneProgress(4).clauses().removes  # nothing left: the map goes
