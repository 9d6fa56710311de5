"""The lease protocol against the embedded DynamoDB, with a manual clock."""

from __future__ import annotations

import threading
import uuid
from dataclasses import dataclass, field
from typing import Any

import pytest
from botocore.exceptions import ClientError

from shardlog import constants as C
from shardlog.clock import ManualClock
from shardlog.exceptions import LeaseHeldError, LeaseLostError
from shardlog.lease import LeaseManager
from shardlog.tables import Lease, Tables
from tests.support import DOCS
from tests.support.aws import AwsEnv, make_env

DURATION_MS = 10_000
GROUP = "readers"


@pytest.fixture(scope="module")
def aws(endpoint_url: str) -> AwsEnv:
    """One set of tables for this module (creating them per test costs most of the run
    time); each test leases partitions of its own, so no test sees another's items."""
    return make_env(endpoint_url, 1)


@pytest.fixture
def partition() -> str:
    return f"shardId-{uuid.uuid4().int % 10**12:012d}"


@pytest.fixture
def leases(aws: AwsEnv, clock: ManualClock) -> LeaseManager:
    return LeaseManager(
        aws.clients, aws.config.consumers_table, clock=clock, lease_duration_ms=DURATION_MS
    )


@pytest.fixture
def tables(aws: AwsEnv) -> Tables:
    return Tables(aws.clients, aws.config.tables)


def stored(tables: Tables, partition_id: str, group: str = GROUP) -> Lease:
    lease = tables.get_lease(group, partition_id)
    assert lease is not None
    return lease


# --- acquire --------------------------------------------------------------------------------


def test_acquire_creates_the_lease(
    leases: LeaseManager, tables: Tables, clock: ManualClock, partition: str
) -> None:
    lease = leases.acquire(GROUP, partition, "w1")

    assert lease.owner == "w1"
    assert lease.counter == 1
    assert lease.expires_at_ms == clock.now_ms() + DURATION_MS
    assert lease.owner_switches == 1
    assert lease.checkpoint is None
    assert lease.is_live(clock.now_ms())
    assert stored(tables, partition) == lease


def test_acquire_again_by_the_same_owner_increments_the_counter_and_extends(
    leases: LeaseManager, tables: Tables, clock: ManualClock, partition: str
) -> None:
    first = leases.acquire(GROUP, partition, "w1")
    clock.advance(3_000)

    second = leases.acquire(GROUP, partition, "w1")

    assert second.owner == "w1"
    assert second.counter == first.counter + 1
    assert second.expires_at_ms == first.expires_at_ms + 3_000
    assert stored(tables, partition) == second
    with pytest.raises(LeaseLostError):  # the older copy of the lease is fenced
        leases.renew(first)


def test_acquire_by_another_owner_while_live_names_the_holder(
    leases: LeaseManager, tables: Tables, clock: ManualClock, partition: str
) -> None:
    held = leases.acquire(GROUP, partition, "w1")
    clock.advance(DURATION_MS - 1)

    with pytest.raises(LeaseHeldError) as caught:
        leases.acquire(GROUP, partition, "w2")

    assert caught.value.owner == "w1"
    assert caught.value.expires_at_ms == held.expires_at_ms
    assert (caught.value.group, caught.value.partition_id) == (GROUP, partition)
    assert f"held by 'w1' until {held.expires_at_ms}" in str(caught.value)
    assert caught.value.aws_error_code == "ConditionalCheckFailedException"
    assert stored(tables, partition) == held


def test_after_expiry_another_owner_acquires_and_fences_the_old_holder(
    leases: LeaseManager, tables: Tables, clock: ManualClock, partition: str
) -> None:
    old = leases.acquire(GROUP, partition, "w1")
    clock.advance(DURATION_MS)  # expiresAt <= now: expired, exactly at the boundary

    new = leases.acquire(GROUP, partition, "w2")

    assert new.owner == "w2"
    assert new.counter == old.counter + 1
    assert new.owner_switches == old.owner_switches + 1
    for fenced_write in (
        lambda: leases.renew(old),
        lambda: leases.checkpoint(old, "42"),
        lambda: leases.release(old),
    ):
        with pytest.raises(LeaseLostError, match=f"held counter {old.counter}") as caught:
            fenced_write()
        assert (caught.value.group, caught.value.partition_id) == (GROUP, partition)
    after = stored(tables, partition)
    assert after == new
    assert after.checkpoint is None


