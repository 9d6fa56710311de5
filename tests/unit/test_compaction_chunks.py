"""Compaction cuts its batches into tasks of whole consecutive segments of one partition."""

from __future__ import annotations

import itertools

import pytest

from shardlog import constants as C
from shardlog.spark.compaction import BatchPlan, SegmentRef, chunk_records, chunks

P0, P1 = "shardId-000000000000", "shardId-000000000001"


def plan(partition: str, bounds: list[int]) -> BatchPlan:
    refs = tuple(SegmentRef(partition, a, b) for a, b in itertools.pairwise(bounds))
    return BatchPlan(partition, bounds[0], bounds[-1], refs)


def test_chunks_are_whole_segments_of_about_the_target() -> None:
    plans = [plan(P0, [100, 140, 180, 220, 260, 300]), plan(P1, [0, 50])]
    assert chunks(plans, 80) == [
        (P0, [100, 140, 180]),  # 80 records: the target reached, a new chunk starts
        (P0, [180, 220, 260]),
        (P0, [260, 300]),  # the rest
        (P1, [0, 50]),  # never mixed with another partition
    ]


@pytest.mark.parametrize("target", [1, 39, 40, 41, 79, 80, 10**9])
def test_chunks_cover_each_batch_exactly(target: int) -> None:
    plans = [plan(P0, [100, 140, 180, 220, 260, 300]), plan(P1, [0, 1, 2, 50])]
    for p in plans:
        mine = [
            bounds for partition, bounds in chunks(plans, target) if partition == p.partition_id
        ]
        joined = [mine[0][0]] + [b for bounds in mine for b in bounds[1:]]
        assert joined == [p.start] + [s.next_seq for s in p.segments]  # contiguous, in order
        assert all(bounds[i] < bounds[i + 1] for bounds in mine for i in range(len(bounds) - 1))


def test_a_segment_larger_than_the_target_goes_whole() -> None:
    assert chunks([plan(P0, [0, 500, 510])], 100) == [(P0, [0, 500]), (P0, [500, 510])]


def test_no_plans_no_chunks() -> None:
    assert chunks([], 100) == []


def test_chunk_size_feeds_every_core_twice_but_never_below_the_minimum() -> None:
    small = [plan(P0, [0, 1_000])]
    assert chunk_records(small, parallelism=2) == C.COMPACTION_MIN_CHUNK_RECORDS
    big = [plan(P0, [0, 8_000_000]), plan(P1, [0, 8_000_000])]
    assert chunk_records(big, parallelism=8) == 1_000_000  # 16M records / (2 x 8) tasks
    assert chunk_records(big, parallelism=0) == 16_000_000  # no parallelism known: one task
