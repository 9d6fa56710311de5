"""Check the log against what was produced, from S3 and DynamoDB alone."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field

from shardlog.exceptions import ShardlogError
from shardlog.partitions import lineage_order
from shardlog.reader import LogReader
from shardlog.tables import PartitionInfo


@dataclass
class Verification:
    records: int = 0
    segments: int = 0
    partitions: int = 0
    violations: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.violations


def verify_log(
    reader: LogReader,
    partitions: list[PartitionInfo],
    expected: dict[str, int],
    start: Mapping[str, int] | None = None,
) -> Verification:
    """Every expected record (data = JSON {"k": key, "n": per-key counter}) exactly once,
    each key's counters in order when partitions are read parents-first, seqs dense.

    ``expected`` maps each key to how many records were produced for it. ``start``: per
    partition, the seq the check begins at (the head before the records were produced, on
    a log that held others already); 0 for a partition it does not name.
    """
    result = Verification(partitions=len(partitions))
    seen: dict[str, list[int]] = defaultdict(list)
    for partition in lineage_order(partitions):
        first = (start or {}).get(partition.partition_id, 0)
        try:
            for segment in reader.segments(partition.partition_id, first):
                result.segments += 1
                for record in segment.records:
                    if record.seq < first:  # a segment begun below the start
                        continue
                    body = json.loads(record.data)
                    seen[body["k"]].append(body["n"])
                    result.records += 1
        except ShardlogError as exc:
            result.violations.append(f"{partition.partition_id}: {exc}")
    for key, count in expected.items():
        got = seen.get(key, [])
        if got != list(range(count)):
            missing = sorted(set(range(count)) - set(got))
            duplicated = sorted({n for n in got if got.count(n) > 1})
            result.violations.append(
                f"key {key}: missing {missing[:5]}, duplicated {duplicated[:5]}, "
                f"in order: {got == sorted(got)}"
            )
    unexpected = set(seen) - set(expected)
    if unexpected:
        result.violations.append(f"{len(unexpected)} unexpected key(s) in the log")
    return result
