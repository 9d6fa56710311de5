"""Consumer group workers against the embedded AWS, driven cycle by cycle with a manual clock."""

from __future__ import annotations

import dataclasses
import logging
from collections import Counter

import pytest

from shardlog import constants as C
from shardlog.clock import ManualClock
from shardlog.consumer import (
    Checkpointer,
    CheckpointLeaseLostError,
    CheckpointRangeError,
    ConsumerSettings,
    RecordProcessor,
    Worker,
    group_progress,
)
from shardlog.exceptions import ValidationError
from shardlog.format import LogRecord
from shardlog.segments import segment_key
from shardlog.tables import Tables
from tests.support.aws import AwsEnv
from tests.support.factories import (
    FAST,
    Journal,
    append,
    checkpoints,
    end_partition,
    fill,
    incoming_records,
    owners,
    recording_worker,
    register_partition,
    run_until_idle,
)

GROUP = "readers"


def tables(aws: AwsEnv) -> Tables:
    return Tables(aws.clients, aws.config.tables)


def test_one_worker_consumes_every_partition_in_order_and_checkpoints_it(
    aws: AwsEnv, clock: ManualClock
) -> None:
    ids = fill(aws, 3, records=11)
    journal = Journal()
    worker = recording_worker(aws, journal, "w1", clock)
    assert run_until_idle([worker], clock) == 33
    for partition_id in ids:
        assert journal.seqs(partition_id) == list(range(11))
    assert checkpoints(aws) == dict.fromkeys(ids, "11")
    worker.shutdown()


@pytest.mark.parametrize(("partitions", "workers", "loads"), [(6, 3, [2, 2, 2]), (4, 3, [1, 1, 2])])
def test_workers_balance_and_then_stop_stealing(
    aws: AwsEnv, clock: ManualClock, partitions: int, workers: int, loads: list[int]
) -> None:
    fill(aws, partitions, records=2)
    journal = Journal()
    crew = [recording_worker(aws, journal, f"w{i}", clock) for i in range(workers)]
    run_until_idle(crew, clock)
    assert sorted(len(w.held) for w in crew) == loads
    owners = Counter(lease.owner for lease in tables(aws).list_leases(GROUP))
    assert sorted(owners.values()) == loads
    steals = sum(w.stats.stolen for w in crew)
    for _ in range(20):  # balanced: renewals go on, nobody steals any more
        clock.advance(FAST.renew_interval_ms)
        for w in crew:
            w.run_once()
    assert sum(w.stats.stolen for w in crew) == steals
    assert sorted(len(w.held) for w in crew) == loads
    # every record was delivered once: steals happened between batches, after checkpoints
    assert sorted(journal.by_partition().items()) == [(f"p{i}", {0, 1}) for i in range(partitions)]


class CheckpointFirstOfBatch(RecordProcessor):
    """Checkpoints only the first record of each batch: the rest is delivered again after a
    failover, and nothing else."""

    def __init__(self, journal: Journal, name: str) -> None:
        self.journal, self.name = journal, name

    def process_records(self, records: list[LogRecord], checkpointer: Checkpointer) -> None:
        self.journal.add(self.name, records)
        checkpointer.checkpoint(records[0])


def test_a_killed_workers_partitions_are_taken_after_expiry_and_resumed_from_the_checkpoint(
    aws: AwsEnv, clock: ManualClock
) -> None:
    ids = fill(aws, 4, records=10)
    journal = Journal()
    settings = dataclasses.replace(FAST, max_leases=2)
    doomed = Worker(
        GROUP,
        CheckpointFirstOfBatch(journal, "doomed"),
        aws.config,
        clients=aws.clients,
        settings=settings,
        clock=clock,
        worker_id="doomed",
    )
    for _ in range(2):
        doomed.run_once()  # takes 2 partitions (max_leases), delivers 2 batches of 4 each
    held = doomed.held
    assert len(held) == 2
    at_kill = checkpoints(aws)
    assert {at_kill[p] for p in held} == {"5"}  # first record of the second batch (seq 4) + 1
    doomed.close()  # dies: no handoff

    survivor = recording_worker(aws, journal, "survivor", clock)
    run_until_idle([survivor], clock)
    assert set(survivor.held) == set(ids) - set(held)  # the dead worker's leases are still live

    clock.advance(FAST.lease_duration_ms)
    run_until_idle([survivor], clock)
    assert set(survivor.held) == set(ids)
    for partition_id in ids:
        seqs = journal.seqs(partition_id)
        assert set(seqs) == set(range(10)), "nothing skipped"
        twice = sorted(s for s, n in Counter(seqs).items() if n > 1)
        if partition_id in held:
            assert twice == [5, 6, 7], "only records after the last checkpoint come again"
            first_after = [d.seq for d in journal.deliveries if d.worker == "survivor"]
            assert 5 in first_after
        else:
            assert twice == []
    assert checkpoints(aws) == dict.fromkeys(ids, "10")
    survivor.shutdown()