def test_fencing_does_not_depend_on_the_old_holders_clock(
    aws: AwsEnv, leases: LeaseManager, clock: ManualClock, partition: str
) -> None:
    old = leases.acquire(GROUP, partition, "w1")
    clock.advance(DURATION_MS)
    leases.acquire(GROUP, partition, "w2")
    # The old holder's clock is far behind: by its reckoning the lease is still live.
    paused = LeaseManager(
        aws.fresh_clients(),
        aws.config.consumers_table,
        clock=ManualClock(old.expires_at_ms - DURATION_MS),
        lease_duration_ms=DURATION_MS,
    )
    with pytest.raises(LeaseLostError):
        paused.checkpoint(old, "7")
    with pytest.raises(LeaseLostError):
        paused.renew(old)


def test_expired_lease_can_be_acquired_again_by_its_owner_and_fences_stale_copies(
    leases: LeaseManager, clock: ManualClock, partition: str
) -> None:
    old = leases.acquire(GROUP, partition, "w1")
    clock.advance(DURATION_MS * 5)
    again = leases.acquire(GROUP, partition, "w1")
    assert again.counter == old.counter + 1
    with pytest.raises(LeaseLostError):
        leases.checkpoint(old, "1")
    assert leases.checkpoint(again, "1").checkpoint == "1"


def test_acquire_by_the_same_owner_is_not_an_owner_switch(
    leases: LeaseManager, partition: str
) -> None:
    first = leases.acquire(GROUP, partition, "w1")
    checkpointed = leases.checkpoint(first, "5")
    assert checkpointed.owner_switches == 0
    assert leases.acquire(GROUP, partition, "w1").owner_switches == 0


# --- take -----------------------------------------------------------------------------------


def test_take_is_conditional_on_the_counter_seen(
    leases: LeaseManager, tables: Tables, clock: ManualClock, partition: str
) -> None:
    leases.ensure(GROUP, partition)
    seen = stored(tables, partition)
    assert (seen.owner, seen.counter) == (None, 0)

    taken = leases.take(seen, "w1")

    assert taken.owner == "w1"
    assert taken.counter == 1
    assert taken.expires_at_ms == clock.now_ms() + DURATION_MS
    with pytest.raises(LeaseLostError, match="another worker wrote it first") as caught:
        leases.take(seen, "w2")
    assert "held counter 0" in str(caught.value)
    assert stored(tables, partition) == taken


def test_take_of_a_lease_nobody_created_fails(leases: LeaseManager, partition: str) -> None:
    with pytest.raises(LeaseLostError):
        leases.take(Lease(GROUP, partition, counter=3), "w1")


def test_stealing_a_live_lease_counts_owner_switches(
    leases: LeaseManager, tables: Tables, clock: ManualClock, partition: str
) -> None:
    first = leases.acquire(GROUP, partition, "w1")
    checkpointed = leases.checkpoint(first, "10")
    assert checkpointed.owner_switches == 0
    assert checkpointed.is_live(clock.now_ms())

    stolen = leases.take(stored(tables, partition), "w2")
    assert (stolen.owner, stolen.owner_switches) == ("w2", 1)
    assert stolen.counter == checkpointed.counter + 1

    stolen_again = leases.take(stored(tables, partition), "w3")
    assert (stolen_again.owner, stolen_again.owner_switches) == ("w3", 2)

    kept = leases.take(stored(tables, partition), "w3")  # taking one's own lease is not a switch
    assert (kept.owner, kept.owner_switches) == ("w3", 2)
    assert kept.checkpoint == "10"
    with pytest.raises(LeaseLostError):
        leases.checkpoint(checkpointed, "11")


# --- renew, checkpoint, release -------------------------------------------------------------


def test_renew_extends_the_lease_and_increments_the_counter(
    leases: LeaseManager, clock: ManualClock, partition: str
) -> None:
    lease = leases.acquire(GROUP, partition, "w1")
    clock.advance(DURATION_MS - 1)

    renewed = leases.renew(lease)

    assert renewed.counter == lease.counter + 1
    assert renewed.expires_at_ms == clock.now_ms() + DURATION_MS
    clock.advance(DURATION_MS - 1)
    with pytest.raises(LeaseHeldError):
        leases.acquire(GROUP, partition, "w2")
    with pytest.raises(LeaseLostError):  # renewing with the pre-renew copy is fenced
        leases.renew(lease)


