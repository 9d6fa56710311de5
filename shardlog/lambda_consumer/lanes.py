"""Parallel lanes of one partition (Lambda's ParallelizationFactor): which lane a record
goes to, which records are done, and how far the checkpoint may move. Pure bookkeeping:
the delivery session (shardlog/lambda_consumer/delivery.py) reads, invokes and writes.

The rules, and why they are safe:

- **One lane per key.** A record goes to lane ``hash key mod factor``, its partition key's
  Kinesis hash key (the MD5 of the key, shardlog/hashing.py): the same key always in the
  same lane, in every partition and every runner.
- **In order per lane.** A lane holds the records taken from the log and not yet done, in
  log order; at most one of its batches is in flight, always the records at its front. So
  each key's records are invoked in log order, as at factor 1; keys of different lanes
  are not ordered with each other.
- **Done** means delivered (the function succeeded, or a partial batch response left the
  record out of its failures), or given up on with its on-failure record sent.
- **The checkpoint is the lowest seq not done**, over all lanes, or the frontier (the seq
  after the last record taken) when every lane is empty. It never passes a record that is
  not done; records past it that other lanes delivered are delivered again after a
  restart (at least once, as at factor 1 for the batch in flight).
- **Read-ahead is bounded**: at most ``2 * factor * batch_size`` records not done are held
  (a batch in flight and the next one per lane; at factor 1, one batch, as before lanes).
  A lane that keeps failing holds the checkpoint back; the other lanes go on until that
  many records wait, then wait for it (its retries, bisect and give-up run as at factor 1).
- **A restart** needs, beyond the checkpoint, each lane's batch being retried and give-up
  not yet sent (``LaneProgress``, saved whole with every checkpoint, fenced). A lane's
  records below the first seq of either were done, so a restart skips them; every other
  record from the checkpoint on is delivered again. A progress written under another
  factor is dropped: its records are not done, so they are delivered again.

At factor 1 there is one lane and the bound is one batch: the delivery of before lanes.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field

from shardlog.dal.consumers import LaneProgress, PendingFailure, RetryState
from shardlog.format import LogRecord
from shardlog.hashing import hash_key
from shardlog.lambda_consumer.feed import FedRecord

MIN_FACTOR, MAX_FACTOR = 1, 10  # Lambda's ParallelizationFactor range


def lane_of(partition_key: str, factor: int) -> int:
    """The lane of a partition key: stable for a key and a factor."""
    return hash_key(partition_key) % factor


@dataclass
class Lane:
    index: int
    waiting: deque[FedRecord] = field(default_factory=deque)  # taken, not done, in log order
    retry: RetryState | None = None
    pending: PendingFailure | None = None
    in_flight: bool = False
    not_before_ms: int = 0  # a failed batch's retry waits until then (the backoff)
    done_below: int = 0  # after a restart: this lane's records below this seq were done

    def records(self, count: int, *, below: int | None = None) -> list[FedRecord]:
        """Up to ``count`` records from the front (only seqs < ``below`` when given)."""
        taken: list[FedRecord] = []
        for fed in self.waiting:
            if len(taken) >= count or (below is not None and fed.record.seq >= below):
                break
            taken.append(fed)
        return taken

    def done(self, count: int) -> None:
        for _ in range(count):
            self.waiting.popleft()

    def next_seq(self, frontier: int) -> int:
        """The lane's first record not done (the frontier when it holds none)."""
        return self.waiting[0].record.seq if self.waiting else frontier


class Lanes:
    def __init__(
        self, factor: int, batch_size: int, position: int, progress: LaneProgress | None = None
    ) -> None:
        if not MIN_FACTOR <= factor <= MAX_FACTOR:
            raise ValueError(f"parallelization factor {factor} is not {MIN_FACTOR} to {MAX_FACTOR}")
        self.factor = factor
        # Records not done held at most: at factor 1 the invocation is synchronous, so one
        # batch; with lanes, a lane's next batch is read while its batch is in flight.
        self.limit = batch_size if factor == 1 else 2 * factor * batch_size
        self.frontier = position  # the seq after the last record taken
        self.lanes = [Lane(i) for i in range(factor)]
        self.dropped = progress is not None and progress.factor != factor
        if progress is not None and not self.dropped:
            self._restore(progress)

    def _restore(self, progress: LaneProgress) -> None:
        for index, retry in progress.retries.items():
            self.lanes[index].retry = retry
            self.lanes[index].done_below = retry.start
        for index, pending in progress.pending.items():
            self.lanes[index].pending = pending
            self.lanes[index].done_below = pending.start

    def __iter__(self) -> Iterator[Lane]:
        return iter(self.lanes)

    # --- records in ----------------------------------------------------------------------
    @property
    def room(self) -> int:
        """How many more records may be taken from the log now."""
        return self.limit - sum(len(lane.waiting) for lane in self.lanes)

    def add(self, fed: FedRecord, *, kept: bool = True) -> None:
        """The next record of the log (in log order), into its key's lane; a record the
        group's filters do not keep enters no lane: it is done as soon as it is taken."""
        record = fed.record
        assert record.seq == self.frontier, f"took seq {record.seq} at {self.frontier}"
        lane = self.lanes[lane_of(record.partition_key, self.factor)]
        if kept and record.seq >= lane.done_below:
            lane.waiting.append(fed)
        self.frontier = record.seq + 1

    # --- where it stands -----------------------------------------------------------------
    def checkpoint(self) -> int:
        """The lowest seq not done over every lane: the checkpoint may move there."""
        fronts = [lane.waiting[0].record.seq for lane in self.lanes if lane.waiting]
        return min(fronts, default=self.frontier)

    def oldest(self) -> LogRecord | None:
        """The record at the checkpoint, when it is held."""
        fronts = [lane.waiting[0].record for lane in self.lanes if lane.waiting]
        return min(fronts, key=lambda r: r.seq, default=None)

    def progress(self) -> LaneProgress:
        return LaneProgress(
            self.factor,
            {lane.index: lane.retry for lane in self.lanes if lane.retry is not None},
            {lane.index: lane.pending for lane in self.lanes if lane.pending is not None},
        )

    @property
    def in_flight(self) -> int:
        return sum(lane.in_flight for lane in self.lanes)

    @property
    def retrying(self) -> bool:
        return any(lane.retry is not None or lane.pending is not None for lane in self.lanes)

    @property
    def empty(self) -> bool:
        return not any(lane.waiting or lane.pending for lane in self.lanes)