class Toggle(RecordProcessor):
    """Checkpoints each batch while ``checkpointing``; at shutdown, the base class
    checkpoints everything delivered."""

    def __init__(self, journal: Journal, name: str) -> None:
        self.journal, self.name, self.checkpointing = journal, name, True

    def process_records(self, records: list[LogRecord], checkpointer: Checkpointer) -> None:
        self.journal.add(self.name, records)
        if self.checkpointing:
            checkpointer.checkpoint()


def test_graceful_shutdown_hands_off_at_once_with_no_redelivery(
    aws: AwsEnv, clock: ManualClock
) -> None:
    ids = fill(aws, 4, records=6)
    journal = Journal()
    toggle = Toggle(journal, "first")
    first = Worker(
        GROUP, toggle, aws.config, clients=aws.clients, settings=FAST, clock=clock, worker_id="1"
    )
    second = recording_worker(aws, journal, "second", clock)
    run_until_idle([first, second], clock)
    assert len(first.held) == 2 and len(second.held) == 2
    handed = first.held
    toggle.checkpointing = False
    for partition_id in ids:
        append(aws, partition_id, incoming_records(3))
    first.run_once()  # delivers the new records of its partitions, checkpoints nothing
    assert all(journal.seqs(p)[-3:] == [6, 7, 8] for p in handed)
    first.shutdown()  # shutdown_requested checkpoints what was delivered, then releases
    assert all(owners(aws)[p] is None for p in handed)
    assert all(checkpoints(aws)[p] == "9" for p in handed)
    run_until_idle([second], clock)  # no clock advance: released leases are free at once
    assert set(second.held) == set(ids)
    for partition_id in ids:
        assert journal.seqs(partition_id) == list(range(9)), "each record exactly once"
    second.shutdown()


class Holding(RecordProcessor):
    """Keeps its checkpointer and checkpoints nothing; records lease_lost calls."""

    def __init__(self) -> None:
        self.checkpointers: list[Checkpointer] = []
        self.lost = 0

    def process_records(self, records: list[LogRecord], checkpointer: Checkpointer) -> None:
        self.checkpointers.append(checkpointer)

    def lease_lost(self) -> None:
        self.lost += 1


def test_a_checkpoint_after_the_lease_was_taken_fails_with_a_clear_error(
    aws: AwsEnv, clock: ManualClock
) -> None:
    fill(aws, 1, records=8)
    holding = Holding()
    stalled = Worker(
        GROUP, holding, aws.config, clients=aws.clients, settings=FAST, clock=clock, worker_id="s"
    )
    stalled.run_once()
    assert len(holding.checkpointers) == 1
    clock.advance(FAST.lease_duration_ms)  # the worker stalls past its lease
    journal = Journal()
    taker = recording_worker(aws, journal, "taker", clock)
    run_until_idle([taker], clock)
    assert journal.seqs("p0") == list(range(8))  # from the last checkpoint: the start
    with pytest.raises(CheckpointLeaseLostError) as caught:
        holding.checkpointers[0].checkpoint()
    assert "lost the lease readers/p0" in str(caught.value)
    assert caught.value.kcl_error == "ShutdownException"
    assert checkpoints(aws) == {"p0": "8"}  # the taker's progress stands
    stalled.run_once()  # wakes up: the renewal is fenced, the processor hears lease_lost
    assert holding.lost == 1 and stalled.held == ()
    taker.shutdown()
    stalled.shutdown()


def test_checkpoints_are_record_granular_inside_a_segment(aws: AwsEnv, clock: ManualClock) -> None:
    append(aws, "p0", incoming_records(10), segment_max_records=5)

    class ThroughSeqSix(RecordProcessor):
        def process_records(self, records: list[LogRecord], checkpointer: Checkpointer) -> None:
            for record in records:
                if record.seq == 6:
                    checkpointer.checkpoint(record)

        def shutdown_requested(self, checkpointer: Checkpointer) -> None:
            pass  # hand off at the last checkpoint

    settings = dataclasses.replace(FAST, records_per_call=100)
    worker = Worker(GROUP, ThroughSeqSix, aws.config, settings=settings, clock=clock)
    worker.run_once()
    lease = tables(aws).get_lease(GROUP, "p0")
    assert lease is not None
    assert (lease.checkpoint, lease.checkpoint_subseq) == ("7", 2)  # seq 7 = segment 5 + 2
    worker.shutdown()
    journal = Journal()
    resumed = recording_worker(aws, journal, "resumed", clock)
    run_until_idle([resumed], clock)
    assert journal.seqs("p0") == [7, 8, 9]
    lease = tables(aws).get_lease(GROUP, "p0")
    assert lease is not None and (lease.checkpoint, lease.checkpoint_subseq) == ("10", None)
    resumed.shutdown()