def test_checkpoint_stores_checkpoint_and_subsequence(
    leases: LeaseManager, tables: Tables, clock: ManualClock, partition: str
) -> None:
    lease = leases.acquire(GROUP, partition, "w1")
    assert lease.owner_switches == 1
    clock.advance(1_000)

    with_subseq = leases.checkpoint(
        lease, "49590338271490256608559692538361571095921575989136588898", 3
    )

    assert with_subseq.checkpoint == "49590338271490256608559692538361571095921575989136588898"
    assert with_subseq.checkpoint_subseq == 3
    assert with_subseq.owner_switches == 0
    assert with_subseq.counter == lease.counter + 1
    assert with_subseq.expires_at_ms == clock.now_ms() + DURATION_MS
    assert with_subseq.owner == "w1"
    assert stored(tables, partition) == with_subseq

    without_subseq = leases.checkpoint(with_subseq, C.SHARD_END)
    assert without_subseq.checkpoint == C.SHARD_END
    assert without_subseq.checkpoint_subseq is None
    assert stored(tables, partition) == without_subseq


def test_checkpoint_update_with_release_hands_the_lease_back(
    aws: AwsEnv, leases: LeaseManager, tables: Tables, clock: ManualClock, partition: str
) -> None:
    lease = leases.acquire(C.INGEST_GROUP, partition, "ingest:req-1")
    request = leases.checkpoint_update(lease, "12345", release=True).request()

    aws.clients.dynamodb.update_item(**request)

    after = stored(tables, partition, C.INGEST_GROUP)
    assert after.owner is None
    assert after.expires_at_ms == 0
    assert after.checkpoint == "12345"
    assert after.counter == lease.counter + 1
    assert leases.acquire(C.INGEST_GROUP, partition, "ingest:req-2").checkpoint == "12345"


def test_release_lets_another_owner_acquire_at_once(
    leases: LeaseManager, tables: Tables, clock: ManualClock, partition: str
) -> None:
    lease = leases.checkpoint(leases.acquire(GROUP, partition, "w1"), "9")

    released = leases.release(lease)

    assert released.owner is None
    assert released.expires_at_ms == 0
    assert released.counter == lease.counter + 1
    assert released.checkpoint == "9"
    assert not released.is_live(clock.now_ms())
    assert stored(tables, partition) == released
    acquired = leases.acquire(GROUP, partition, "w2")  # no clock advance needed
    assert (acquired.owner, acquired.checkpoint) == ("w2", "9")
    with pytest.raises(LeaseLostError):
        leases.release(lease)


def test_released_lease_cannot_be_renewed_by_its_old_owner(
    leases: LeaseManager, partition: str
) -> None:
    released = leases.release(leases.acquire(GROUP, partition, "w1"))
    with pytest.raises(LeaseLostError):
        leases.renew(released)


# --- ensure, construction, errors -----------------------------------------------------------


def test_ensure_is_idempotent_and_stores_parents(
    leases: LeaseManager, tables: Tables, clock: ManualClock, partition: str
) -> None:
    parents = ("shardId-000000000001", "shardId-000000000002")
    leases.ensure(GROUP, partition, parents)
    created = stored(tables, partition)
    assert created == Lease(GROUP, partition, parents=parents)

    leases.ensure(GROUP, partition, parents)
    leases.ensure(GROUP, partition, ("other",))
    assert stored(tables, partition) == created

    owned = leases.acquire(GROUP, partition, "w1")
    leases.ensure(GROUP, partition)  # never clobbers a lease in use
    assert stored(tables, partition) == owned
    assert owned.parents == parents

    leases.ensure(GROUP, f"{partition}-child")
    assert stored(tables, f"{partition}-child").parents == ()


@pytest.mark.parametrize("duration", [0, -1])
def test_lease_duration_must_be_positive(aws: AwsEnv, duration: int) -> None:
    with pytest.raises(ValueError, match="lease_duration_ms must be positive"):
        LeaseManager(aws.clients, aws.config.consumers_table, lease_duration_ms=duration)


def test_other_aws_errors_are_not_turned_into_lease_errors(
    aws: AwsEnv, clock: ManualClock, partition: str
) -> None:
    missing = LeaseManager(aws.clients, "no-such-table", clock=clock)
    with pytest.raises(ClientError) as caught:
        missing.acquire(GROUP, partition, "w1")
    assert caught.value.response["Error"]["Code"] == "ResourceNotFoundException"


def test_groups_hold_separate_leases_on_one_partition(leases: LeaseManager, partition: str) -> None:
    readers = leases.acquire(GROUP, partition, "w1")
    ingest = leases.acquire(C.INGEST_GROUP, partition, "w2")
    assert (readers.group, ingest.group) == (GROUP, C.INGEST_GROUP)
    assert readers.counter == ingest.counter == 1


# --- concurrency ----------------------------------------------------------------------------


