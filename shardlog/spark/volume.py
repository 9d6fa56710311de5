"""Compaction started by volume: a run when the uncompacted backlog passes a threshold.

The partitions table's stream (every commit moves a head and adds to ``committedBytes``)
feeds the Spark trigger Lambda as well as the schedule. Protocol, per stream batch:

1. **Count** (no lake read): each partition's change in the batch (first old image, last
   new image) is added to the ``$volume`` counter item (shardlog/dal/volume.py), once:
   the count is conditional on the head counted last, so a batch delivered twice, or
   two batches of different partitions at once, add each commit exactly once.
2. **Resend** a claimed crossing whose start was not answered: StartJobRun again with the
   crossing's clientToken (EMR Serverless answers it with the run already started, if any),
   then confirm. A lost StartJobRun answer or a crash after the claim never loses the run
   and never starts a second one.
3. **Cross**: when the backlog (counted minus claimed, records or bytes) reaches a
   threshold, check that no run of the job is active (ListJobRuns, only at a crossing: a
   run active now may not cover these records, so the crossing stays for the next batch
   after it ends); then **claim** the next crossing, conditional on the crossing read: of
   every invocation that saw the crossing, one claims it, and only that one starts.
4. **Start** the claimed crossing's run (clientToken = SHA-256 of the run name and the
   crossing number), then confirm it on the item.

5. **Absorb**: a scheduled compaction run that starts sets claimed = counted (``absorb``):
   what it will compact is no backlog, so the schedule is the maximum interval and volume
   adds runs only where a crossing comes sooner.

The schedule stays as it was (the maximum interval between runs) and the jobs stay
correct however runs overlap (every watermark write is fenced, docs/LAKE.md): the claim
and the active check save runs, they do not guard data. Cost per batch: one UpdateItem per
partition it changed; ListJobRuns, the claim, StartJobRun and the confirm only at a crossing.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from shardlog import constants as C
from shardlog.dal.volume import Backlog, BacklogCounter, PartitionProgress
from shardlog.spark.jobs import COMPACT, run_name
from shardlog.spark.trigger import SparkTrigger

BELOW, BUSY, CLAIMED, CLAIMED_ELSEWHERE, RESENT, NOTHING = (
    "below threshold",
    "a run is active",
    "claimed",
    "claimed by another invocation",
    "resent",
    "no head moved",
)


@dataclass(frozen=True)
class VolumeThreshold:
    """Start a run once this many records or bytes are committed and not yet claimed
    (None: that measure never starts one)."""

    records: int | None = None
    bytes: int | None = None

    @property
    def enabled(self) -> bool:
        return self.records is not None or self.bytes is not None

    def crossed(self, backlog: Backlog) -> bool:
        by_records = self.records is not None and backlog.records >= self.records
        by_bytes = self.bytes is not None and backlog.bytes >= self.bytes
        return by_records or by_bytes


def volume_client_token(job: str, crossing: int) -> str:
    """64 hex characters from the job and the crossing number: one run per crossing."""
    return hashlib.sha256(f"{run_name(job)}|volume|{crossing}".encode()).hexdigest()


def _number(image: Mapping[str, Any] | None, name: str) -> int:
    value = (image or {}).get(name)
    return int(value) if value is not None else 0


def progress_from_changes(
    changes: Iterable[tuple[Mapping[str, Any] | None, Mapping[str, Any] | None]],
) -> list[PartitionProgress]:
    """Per partition, from its first old image to its last new image (a stream shard
    delivers one item's changes in order), where the head moved forward."""
    first: dict[str, tuple[int, int]] = {}
    last: dict[str, tuple[int, int]] = {}
    for old_image, new_image in changes:
        if not new_image:
            continue
        pid = str(new_image[C.ATTR_PARTITION_ID])
        old = (
            _number(old_image, C.ATTR_NEXT_SEQUENCE_NUMBER),
            _number(old_image, C.ATTR_COMMITTED_BYTES),
        )
        new = (
            _number(new_image, C.ATTR_NEXT_SEQUENCE_NUMBER),
            _number(new_image, C.ATTR_COMMITTED_BYTES),
        )
        first.setdefault(pid, old)
        last[pid] = new
    return [
        PartitionProgress(pid, first[pid][0], new[0], first[pid][1], new[1])
        for pid, new in sorted(last.items())
        if new[0] > first[pid][0]
    ]


@dataclass(frozen=True)
class VolumeResult:
    reason: str
    backlog: Backlog | None = None
    crossing: int | None = None
    job_run_id: str | None = None

    @property
    def started(self) -> bool:
        return self.job_run_id is not None

    def as_dict(self) -> dict[str, Any]:
        backlog = self.backlog or Backlog()
        return {
            "job": COMPACT,
            "source": "volume",
            "reason": self.reason,
            "started": self.started,
            "crossing": self.crossing,
            "jobRunId": self.job_run_id,
            "backlogRecords": backlog.records,
            "backlogBytes": backlog.bytes,
        }


class VolumeTrigger:
    """Steps 1 to 4 of the module docstring, for the compaction job."""

    def __init__(
        self, spark: SparkTrigger, counter: BacklogCounter, threshold: VolumeThreshold
    ) -> None:
        self.spark = spark
        self.counter = counter
        self.threshold = threshold
        self.job = COMPACT

    def on_changes(
        self, changes: Iterable[tuple[Mapping[str, Any] | None, Mapping[str, Any] | None]]
    ) -> VolumeResult:
        backlog = self.count(progress_from_changes(changes))
        if backlog is None:
            return VolumeResult(NOTHING)
        if backlog.unstarted_claim:
            return self.start(backlog, backlog.crossing, RESENT)
        if not self.threshold.crossed(backlog):
            return VolumeResult(BELOW, backlog)
        if self.spark.active_runs(self.job):
            return VolumeResult(BUSY, backlog)
        if not self.counter.claim(backlog):
            return VolumeResult(CLAIMED_ELSEWHERE, backlog)
        return self.start(backlog, backlog.crossing + 1, CLAIMED)

    def scheduled_run_started(self) -> None:
        """Step 5: the backlog counts from the scheduled run's start."""
        self.counter.absorb()

    def count(self, progress: Iterable[PartitionProgress]) -> Backlog | None:
        """Step 1: the counter after this batch (None: the batch moved no head)."""
        backlog = None
        for change in progress:
            backlog = self.counter.count(change)
        return backlog

    def start(self, backlog: Backlog, crossing: int, reason: str) -> VolumeResult:
        """Steps 2 and 4: StartJobRun under the crossing's token, then confirm it."""
        run_id = self.spark.start(self.job, volume_client_token(self.job, crossing))
        self.counter.confirm(crossing, run_id)
        return VolumeResult(reason, backlog, crossing, run_id)