def test_checkpoint_range_is_checked_as_kcl_does(aws: AwsEnv, clock: ManualClock) -> None:
    fill(aws, 1, records=6)
    errors: list[str] = []

    def handle(records: list[LogRecord], checkpointer: Checkpointer) -> None:
        checkpointer.checkpoint(records[1])
        for bad in (records[0].seq, records[-1].seq + 1, "x", "SHARD_END"):
            try:
                checkpointer.checkpoint(bad)
            except CheckpointRangeError as exc:
                errors.append(exc.kcl_error)

    worker = Worker(GROUP, handle, aws.config, settings=FAST, clock=clock)
    worker.run_once()
    assert errors == ["IllegalArgumentException"] * 4
    assert checkpoints(aws) == {"p0": "2"}
    worker.close()


def test_a_failing_batch_is_delivered_again(
    aws: AwsEnv, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    fill(aws, 1, records=6)
    seen: list[list[int]] = []

    def flaky(records: list[LogRecord], checkpointer: Checkpointer) -> None:
        seen.append([r.seq for r in records])
        if len(seen) == 2:
            raise RuntimeError("downstream unavailable")
        checkpointer.checkpoint()

    worker = Worker(GROUP, flaky, aws.config, settings=FAST, clock=clock)
    with caplog.at_level(logging.ERROR, "shardlog.consumer"):
        run_until_idle([worker], clock)
    assert seen == [[0, 1, 2, 3], [4, 5], [4, 5]]
    assert "the batch will be delivered again" in caplog.text
    worker.shutdown()


def test_children_start_only_after_every_parent_is_consumed_to_its_end(
    aws: AwsEnv, clock: ManualClock
) -> None:
    register_partition(aws, "p0")
    append(aws, "p0", incoming_records(7, keys=["a", "b"]))
    end_partition(aws, "p0")
    for child in ("c1", "c2"):
        register_partition(aws, child, ("p0",))
        append(aws, child, incoming_records(5, keys=["a", "b"]))
        end_partition(aws, child)
    register_partition(aws, "m3", ("c1", "c2"))
    append(aws, "m3", incoming_records(4, keys=["a", "b"]))
    journal = Journal()
    crew = [recording_worker(aws, journal, f"w{i}", clock) for i in range(2)]
    run_until_idle(crew, clock)
    order = [d.partition_id for d in journal.deliveries]
    last_parent = max(i for i, p in enumerate(order) if p == "p0")
    first_child = min(i for i, p in enumerate(order) if p in ("c1", "c2"))
    last_child = max(i for i, p in enumerate(order) if p in ("c1", "c2"))
    assert last_parent < first_child
    assert last_child < order.index("m3")
    assert checkpoints(aws) == {"p0": "SHARD_END", "c1": "SHARD_END", "c2": "SHARD_END", "m3": "4"}
    rows = {row.partition_id: row for row in group_progress(tables(aws), GROUP, clock.now_ms())}
    assert rows["m3"].lag_records == 0 and rows["p0"].lag_records == 0
    assert not rows["m3"].waiting_on_parents
    for worker in crew:
        worker.shutdown()


def test_a_processor_that_does_not_checkpoint_shard_end_keeps_the_children_waiting(
    aws: AwsEnv, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    register_partition(aws, "p0")
    append(aws, "p0", incoming_records(3))
    end_partition(aws, "p0")
    register_partition(aws, "c1", ("p0",))
    append(aws, "c1", incoming_records(2))

    class Forgetful(RecordProcessor):
        remember = False

        def process_records(self, records: list[LogRecord], checkpointer: Checkpointer) -> None:
            checkpointer.checkpoint()

        def shard_ended(self, checkpointer: Checkpointer) -> None:
            if Forgetful.remember:
                checkpointer.checkpoint()

    worker = Worker(GROUP, Forgetful, aws.config, settings=FAST, clock=clock)
    with caplog.at_level(logging.ERROR, "shardlog.consumer"):
        for _ in range(5):
            worker.run_once()
            clock.advance(1)
    assert "did not checkpoint SHARD_END" in caplog.text
    assert checkpoints(aws)["p0"] == "3" and worker.held == ("p0",)
    rows = {row.partition_id: row for row in group_progress(tables(aws), GROUP, clock.now_ms())}
    assert rows["c1"].waiting_on_parents and rows["c1"].lag_records == 2
    Forgetful.remember = True
    run_until_idle([worker], clock)
    assert checkpoints(aws) == {"p0": "SHARD_END", "c1": "2"}
    worker.shutdown()


def test_a_parent_unknown_to_the_partitions_table_does_not_block_its_child(
    aws: AwsEnv, clock: ManualClock
) -> None:
    register_partition(aws, "c1", ("trimmed-long-ago",))
    append(aws, "c1", incoming_records(3))
    journal = Journal()
    worker = recording_worker(aws, journal, "w", clock)
    run_until_idle([worker], clock)
    assert journal.seqs("c1") == [0, 1, 2]
    worker.shutdown()


def test_group_names_starting_with_a_dollar_are_reserved(aws: AwsEnv) -> None:
    with pytest.raises(ValidationError) as caught:
        Worker(C.INGEST_GROUP, print, aws.config)
    assert caught.value.field == "group"
    with pytest.raises(ValidationError) as caught:
        Worker("", print, aws.config)
    assert caught.value.field == "group"


def test_settings_are_validated_naming_the_field() -> None:
    with pytest.raises(ValidationError) as caught:
        dataclasses.replace(FAST, renew_interval_ms=FAST.lease_duration_ms)
    assert caught.value.field == "renew_interval_ms"
    with pytest.raises(ValidationError) as caught:
        dataclasses.replace(FAST, records_per_call=0)
    assert caught.value.field == "records_per_call"


def test_a_missing_segment_below_the_head_is_a_loud_error_never_a_skip(
    aws: AwsEnv, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    append(aws, "p0", incoming_records(9), segment_max_records=3)
    aws.clients.s3.delete_object(Bucket=aws.config.bucket, Key=segment_key("p0", 3))
    journal = Journal()
    worker = recording_worker(aws, journal, "w", clock)
    with caplog.at_level(logging.ERROR, "shardlog.consumer"):
        for _ in range(5):
            worker.run_once()
            clock.advance(1)
    assert journal.seqs("p0") == [0, 1, 2]  # never past the gap
    assert checkpoints(aws) == {"p0": "3"}
    assert "reading readers/p0 at seq 3 failed" in caplog.text
    assert "a committed segment is missing" in caplog.text
    worker.close()


def _delivery_delay_ms(
    aws: AwsEnv, worker: Worker, journal: Journal, clock: ManualClock, partition_id: str
) -> int:
    """Append one record, then cycle the worker 10 ms apart until it is delivered."""
    delivered = len(journal.deliveries)
    append(aws, partition_id, incoming_records(1))
    appended = clock.now_ms()
    for _ in range(300):
        worker.run_once()
        if len(journal.deliveries) > delivered:
            return clock.now_ms() - appended
        clock.advance(10)
    raise AssertionError("not delivered within 3 s")


def test_a_busy_partition_is_polled_sooner_than_a_quiet_one(
    aws: AwsEnv, clock: ManualClock
) -> None:
    """Records committed to a partition that delivered within active_period_ms reach the
    worker within active_poll_interval_ms; a quiet partition costs one head read per
    idle_poll_interval_ms."""
    settings = dataclasses.replace(
        FAST,
        idle_poll_interval_ms=1_000,
        active_poll_interval_ms=200,
        active_period_ms=5_000,
        take_interval_ms=60_000,
        renew_interval_ms=30_000,
        lease_duration_ms=60_000,
    )
    fill(aws, 1, records=3)
    journal = Journal()
    worker = recording_worker(aws, journal, "w", clock, settings=settings)
    run_until_idle([worker], clock)
    assert journal.seqs("p0") == [0, 1, 2]

    busy = [_delivery_delay_ms(aws, worker, journal, clock, "p0") for _ in range(3)]
    assert busy and max(busy) <= 200, busy

    clock.advance(settings.active_period_ms)  # nothing delivered for a whole period: quiet
    worker.run_once()
    aws.requests.reset()  # the worker's clients are the fixture's, counted
    for _ in range(200):  # 2 s of cycles, 10 ms apart, nothing new to read
        clock.advance(10)
        worker.run_once()
    head_reads = aws.requests.snapshot()["dynamodb.GetItem"]
    assert head_reads == 2, aws.requests.snapshot()
    worker.shutdown()


@pytest.mark.parametrize("name", ["active_poll_interval_ms", "active_period_ms"])
def test_busy_poll_settings_accept_zero_and_refuse_negatives(name: str) -> None:
    assert getattr(ConsumerSettings(**{name: 0}), name) == 0  # 0: poll at once / never busy
    with pytest.raises(ValidationError) as caught:
        ConsumerSettings(**{name: -1})
    assert caught.value.field == name and caught.value.limit == 0


def test_a_busy_poll_never_outlasts_the_idle_poll() -> None:
    settings = ConsumerSettings(idle_poll_interval_ms=100, active_poll_interval_ms=200)
    assert settings.poll_interval_ms(since_delivery_ms=0) == 100
    assert settings.poll_interval_ms(since_delivery_ms=None) == 100
    never_busy = ConsumerSettings(active_period_ms=0)
    assert never_busy.poll_interval_ms(since_delivery_ms=0) == never_busy.idle_poll_interval_ms
