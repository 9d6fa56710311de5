"""The lease taker's rules, on listings built in memory (pure functions, no AWS)."""

from __future__ import annotations

import random

import pytest

from shardlog import constants as C
from shardlog.consumer.coordinator import eligible_leases, plan_takes
from shardlog.tables import Lease, PartitionInfo

NOW = 1_000_000


def lease(partition: str, owner: str | None = None, *, live: bool = True, **kw: object) -> Lease:
    expires = 0 if owner is None else (NOW + 5_000 if live else NOW - 1)
    return Lease("g", partition, owner, counter=3, expires_at_ms=expires, **kw)  # type: ignore[arg-type]


def owned(loads: dict[str, int]) -> list[Lease]:
    leases, n = [], 0
    for owner, count in loads.items():
        for _ in range(count):
            leases.append(lease(f"p{n:02d}", owner))
            n += 1
    return leases


def mine(leases: list[Lease], me: str) -> set[str]:
    return {x.partition_id for x in leases if x.owner == me}


def test_unowned_and_expired_are_taken_first_up_to_the_target() -> None:
    leases = [*owned({"a": 2}), lease("x1"), lease("x2", "dead", live=False), lease("x3")]
    plan = plan_takes(leases, "me", NOW)
    assert (plan.workers, plan.target) == (2, 3)
    assert len(plan.take) == 3 and plan.steal is None
    assert {x.partition_id for x in plan.take} == {"x1", "x2", "x3"}


def test_no_steal_while_something_is_free_and_at_most_one_steal_per_cycle() -> None:
    plan = plan_takes(owned({"a": 6}), "me", NOW)
    assert plan.take == [] and plan.steal is not None and plan.steal.owner == "a"


@pytest.mark.parametrize(
    ("loads", "steals"),
    [
        ({"a": 3, "me": 2}, False),  # differ by one: hysteresis, no ping-pong
        ({"a": 2, "b": 2, "me": 1}, False),  # 5 over 3: target 2, a holds only the target
        ({"a": 2, "b": 2, "me": 0}, True),  # KCL rule b: at target, but I need two
        ({"a": 4, "me": 1}, True),
    ],
)
def test_stealing_rules(loads: dict[str, int], steals: bool) -> None:
    leases = owned(loads)
    tracked = mine(leases, "me")
    plan = plan_takes(leases, "me", NOW, tracked=tracked)
    assert (plan.steal is not None) == steals


def test_balancing_converges_without_ping_pong() -> None:
    """Simulated workers taking turns reach ceil/floor loads and then never move a lease."""
    rng = random.Random(7)
    for _ in range(50):
        workers = [f"w{i}" for i in range(rng.randint(2, 6))]
        partitions = rng.randint(1, 20)
        owners: dict[str, str | None] = {f"p{i:02d}": None for i in range(partitions)}
        moves = 0
        for _ in range(200):
            for worker in workers:
                listing = [lease(p, o) for p, o in owners.items()]
                tracked = {p for p, o in owners.items() if o == worker}
                plan = plan_takes(listing, worker, NOW, tracked=tracked, rng=rng)
                for taken in [*plan.take, *([plan.steal] if plan.steal else [])]:
                    moves += taken.owner is not None
                    owners[taken.partition_id] = worker
        loads = sorted(list(owners.values()).count(w) for w in workers)
        assert loads[-1] - loads[0] <= 1, (workers, partitions, loads)
        assert moves <= partitions * len(workers), "stealing storm"
        settled = dict(owners)
        for worker in workers:  # one more round moves nothing
            listing = [lease(p, o) for p, o in owners.items()]
            tracked = {p for p, o in owners.items() if o == worker}
            plan = plan_takes(listing, worker, NOW, tracked=tracked, rng=rng)
            assert plan.take == [] and plan.steal is None
        assert owners == settled


def test_max_leases_caps_the_target() -> None:
    plan = plan_takes([lease(f"x{i}") for i in range(5)], "me", NOW, max_leases=2)
    assert plan.target == 2 and len(plan.take) == 2


def test_a_lease_listed_as_ours_but_not_tracked_is_taken_again() -> None:
    plan = plan_takes([lease("x", "me")], "me", NOW, tracked=set())
    assert [x.partition_id for x in plan.take] == ["x"]


def test_a_lease_handed_over_to_us_is_taken_whatever_the_target() -> None:
    """A handoff wrote us as the owner: we take it even at (or above) the target, and
    before anything free, so the handed-over partition does not wait for an expiry."""
    leases = [*owned({"me": 2, "a": 2}), lease("h", "me"), lease("free")]
    tracked = mine(leases, "me") - {"h"}
    plan = plan_takes(leases, "me", NOW, tracked=tracked)
    assert plan.target == 3 and plan.held == 2
    assert [x.partition_id for x in plan.take] == ["h"] and plan.steal is None
    at_target = [*owned({"me": 3, "a": 1}), lease("h", "me")]
    full = plan_takes(at_target, "me", NOW, tracked=mine(at_target, "me") - {"h"})
    assert (full.target, full.held) == (3, 3)
    assert [x.partition_id for x in full.take] == ["h"], "above the target too"


def test_a_move_prefers_a_lease_nobody_else_asked_for() -> None:
    leases = [lease(f"p{i}", "a", transfer_requested_by="b" if i else None) for i in range(4)]
    for seed in range(20):
        plan = plan_takes(leases, "me", NOW, rng=random.Random(seed))
        assert plan.steal is not None and plan.steal.partition_id == "p0"
    asked = [lease(f"p{i}", "a", transfer_requested_by="b") for i in range(4)]
    assert plan_takes(asked, "me", NOW).steal is not None, "all asked for: still one"


def test_backed_off_partitions_are_not_taken() -> None:
    plan = plan_takes([lease("x"), lease("y")], "me", NOW, blocked={"x"})
    assert [x.partition_id for x in plan.take] == ["y"]


def info(pid: str, state: str = C.STATE_OPEN, parents: tuple[str, ...] = ()) -> PartitionInfo:
    return PartitionInfo(pid, 0, state, parents, starting_hash_key="0")


def test_eligibility_waits_for_parents_ended_and_consumed() -> None:
    partitions = {
        "p": info("p", C.STATE_ENDED),
        "c": info("c", parents=("p",)),
        "orphan": info("orphan", parents=("gone",)),
        "unsynced": PartitionInfo("unsynced"),
    }
    listing = [lease("p", checkpoint="7"), lease("c"), lease("orphan"), lease("unsynced")]
    assert {x.partition_id for x in eligible_leases(listing, partitions)} == {"p", "orphan"}
    listing[0] = lease("p", checkpoint=C.SHARD_END)
    assert {x.partition_id for x in eligible_leases(listing, partitions)} == {"c", "orphan"}
    partitions["p"] = info("p", C.STATE_CLOSED)  # SHARD_END but not ENDED: still waits
    assert {x.partition_id for x in eligible_leases(listing, partitions)} == {"orphan"}
