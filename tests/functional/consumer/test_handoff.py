"""Graceful lease handoff (KCL 3 style) against the embedded AWS, driven with a manual clock.

A worker that wants a lease asks for it; the owner finishes its batch, lets its processor
checkpoint and transfers the lease; the requester starts at that checkpoint. So planned
moves (a worker joining, a worker leaving) deliver nothing twice, while a crash or a hung
owner still falls back to expiry or a steal. The processors here checkpoint only when told
to, so a move that skipped the checkpoint (a steal, or a broken handoff) would deliver the
records after the last checkpoint again: every test below can fail.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable

import pytest

from shardlog.clock import ManualClock
from shardlog.consumer import (
    Checkpointer,
    CheckpointError,
    ConsumerSettings,
    RecordProcessor,
    Worker,
)
from shardlog.exceptions import LeaseLostError, ValidationError
from shardlog.format import LogRecord
from shardlog.lease import LeaseManager
from tests.support.aws import AwsEnv
from tests.support.factories import (
    FAST,
    Journal,
    append,
    fill,
    incoming_records,
    leases,
    run_until_idle,
)

GROUP = "movers"
SETTINGS = dataclasses.replace(FAST, handoff_timeout_ms=4_000)  # lease 10 s, renew 3 s


class Lazy(RecordProcessor):
    """Checkpoints a batch only while ``checkpointing``; at shutdown or handoff, the base
    class checkpoints everything delivered. Keeps its checkpointers (a zombie's handle)."""

    def __init__(self, journal: Journal, name: str, checkpointing: bool = False) -> None:
        self.journal, self.name, self.checkpointing = journal, name, checkpointing
        self.checkpointers: list[Checkpointer] = []
        self.calls: list[str] = []
        self.on_shutdown: Callable[[], None] = lambda: None  # runs before the checkpoint

    def process_records(self, records: list[LogRecord], checkpointer: Checkpointer) -> None:
        self.journal.add(self.name, records)
        self.checkpointers.append(checkpointer)
        if self.checkpointing:
            checkpointer.checkpoint()

    def shutdown_requested(self, checkpointer: Checkpointer) -> None:
        self.calls.append("shutdown_requested")
        self.on_shutdown()
        checkpointer.checkpoint()

    def lease_lost(self) -> None:
        self.calls.append("lease_lost")


def worker(
    aws: AwsEnv,
    clock: ManualClock,
    name: str,
    processor: Lazy,
    settings: ConsumerSettings = SETTINGS,
) -> Worker:
    return Worker(
        GROUP,
        processor,
        aws.config,
        clients=aws.fresh_clients(),
        settings=settings,
        clock=clock,
        worker_id=name,
        threads=4,
    )


def redelivered(journal: Journal) -> int:
    counts = Counter((d.partition_id, d.seq) for d in journal.deliveries)
    return sum(n - 1 for n in counts.values())


def delivered_by(journal: Journal, name: str, partition_id: str) -> list[int]:
    return [
        d.seq for d in journal.deliveries if d.worker == name and d.partition_id == partition_id
    ]


def one_holds_everything(
    aws: AwsEnv, clock: ManualClock, journal: Journal, settings: ConsumerSettings = SETTINGS
) -> tuple[Worker, list[str]]:
    """w1 alone takes 4 partitions of 20 records and delivers 2 batches of 4 from each,
    checkpointing none of them."""
    ids = fill(aws, 4, records=20)
    first = worker(aws, clock, "w1", Lazy(journal, "w1"), settings)
    for _ in range(2):  # take, then one batch per partition per cycle
        first.run_once()
        clock.advance(1)
    assert first.held == tuple(ids)
    assert all(journal.seqs(p) == list(range(8)) for p in ids)
    assert {lease.checkpoint for lease in leases(aws, GROUP).values()} == {None}
    return first, ids


def test_a_worker_joining_gets_leases_handed_over_and_nothing_is_delivered_twice(
    aws: AwsEnv, clock: ManualClock
) -> None:
    journal = Journal()
    first, ids = one_holds_everything(aws, clock, journal)
    second = worker(aws, clock, "w2", Lazy(journal, "w2", checkpointing=True))
    run_until_idle([first, second], clock)

    assert sorted(len(w.held) for w in (first, second)) == [2, 2]
    assert (second.stats.requested, second.stats.received, first.stats.handed_off) == (2, 2, 2)
    assert first.stats.stolen == second.stats.stolen == 0
    assert redelivered(journal) == 0
    for partition_id in ids:
        assert sorted(journal.seqs(partition_id)) == list(range(20)), "nothing skipped"
    moved = set(second.held)
    for partition_id in moved:  # w2 goes on right after what w1 delivered (and checkpointed)
        handed_at = max(delivered_by(journal, "w1", partition_id)) + 1
        assert delivered_by(journal, "w2", partition_id) == list(range(handed_at, 20))
    assert any(delivered_by(journal, "w2", p) for p in moved)
    for partition_id in moved:  # never both at once: w2 starts after w1's last batch
        order = [d.worker for d in journal.deliveries if d.partition_id == partition_id]
        assert order == sorted(order), f"{partition_id}: w1 and w2 interleaved: {order}"
    table = leases(aws, GROUP)
    assert {p for p, lease in table.items() if lease.owner == "w2"} == moved
    assert all(lease.transfer_requested_by is None for lease in table.values())
    first.shutdown()
    second.shutdown()


def test_the_same_join_with_handoff_off_steals_and_delivers_records_twice(
    aws: AwsEnv, clock: ManualClock
) -> None:
    """The control: what the handoff saves (KCL 2's steal)."""
    journal = Journal()
    stealing = dataclasses.replace(SETTINGS, graceful_handoff=False)
    first, _ = one_holds_everything(aws, clock, journal, stealing)
    second = worker(aws, clock, "w2", Lazy(journal, "w2", checkpointing=True), stealing)
    run_until_idle([first, second], clock)
    assert second.stats.stolen == 2 and second.stats.requested == 0
    stolen = second.held
    lazy = sum(len(delivered_by(journal, "w1", p)) for p in stolen)
    assert lazy >= 2 * 8 and redelivered(journal) == lazy  # all w1 had not checkpointed
    first.close()
    second.shutdown()


def test_scale_in_hands_leases_to_a_requester_or_releases_them_at_a_checkpoint(
    aws: AwsEnv, clock: ManualClock
) -> None:
    journal = Journal()
    first, ids = one_holds_everything(aws, clock, journal)
    second = worker(aws, clock, "w2", Lazy(journal, "w2", checkpointing=True))
    second.run_once()  # lists, and asks w1 for one lease
    asked = [p for p, lease in leases(aws, GROUP).items() if lease.transfer_requested_by == "w2"]
    assert len(asked) == 1 and second.stats.requested == 1

    first.shutdown()  # scale-in: each processor checkpoints, then hand over or release
    table = leases(aws, GROUP)
    assert table[asked[0]].owner == "w2", "handed to the requester, not released"
    assert {table[p].owner for p in ids if p != asked[0]} == {None}
    assert {table[p].checkpoint for p in ids} == {"8"}
    assert first.stats.handed_off == 4 and first.stats.stolen == 0

    run_until_idle([second], clock)  # no clock advance: nothing waits for an expiry
    assert set(second.held) == set(ids)
    assert redelivered(journal) == 0
    for partition_id in ids:
        assert journal.seqs(partition_id) == list(range(20))
    second.shutdown()


def test_a_crashed_owner_is_taken_over_after_lease_duration_plus_a_renew_interval(
    aws: AwsEnv, clock: ManualClock
) -> None:
    journal = Journal()
    first, ids = one_holds_everything(aws, clock, journal)
    second = worker(aws, clock, "w2", Lazy(journal, "w2", checkpointing=True))
    lazy = first.factory("p0").target  # type: ignore[attr-defined]
    lazy.checkpointing = True
    run_until_idle([first, second], clock)  # balanced 2/2 by handoffs, all checkpointed
    lazy.checkpointing = False
    for partition_id in ids:
        append(aws, partition_id, incoming_records(6))
    first.run_once()  # w1 delivers 20..23 of its partitions and checkpoints none of them
    kept = first.held
    delivered_before = {p: journal.seqs(p)[-1] for p in kept}
    assert set(delivered_before.values()) == {23}
    crashed_at = clock.now_ms()
    first.close()  # crash: no handoff, no checkpoint

    step_ms = 100
    taken_over_at = None
    for _ in range(400):  # 40 s of clock at most
        clock.advance(step_ms)
        second.run_once()
        if any(d.worker == "w2" and d.partition_id in kept for d in journal.deliveries):
            taken_over_at = clock.now_ms()
            break
    assert taken_over_at is not None, "never taken over"
    takeover_ms = taken_over_at - crashed_at
    bound_ms = SETTINGS.lease_duration_ms + SETTINGS.renew_interval_ms
    assert SETTINGS.lease_duration_ms - SETTINGS.renew_interval_ms < takeover_ms <= bound_ms
    run_until_idle([second], clock)
    for partition_id in ids:
        seqs = journal.seqs(partition_id)
        assert set(seqs) == set(range(26)), "nothing skipped"
        twice = sorted(s for s, n in Counter(seqs).items() if n > 1)
        # only what came after the last checkpoint (20, at the handoff or w2's own) again
        assert twice == ([20, 21, 22, 23] if partition_id in kept else [])
    second.shutdown()


def test_a_request_to_a_hung_owner_falls_back_to_a_steal_before_expiry(
    aws: AwsEnv, clock: ManualClock
) -> None:
    journal = Journal()
    hung_processor = Lazy(journal, "w1")
    ids = fill(aws, 2, records=12)
    hung = worker(aws, clock, "w1", hung_processor)
    hung.run_once()
    hung.run_once()  # holds both, delivered 0..3 of each, checkpointed nothing
    last_write = clock.now_ms()
    second = worker(aws, clock, "w2", Lazy(journal, "w2", checkpointing=True))
    second.run_once()
    assert second.stats.requested == 1
    asked_at = clock.now_ms()

    stolen_at = None
    for _ in range(100):  # w1 is hung: it neither cycles nor renews
        clock.advance(100)
        second.run_once()
        if second.stats.stolen:
            stolen_at = clock.now_ms()
            break
    assert stolen_at is not None, "the request to a hung owner never fell back"
    timeout_ms = SETTINGS.handoff_timeout_ms or 0
    assert timeout_ms <= stolen_at - asked_at < timeout_ms + 200
    assert stolen_at < last_write + SETTINGS.lease_duration_ms, "a steal, not an expiry"
    assert second.stats.received == 0 and len(second.held) == 1
    (stolen,) = second.held
    assert delivered_by(journal, "w1", stolen) == list(range(8))
    assert delivered_by(journal, "w2", stolen)[0] == 0, "a steal redelivers"

    hung.run_once()  # wakes up: the listing shows w2, its processor hears lease_lost
    assert stolen not in hung.held and "lease_lost" in hung_processor.calls
    with pytest.raises(CheckpointError):
        next(c for c in hung_processor.checkpointers if c.partition_id == stolen).checkpoint()
    assert set(hung.held) == set(ids) - {stolen}
    hung.shutdown()
    second.shutdown()


def test_a_zombie_old_owner_cannot_write_after_handing_over(
    aws: AwsEnv, clock: ManualClock
) -> None:
    journal = Journal()
    first, _ = one_holds_everything(aws, clock, journal)
    processor = first.factory("p0").target  # type: ignore[attr-defined]
    stale = {p: c.holder.lease for p, c in first._consumers.items()}  # a paused owner's copies
    second = worker(aws, clock, "w2", Lazy(journal, "w2", checkpointing=True))
    run_until_idle([first, second], clock)
    moved = set(second.held)
    assert len(moved) == 2 and redelivered(journal) == 0
    table = leases(aws, GROUP)

    handles = [c for c in processor.checkpointers if c.partition_id in moved]
    assert handles, "w1 delivered batches of the partitions it handed over"
    for handle in handles:  # its processor's checkpointer is dead
        with pytest.raises(CheckpointError):
            handle.checkpoint()
    zombie = LeaseManager(aws.fresh_clients(), aws.config.consumers_table, clock=clock)
    for partition_id in moved:  # a copy from before the handoff is fenced by leaseCounter
        for write in (
            lambda lease: zombie.checkpoint(lease, "1"),
            zombie.renew,
            zombie.release,
            lambda lease: zombie.transfer(lease, "w1"),
        ):
            with pytest.raises(LeaseLostError):
                write(stale[partition_id])
    assert leases(aws, GROUP) == table, "no zombie write landed"
    first.shutdown()
    second.shutdown()


def test_a_request_withdrawn_while_the_owner_checkpoints_makes_it_release_instead(
    aws: AwsEnv, clock: ManualClock
) -> None:
    journal = Journal()
    first, ids = one_holds_everything(aws, clock, journal)
    second = worker(aws, clock, "w2", Lazy(journal, "w2", checkpointing=True))
    second.run_once()  # asks w1 for one lease
    (asked,) = [p for p, lease in leases(aws, GROUP).items() if lease.transfer_requested_by == "w2"]
    before = leases(aws, GROUP)[asked]
    withdrawn: list[bool] = []
    processor = first.factory(asked).target  # type: ignore[attr-defined]

    def withdraw() -> None:  # w2 takes its request back after w1 decided to hand over
        if not withdrawn:
            withdrawn.append(second.leases.withdraw_transfer(GROUP, asked, "w2"))

    processor.on_shutdown = withdraw

    first.run_once()  # w1 sees the request: checkpoints, transfer refused, releases
    assert withdrawn == [True]
    lease = leases(aws, GROUP)[asked]
    assert lease.owner is None and lease.transfer_requested_by is None, "released, not handed"
    assert lease.checkpoint == "8" and lease.counter > before.counter
    assert asked not in first.held and first.stats.handed_off == 1
    assert processor.calls[-2:] == ["shutdown_requested", "lease_lost"]

    run_until_idle([first, second], clock)  # no clock advance: a released lease is free
    assert sorted(len(w.held) for w in (first, second)) == [2, 2]
    assert first.stats.stolen == second.stats.stolen == 0 and redelivered(journal) == 0
    for partition_id in ids:
        assert sorted(journal.seqs(partition_id)) == list(range(20))
    first.shutdown()
    second.shutdown()


def test_the_requests_and_transfers_of_the_lease_manager(aws: AwsEnv, clock: ManualClock) -> None:
    """The conditions of docs/TABLES.md 4.5, one by one, on one lease item."""
    manager = LeaseManager(aws.clients, aws.config.consumers_table, clock=clock)
    manager.ensure(GROUP, "p0")
    (free,) = leases(aws, GROUP).values()
    assert manager.request_transfer(free, "w2", stale_after_ms=4_000) is None, "no owner: no ask"
    held = manager.take(free, "w1")

    asked = manager.request_transfer(held, "w2", stale_after_ms=4_000)
    assert asked is not None and asked.transfer_requested_by == "w2"
    assert asked.counter == held.counter, "asking does not fence the owner"
    assert asked.transfer_requested_at_ms == clock.now_ms()
    assert manager.request_transfer(held, "w3", stale_after_ms=4_000) is None, "w2's stands"
    clock.advance(4_000)
    assert manager.request_transfer(held, "w3", stale_after_ms=4_000) is not None, "stale: w3's"
    assert manager.transfer(held, "w2") is None, "w2's request was replaced: not handed to it"
    assert manager.withdraw_transfer(GROUP, "p0", "w2") is False, "not w2's request any more"
    assert manager.withdraw_transfer(GROUP, "p0", "w3") is True
    assert manager.transfer(held, "w3") is None, "withdrawn: not handed over"
    assert leases(aws, GROUP)["p0"].owner == "w1"

    renewed = manager.renew(held)  # the owner's writes return a request to it
    manager.request_transfer(renewed, "w2", stale_after_ms=4_000)
    renewed = manager.renew(renewed)
    assert renewed.transfer_requested_by == "w2"
    handed = manager.transfer(renewed, "w2")
    assert handed is not None and handed.owner == "w2" and handed.counter == renewed.counter + 1
    assert handed.transfer_requested_by is None and handed.is_live(clock.now_ms())
    with pytest.raises(LeaseLostError):  # the old owner's copy is fenced
        manager.transfer(renewed, "w2")

    # A request addressed to an owner that changed since the listing is refused.
    assert manager.request_transfer(renewed, "w3", stale_after_ms=4_000) is None
    assert leases(aws, GROUP)["p0"].transfer_requested_by is None
    manager.request_transfer(handed, "w3", stale_after_ms=4_000)
    taken = manager.take(leases(aws, GROUP)["p0"], "w4")  # a take (steal) clears a request
    assert taken.transfer_requested_by is None
    asked = manager.request_transfer(taken, "w3", stale_after_ms=4_000)
    assert asked is not None and asked.transfer_requested_by == "w3"
    with pytest.raises(LeaseLostError):  # w1's old copy cannot hand w4's lease to w3
        manager.transfer(renewed, "w3")
    assert leases(aws, GROUP)["p0"] == asked, "the zombie's transfer did not land"
    released = manager.release(taken)  # a release clears a request too
    assert released.transfer_requested_by is None and released.owner is None
    expired = manager.take(released, "w1")
    clock.advance(manager.lease_duration_ms)
    assert manager.request_transfer(expired, "w2", stale_after_ms=4_000) is None, "expired"


def test_a_worker_leaving_withdraws_its_request_or_releases_what_it_was_handed(
    aws: AwsEnv, clock: ManualClock
) -> None:
    journal = Journal()
    first, _ = one_holds_everything(aws, clock, journal)
    second = worker(aws, clock, "w2", Lazy(journal, "w2"))
    second.run_once()
    (asked,) = [p for p, lease in leases(aws, GROUP).items() if lease.transfer_requested_by == "w2"]
    second.shutdown()  # scale-in before w1 answered: the request goes with it
    assert leases(aws, GROUP)[asked].transfer_requested_by is None
    clock.advance(1)
    first.run_once()  # lists: no request stands
    assert asked in first.held and first.stats.handed_off == 0, "nothing handed to a leaver"

    third = worker(aws, clock, "w3", Lazy(journal, "w3"))
    third.run_once()
    (asked,) = [p for p, lease in leases(aws, GROUP).items() if lease.transfer_requested_by == "w3"]
    clock.advance(1)
    first.run_once()  # lists, sees the request, hands the lease to w3...
    assert leases(aws, GROUP)[asked].owner == "w3"
    third.shutdown()  # ...which leaves before it listed again
    lease = leases(aws, GROUP)[asked]
    assert lease.owner is None and not lease.is_live(clock.now_ms()), "released, not left to expire"
    run_until_idle([first], clock)
    assert asked in first.held and redelivered(journal) == 0
    first.shutdown()


@pytest.mark.parametrize(
    ("timeout_ms", "limit"),
    [
        (10_000, 10_000),  # = lease duration
        (12_000, 10_000),
        (3_000, 3_000),  # = renew interval
        (1_000, 3_000),
        (0, 1),
    ],
)
def test_handoff_timeout_past_its_limits_is_refused_naming_the_field(
    timeout_ms: int, limit: int
) -> None:
    with pytest.raises(ValidationError) as raised:
        ConsumerSettings(
            lease_duration_ms=10_000, renew_interval_ms=3_000, handoff_timeout_ms=timeout_ms
        )
    assert raised.value.field == "handoff_timeout_ms" and raised.value.limit == limit
    assert "handoff_timeout_ms" in str(raised.value)


@pytest.mark.parametrize(
    ("lease_ms", "renew_ms", "timeout_ms", "effective_ms"),
    [
        (10_000, 3_000, 9_999, 9_999),  # at the lease-duration edge
        (10_000, 3_000, 3_001, 3_001),  # at the renew-interval edge
        (10_000, 3_000, None, 5_000),  # default: half the lease duration
        (10_000, 8_000, None, 8_001),  # ...but longer than a renew interval
        (10_000, 9_999, None, 9_999),  # ...and shorter than the lease (if there is room)
    ],
)
def test_handoff_timeout_at_its_limits_and_its_default(
    lease_ms: int, renew_ms: int, timeout_ms: int | None, effective_ms: int
) -> None:
    settings = ConsumerSettings(
        lease_duration_ms=lease_ms, renew_interval_ms=renew_ms, handoff_timeout_ms=timeout_ms
    )
    assert settings.effective_handoff_timeout_ms == effective_ms
