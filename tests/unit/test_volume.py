"""Compaction by volume's pure parts: the threshold, the batch's per-partition progress and
the crossing's clientToken (the protocol itself: tests/spark/test_volume_trigger.py)."""

from __future__ import annotations

from decimal import Decimal

import pytest

from shardlog import constants as C
from shardlog.dal.volume import Backlog, PartitionProgress
from shardlog.spark.trigger import client_token
from shardlog.spark.volume import VolumeThreshold, progress_from_changes, volume_client_token

P0, P1 = "shardId-000000000000", "shardId-000000000001"


def image(pid: str, head: int, size: int) -> dict[str, object]:
    # Powertools deserialises stream numbers as Decimal.
    return {
        C.ATTR_PARTITION_ID: pid,
        C.ATTR_NEXT_SEQUENCE_NUMBER: Decimal(head),
        C.ATTR_COMMITTED_BYTES: Decimal(size),
    }


@pytest.mark.parametrize(
    ("threshold", "records", "size", "crossed"),
    [
        (VolumeThreshold(records=1000), 999, 10**9, False),
        (VolumeThreshold(records=1000), 1000, 0, True),
        (VolumeThreshold(bytes=1 << 20), 10**9, (1 << 20) - 1, False),
        (VolumeThreshold(bytes=1 << 20), 0, 1 << 20, True),
        (VolumeThreshold(records=1000, bytes=1 << 20), 1000, 0, True),
        (VolumeThreshold(records=1000, bytes=1 << 20), 0, 1 << 20, True),
        (VolumeThreshold(), 10**9, 10**12, False),
    ],
)
def test_a_threshold_is_crossed_at_its_value(
    threshold: VolumeThreshold, records: int, size: int, crossed: bool
) -> None:
    backlog = Backlog(counted_records=records + 5, counted_bytes=size + 7, claimed_records=5,
                      claimed_bytes=7)  # fmt: skip
    assert threshold.crossed(backlog) is crossed
    assert threshold.enabled is (threshold != VolumeThreshold())


def test_progress_runs_from_the_first_old_image_to_the_last_new_one() -> None:
    changes = [
        (image(P0, 10, 100), image(P0, 20, 200)),
        (None, image(P1, 5, 50)),  # a partition's first commit (the item is new)
        (image(P0, 20, 200), image(P0, 35, 330)),
        (image(P1, 5, 50), {**image(P1, 5, 50), C.ATTR_STATE: "ENDED"}),  # no head moved
        (image(P0, 35, 330), None),  # a removal carries no new image
    ]
    assert progress_from_changes(changes) == [
        PartitionProgress(P0, 10, 35, 100, 330),
        PartitionProgress(P1, 0, 5, 0, 50),
    ]
    assert progress_from_changes([(image(P0, 3, 9), image(P0, 3, 9))]) == []


def test_a_crossing_has_its_own_token() -> None:
    tokens = {volume_client_token("compact", n) for n in range(1, 100)}
    assert len(tokens) == 99
    assert all(len(t) == 64 and set(t) <= set("0123456789abcdef") for t in tokens)
    assert volume_client_token("compact", 1) != client_token("compact", "2024-05-01T10:00:00Z")
    assert volume_client_token("compact", 1) == volume_client_token("compact", 1)
