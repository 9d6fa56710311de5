"""Analytics aggregates that merge: what lets analytics read only the table's new snapshots.

Every output of the analytics job is a sum, a min or a max over records, except the delay
percentiles; those come from a **log-bucket sketch** (as in DDSketch): a delay ``d`` (ms,
negative clamped to 0) counts in bucket ``ceil(log_gamma(d + 1))`` with
``gamma = (1 + alpha) / (1 - alpha)``, and a bucket's value is within ``alpha`` (relative) of
every ``d + 1`` it holds. Sketches merge by adding counts, so a run adds the records of the
snapshots appended since the last run to the previous totals and never rescans the table.

A partition's ``distinct_seqs`` merges as the sum minus the overlap of the two seq ranges:
the appended snapshots hold seqs beyond the previous watermark, so a non-zero overlap is a
duplicate across runs, and ``rows - distinct_seqs`` still exposes it.

Pure Python (no Spark): the job aggregates the increment in Spark, collects these small
tables and merges them on the driver.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

SKETCH_ALPHA = 0.01  # relative accuracy of the delay percentiles
SKETCH_GAMMA = (1 + SKETCH_ALPHA) / (1 - SKETCH_ALPHA)
PERCENTILES = (0.5, 0.9, 0.99)

Rows = list[dict[str, Any]]


def sketch_bucket(delay_ms: float) -> int:
    """The sketch bucket of one delay (the Spark job computes the same with F.log/F.ceil)."""
    return math.ceil(math.log(max(delay_ms, 0) + 1) / math.log(SKETCH_GAMMA))


def sketch_value(bucket: int) -> float:
    """The value a bucket stands for: within ``SKETCH_ALPHA`` of all it holds (plus 1 ms)."""
    return max(0.0, 2 * SKETCH_GAMMA**bucket / (SKETCH_GAMMA + 1) - 1)


def sketch_quantile(counts: Mapping[int, int], q: float, low: float, high: float) -> float:
    """The q-quantile of a sketch (the smallest value with at least ``q`` of the records at
    or below it), clamped to the exact ``[low, high]`` (min and max)."""
    if not 0 <= q <= 1:
        raise ValueError(f"quantile {q} is outside [0, 1]")
    total = sum(counts.values())
    if total == 0:
        raise ValueError("the quantile of an empty sketch")
    rank, seen = max(1, math.ceil(q * total)), 0  # nearest rank, as percentile_approx
    for bucket in sorted(counts):
        seen += counts[bucket]
        if seen >= rank:
            return min(max(sketch_value(bucket), low), high)
    return high  # pragma: no cover - the loop always reaches the total


def merge_sums(
    previous: Iterable[Mapping[str, Any]],
    new: Iterable[Mapping[str, Any]],
    keys: Sequence[str],
    sums: Sequence[str],
) -> Rows:
    """Rows of both, those with equal ``keys`` added up on ``sums``; sorted by the keys."""
    merged: dict[tuple[Any, ...], dict[str, Any]] = {}
    for row in [*previous, *new]:
        key = tuple(row[k] for k in keys)
        into = merged.setdefault(key, {**{k: row[k] for k in keys}, **dict.fromkeys(sums, 0)})
        for name in sums:
            into[name] += row[name] or 0
    return [merged[k] for k in sorted(merged, key=_sortable)]


def merge_partitions(
    previous: Iterable[Mapping[str, Any]], new: Iterable[Mapping[str, Any]]
) -> Rows:
    """Per partition: rows added, seq range widened, distinct seqs added minus the overlap."""
    merged: dict[str, dict[str, Any]] = {}
    for row in [*previous, *new]:
        before = merged.get(row["partition_id"])
        if before is None:
            merged[row["partition_id"]] = dict(row)
            continue
        overlap = min(before["max_seq"], row["max_seq"]) - max(before["min_seq"], row["min_seq"])
        before["rows"] += row["rows"]
        before["distinct_seqs"] += row["distinct_seqs"] - max(0, overlap + 1)
        before["min_seq"] = min(before["min_seq"], row["min_seq"])
        before["max_seq"] = max(before["max_seq"], row["max_seq"])
    return [merged[p] for p in sorted(merged)]


def merge_delay(previous: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """count, sum, min and max of the delays (``{"count": 0}`` when there are none)."""
    parts = [d for d in (previous, new) if d.get("count")]
    if not parts:
        return {"count": 0}
    return {
        "count": sum(d["count"] for d in parts),
        "sumMs": sum(d["sumMs"] for d in parts),
        "min": min(d["min"] for d in parts),
        "max": max(d["max"] for d in parts),
    }


def delay_summary(totals: Mapping[str, Any], sketch: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """count, min, mean, p50, p90, p99 (from the sketch, within 1%) and max."""
    if not totals.get("count"):
        return {"count": 0}
    counts = {int(r["bucket"]): int(r["records"]) for r in sketch}
    low, high = totals["min"], totals["max"]
    return {
        "count": totals["count"],
        "min": low,
        "mean": totals["sumMs"] / totals["count"],
        **{f"p{round(q * 100)}": round(sketch_quantile(counts, q, low, high)) for q in PERCENTILES},
        "max": high,
        "sumMs": totals["sumMs"],
    }


def top_keys(keys: Iterable[Mapping[str, Any]], n: int) -> Rows:
    """The n keys with the most records (ties: by key), ranked from 1."""
    ranked = sorted(keys, key=lambda r: (-r["records"], r["partition_key"]))[:n]
    return [{"rank": i, **row} for i, row in enumerate(ranked, start=1)]


def _sortable(key: tuple[Any, ...]) -> tuple[Any, ...]:
    # None (the histogram's open bucket) sorts last.
    return tuple((v is None, v if v is not None else 0) for v in key)
