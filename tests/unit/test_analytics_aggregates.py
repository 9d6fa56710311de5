"""The analytics aggregates merge across runs: totals of two increments equal one pass."""

from __future__ import annotations

import math
import random

import pytest

from shardlog.spark import aggregates as A

P0, P1 = "shardId-000000000000", "shardId-000000000001"


def sketch_of(delays: list[int]) -> list[dict[str, int]]:
    counts: dict[int, int] = {}
    for d in delays:
        counts[A.sketch_bucket(d)] = counts.get(A.sketch_bucket(d), 0) + 1
    return [{"bucket": b, "records": n} for b, n in counts.items()]


def totals_of(delays: list[int]) -> dict[str, int]:
    return {"count": len(delays), "sumMs": sum(delays), "min": min(delays), "max": max(delays)}


def test_every_bucket_value_is_within_alpha_of_what_it_holds() -> None:
    for delay in [0, 1, 2, 3, 10, 99, 100, 101, 1_000, 54_321, 10**6, 10**9]:
        value = A.sketch_value(A.sketch_bucket(delay))
        assert abs(value + 1 - (delay + 1)) <= A.SKETCH_ALPHA * (delay + 1)
    assert A.sketch_bucket(-500) == A.sketch_bucket(0) == 0  # clock skew clamps to 0


def test_sketch_percentiles_match_exact_ones_within_alpha() -> None:
    rng = random.Random(7)
    delays = [int(rng.lognormvariate(6, 1.5)) for _ in range(20_000)]
    summary = A.delay_summary(totals_of(delays), sketch_of(delays))
    ordered = sorted(delays)
    for q in A.PERCENTILES:
        exact = ordered[math.ceil(q * len(ordered)) - 1]  # nearest rank
        assert summary[f"p{round(q * 100)}"] == pytest.approx(exact, rel=A.SKETCH_ALPHA, abs=1)
    assert summary["mean"] == pytest.approx(sum(delays) / len(delays))


def test_two_increments_merge_to_one_pass() -> None:
    rng = random.Random(11)
    first, second = (
        [rng.randrange(0, 5_000) for _ in range(700)],
        [rng.randrange(0, 9_000) for _ in range(300)],
    )
    merged_sketch = A.merge_sums(sketch_of(first), sketch_of(second), ("bucket",), ("records",))
    merged_totals = A.merge_delay(totals_of(first), totals_of(second))
    assert merged_totals == totals_of(first + second)
    assert A.delay_summary(merged_totals, merged_sketch) == A.delay_summary(
        totals_of(first + second), sketch_of(first + second)
    )
    assert A.merge_delay({"count": 0}, {"count": 0}) == {"count": 0}
    assert A.merge_delay({"count": 0}, totals_of(second)) == totals_of(second)


def test_sums_merge_by_key_and_the_open_bucket_sorts_last() -> None:
    old = [{"upper_ms": None, "records": 2}, {"upper_ms": 100, "records": 1}]
    new = [{"upper_ms": 100, "records": 4}, {"upper_ms": 1_000, "records": 3}]
    assert A.merge_sums(old, new, ("upper_ms",), ("records",)) == [
        {"upper_ms": 100, "records": 5},
        {"upper_ms": 1_000, "records": 3},
        {"upper_ms": None, "records": 2},
    ]


def partition(pid: str, lo: int, hi: int, rows: int | None = None) -> dict[str, object]:
    count = hi - lo + 1
    return {
        "partition_id": pid,
        "rows": rows or count,
        "distinct_seqs": count,
        "min_seq": lo,
        "max_seq": hi,
    }


def test_partitions_merge_and_a_duplicate_across_runs_shows() -> None:
    merged = A.merge_partitions(
        [partition(P0, 0, 99)], [partition(P0, 100, 149), partition(P1, 0, 9)]
    )
    assert merged == [partition(P0, 0, 149), partition(P1, 0, 9)]
    # A later snapshot holding seqs 90..109 again: 10 rows counted twice.
    again = A.merge_partitions([partition(P0, 0, 99)], [partition(P0, 90, 109)])
    assert again[0]["rows"] - again[0]["distinct_seqs"] == 10


def test_top_keys_rank_by_records_then_key() -> None:
    keys = [
        {"partition_key": k, "records": r, "bytes": r * 10}
        for k, r in [("c", 5), ("a", 7), ("b", 5), ("d", 1)]
    ]
    assert [(t["rank"], t["partition_key"]) for t in A.top_keys(keys, 3)] == [
        (1, "a"),
        (2, "b"),
        (3, "c"),
    ]


@pytest.mark.parametrize("q", [-0.01, 1.01])
def test_a_quantile_outside_zero_to_one_is_refused(q: float) -> None:
    with pytest.raises(ValueError, match="outside"):
        A.sketch_quantile({0: 1}, q, 0, 0)
    assert A.sketch_quantile({0: 1}, 1.0, 0, 0) == 0 and A.sketch_quantile({3: 1}, 0.0, 0, 9) >= 0


def test_an_empty_sketch_has_no_quantile() -> None:
    with pytest.raises(ValueError, match="empty"):
        A.sketch_quantile({}, 0.5, 0, 0)
    assert A.delay_summary({"count": 0}, []) == {"count": 0}
