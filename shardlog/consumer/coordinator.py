"""Which leases a worker takes: KCL's LeaseTaker, without its stealing storms.

Pure functions over one listing of the group's leases, so every rule is testable
without AWS; the worker executes the plan with ``LeaseManager.take`` conditioned on
the counter it saw, so two workers acting on the same listing cannot both win.

1. Only *eligible* partitions count: shard sync recorded the partition's lineage, every
   parent is ENDED and checkpointed SHARD_END by the group, and the partition itself is
   not finished (checkpoint SHARD_END).
2. workers = distinct owners of live leases, plus this worker; target =
   ceil(eligible / workers), capped at max_leases.
3. Below target: take unowned and expired leases first (as many as needed).
4. None available: move one lease, at most one per cycle, from the most loaded
   worker, only if it holds more than the target (or exactly the target while this
   worker needs two or more, KCL's rule b), and never when the two differ by one.
   Each move lowers the sum of squared loads, so balancing converges and never
   ping-pongs. The worker *asks* for that lease (graceful handoff) and steals it only
   when the owner does not hand it over in time; a lease another worker already asked
   for is chosen last.
5. A live lease the table shows as this worker's that it does not process (handed over
   to it, or a restart with the same worker id) is always taken, whatever the target.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field

from shardlog import constants as C
from shardlog.partitions import lineage_known, parents_done
from shardlog.tables import Lease, PartitionInfo


@dataclass(frozen=True)
class TakePlan:
    take: list[Lease] = field(default_factory=list)  # unowned or expired (or ours, untracked)
    steal: Lease | None = None  # a live lease of the most loaded worker
    target: int = 0
    workers: int = 1
    eligible: int = 0
    held: int = 0


def eligible_leases(
    leases: Iterable[Lease], partitions: Mapping[str, PartitionInfo]
) -> list[Lease]:
    """Leases a worker may hold: unfinished, lineage known, every parent done."""
    by_partition = {lease.partition_id: lease for lease in leases}
    return [
        lease
        for lease in by_partition.values()
        if lease.checkpoint != C.SHARD_END
        and lineage_known(partitions.get(lease.partition_id))
        and parents_done(partitions[lease.partition_id].parents, partitions, by_partition)
    ]


def plan_takes(
    eligible: Collection[Lease],
    me: str,
    now_ms: int,
    *,
    tracked: Collection[str] = (),
    blocked: Collection[str] = (),
    max_leases: int = 10_000,
    rng: random.Random | None = None,
) -> TakePlan:
    """What this worker should take in this cycle, given the eligible leases as listed.

    ``tracked``: partitions this worker is processing now. A lease the table shows as
    ours but that we do not track (say, a restart with the same worker id) is taken
    again. ``blocked``: partitions this worker must not take yet (failure backoff).
    """
    rng = rng or random.Random(me)
    live = [lease for lease in eligible if lease.is_live(now_ms)]
    load: Counter[str] = Counter(
        lease.owner
        for lease in live
        if lease.owner is not None and (lease.owner != me or lease.partition_id in tracked)
    )
    held = load.get(me, 0)
    load[me] = held
    workers = len(load)
    count = len(eligible)
    if count == 0:
        return TakePlan(workers=workers, held=held)
    target = 1 if workers >= count else math.ceil(count / workers)
    target = min(target, max_leases)
    needed = target - held
    skip = set(tracked) | set(blocked)
    handed_over = sorted(
        (lease for lease in live if lease.owner == me and lease.partition_id not in skip),
        key=lambda lease: lease.partition_id,
    )
    if needed <= len(handed_over):
        return TakePlan(handed_over, None, target, workers, count, held)
    available = [
        lease for lease in eligible if lease.partition_id not in skip and not lease.is_live(now_ms)
    ]
    if handed_over or available:
        available.sort(key=lambda lease: lease.partition_id)
        rng.shuffle(available)  # workers of one listing should not all race for the same lease
        take = handed_over + available[: needed - len(handed_over)]
        return TakePlan(take, None, target, workers, count, held)
    steal = _choose_steal(live, load, me, needed, target, blocked, rng)
    return TakePlan([], steal, target, workers, count, held)


def _choose_steal(
    live: list[Lease],
    load: Counter[str],
    me: str,
    needed: int,
    target: int,
    blocked: Collection[str],
    rng: random.Random,
) -> Lease | None:
    others = [(count, owner) for owner, count in load.items() if owner != me]
    if not others:
        return None
    victim_count, victim = max(others, key=lambda item: (item[0], item[1]))
    over_target = victim_count > target or (victim_count == target and needed > 1)
    if not over_target or victim_count - load[me] <= 1:
        return None
    candidates = sorted(
        (lease for lease in live if lease.owner == victim and lease.partition_id not in blocked),
        key=lambda lease: lease.partition_id,
    )
    unasked = [c for c in candidates if c.transfer_requested_by in (None, me)]
    return rng.choice(unasked or candidates) if candidates else None