@dataclass
class Race:
    winners: list[tuple[str, Lease]] = field(default_factory=list)
    held_by: list[str] = field(default_factory=list)  # the owner each loser was told about
    errors: list[BaseException] = field(default_factory=list)


def race_to_acquire(managers: list[LeaseManager], partition_id: str) -> Race:
    """Every manager acquires ``partition_id`` at the same moment, each on its own thread."""
    race = Race()
    barrier = threading.Barrier(len(managers))

    def contend(manager: LeaseManager, owner: str) -> None:
        try:
            barrier.wait(timeout=10)
            race.winners.append((owner, manager.acquire(GROUP, partition_id, owner)))
        except LeaseHeldError as exc:
            race.held_by.append(exc.owner)
        except BaseException as exc:  # re-raised by the test: a thread must not hide it
            race.errors.append(exc)

    threads = [
        threading.Thread(target=contend, args=(manager, f"w{i}"))
        for i, manager in enumerate(managers)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert not any(thread.is_alive() for thread in threads)
    if race.errors:
        raise race.errors[0]
    return race


@pytest.fixture(scope="module")
def contenders(aws: AwsEnv) -> list[LeaseManager]:
    """Eight workers, each with its own clients (own connections), built before any race."""
    clock = ManualClock()
    managers = [
        LeaseManager(
            aws.fresh_clients(),
            aws.config.consumers_table,
            clock=clock,
            lease_duration_ms=DURATION_MS,
        )
        for _ in range(8)
    ]
    for manager in managers:
        assert manager.clients.dynamodb is not None
    return managers


@pytest.mark.usefixtures("preemptive")
def test_two_threads_acquiring_at_once_exactly_one_wins(
    contenders: list[LeaseManager], tables: Tables, partition: str
) -> None:
    two = contenders[:2]
    for round_number in range(100):  # passing by luck with the race present: ~1e-15
        partition_id = f"{partition}-{round_number}"
        race = race_to_acquire(two, partition_id)
        assert len(race.winners) == 1, (round_number, [owner for owner, _ in race.winners])
        ((winner, lease),) = race.winners
        assert race.held_by == [winner]
        assert stored(tables, partition_id) == lease


@pytest.mark.usefixtures("preemptive")
def test_after_a_race_only_the_recorded_owner_can_write(
    contenders: list[LeaseManager], tables: Tables, partition: str
) -> None:
    """Safety holds even where moto lets two acquires through: the fenced writes decide."""
    for round_number in range(20):
        partition_id = f"{partition}-{round_number}"
        race = race_to_acquire(contenders, partition_id)
        assert race.winners
        assert len(race.winners) + len(race.held_by) == len(contenders)
        owner = stored(tables, partition_id).owner
        writers = []
        for name, lease in race.winners:
            manager = contenders[int(name[1:])]
            try:
                manager.checkpoint(lease, name)
                writers.append(name)
            except LeaseLostError:
                pass
        assert writers == [owner]
        assert stored(tables, partition_id).checkpoint == owner


# --- docs/TABLES.md says what the code sends ------------------------------------------------


def test_tables_doc_shows_the_expressions_lease_manager_sends(
    aws: AwsEnv, clock: ManualClock, partition: str
) -> None:
    clients = aws.fresh_clients()
    sent: list[dict[str, Any]] = []
    clients.session.events.register(
        "before-parameter-build.dynamodb.UpdateItem", lambda params, **_: sent.append(params)
    )
    leases = LeaseManager(clients, aws.config.consumers_table, clock=clock)
    lease = leases.acquire(GROUP, partition, "w1")
    lease = leases.take(lease, "w2")
    lease = leases.renew(lease)
    lease = leases.checkpoint(lease, "1", 2)
    leases.release(lease)
    ingest_commit = leases.checkpoint_update(lease, "1", release=True).request()

    doc = " ".join((DOCS / "TABLES.md").read_text().split())
    conditions = {p["ConditionExpression"] for p in sent} | {ingest_commit["ConditionExpression"]}
    assert len(conditions) == 3  # acquire, take, and the fenced writes' shared one
    for condition in conditions:
        assert f"ConditionExpression: {condition}" in doc, condition
    expressions = [
        sent[0]["UpdateExpression"],  # acquire
        sent[1]["UpdateExpression"],  # take
        ingest_commit["UpdateExpression"],
    ]
    for expression in expressions:
        assert expression in doc, expression
    for constant, value in vars(C).items():
        if constant.startswith(("ATTR_", "STATE_")):
            assert f"`{value}`" in doc, constant
    assert f"`{C.SHARD_END}`" in doc and f"`{C.INGEST_GROUP}`" in doc
