"""The console's retry column reads what the Lambda runner stored, at any parallelization
factor: factor 1's attributes of the lease item, and above it each lane's entry of
``laneProgress`` (the console once showed only factor 1's)."""

from __future__ import annotations

from typing import Any

from shardlog import constants as C
from shardlog.console.groups import retry_state
from shardlog.dal.consumers import LaneProgress, PendingFailure, RetryState
from shardlog.tables import from_ddb


def stored(progress: LaneProgress) -> dict[str, Any]:
    """The lease item's attributes as the runner's fenced write leaves them."""
    clauses = progress.clauses()
    names = {
        ":rstart": C.ATTR_RETRY_START,
        ":rend": C.ATTR_RETRY_END,
        ":rsize": C.ATTR_RETRY_SIZE,
        ":rattempts": C.ATTR_RETRY_ATTEMPTS,
        ":pf": C.ATTR_PENDING_FAILURE,
        ":lanes": C.ATTR_LANE_PROGRESS,
    }
    return from_ddb({names[k]: v for k, v in clauses.values.items()})


def test_factor_one_shows_the_batch_retried_and_the_give_up_pending() -> None:
    item = stored(
        LaneProgress(
            1,
            {0: RetryState(10, 20, 5, 2)},
            {0: PendingFailure(20, 30, "RetryAttemptsExhausted", 3, "Unhandled")},
        )
    )
    assert retry_state(item) == {
        "retryStartSeq": 10,
        "retryEndSeq": 20,
        "retryBatchSize": 5,
        "retryAttempts": 2,
        "pendingOnFailure": "yes",
    }


def test_each_lane_is_shown_above_factor_one() -> None:
    item = stored(
        LaneProgress(
            4,
            {1: RetryState(40, 90, 3, 1), 2: RetryState(50, 60, 1, 4)},
            {3: PendingFailure(70, 80, "RecordAgeExceeded", 1, None, lane=3)},
        )
    )
    assert retry_state(item) == {
        "lane 1 retryStartSeq": 40,
        "lane 1 retryEndSeq": 90,
        "lane 1 retryBatchSize": 3,
        "lane 1 retryAttempts": 1,
        "lane 2 retryStartSeq": 50,
        "lane 2 retryEndSeq": 60,
        "lane 2 retryBatchSize": 1,
        "lane 2 retryAttempts": 4,
        "lane 3 pendingOnFailure": "yes",
    }


def test_nothing_retried_shows_nothing() -> None:
    assert retry_state(stored(LaneProgress(4))) == {}
    assert retry_state({}) == {}
