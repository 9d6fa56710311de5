"""Start positions (TRIM_HORIZON, LATEST, AT_SEQUENCE, AT_TIMESTAMP), replay, and lineage
that shard sync has not recorded yet."""

from __future__ import annotations

import dataclasses

from shardlog import constants as C
from shardlog.clock import ManualClock
from shardlog.consumer import ConsumerSettings, StartPosition, replay, seq_at_timestamp
from shardlog.consumer.creation import WORKERS, GroupCreator
from shardlog.dal.partitions import close
from shardlog.lease import LeaseManager
from shardlog.reader import LogReader
from shardlog.tables import Tables, partition_key
from shardlog.writer import LogWriter, WriterSettings
from tests.support.aws import AwsEnv
from tests.support.factories import (
    FAST,
    Journal,
    append,
    checkpoints,
    end_partition,
    incoming_records,
    recording_worker,
    register_partition,
    run_until_idle,
)

BASE_MS = 1_700_000_000_000


def at(position: StartPosition) -> ConsumerSettings:
    return dataclasses.replace(FAST, start_position=position)


def test_latest_starts_a_new_group_at_the_head_and_skips_what_already_ended(
    aws: AwsEnv, clock: ManualClock
) -> None:
    append(aws, "p0", incoming_records(5))
    register_partition(aws, "q0")
    append(aws, "q0", incoming_records(3))
    end_partition(aws, "q0")
    register_partition(aws, "r1", ("q0",))
    append(aws, "r1", incoming_records(2))
    journal = Journal()
    worker = recording_worker(aws, journal, "w", clock, settings=at(StartPosition.latest()))
    assert run_until_idle([worker], clock) == 0
    assert checkpoints(aws) == {"p0": "5", "q0": C.SHARD_END, "r1": "2"}
    append(aws, "p0", incoming_records(2))
    append(aws, "r1", incoming_records(1))
    run_until_idle([worker], clock)
    assert journal.seqs("p0") == [5, 6] and journal.seqs("r1") == [2]
    assert journal.seqs("q0") == []
    # A partition discovered later (a split of p0) starts at its start: nothing skipped.
    end_partition(aws, "p0")
    register_partition(aws, "s2", ("p0",))
    append(aws, "s2", incoming_records(2))
    run_until_idle([worker], clock)
    assert journal.seqs("s2") == [0, 1]
    worker.shutdown()


def test_an_existing_group_ignores_the_start_position(aws: AwsEnv, clock: ManualClock) -> None:
    append(aws, "p0", incoming_records(4))
    journal = Journal()
    first = recording_worker(aws, journal, "first", clock)
    run_until_idle([first], clock)
    first.shutdown()
    append(aws, "p0", incoming_records(2))
    late = recording_worker(aws, journal, "late", clock, settings=at(StartPosition.latest()))
    run_until_idle([late], clock)
    assert journal.seqs("p0") == [0, 1, 2, 3, 4, 5]  # the checkpoint wins
    late.shutdown()


def test_at_timestamp_starts_at_the_first_record_that_arrived_at_or_after_it(
    aws: AwsEnv, clock: ManualClock
) -> None:
    append(aws, "p0", incoming_records(10, arrival_ms=BASE_MS))  # arrivals BASE_MS + 0..9
    append(aws, "q0", incoming_records(3, arrival_ms=BASE_MS))
    journal = Journal()
    settings = at(StartPosition.at_timestamp(BASE_MS + 4))
    worker = recording_worker(aws, journal, "w", clock, settings=settings)
    run_until_idle([worker], clock)
    assert journal.seqs("p0") == [4, 5, 6, 7, 8, 9]
    assert journal.seqs("q0") == []
    worker.shutdown()


def test_at_sequence_starts_listed_partitions_at_their_seq(aws: AwsEnv, clock: ManualClock) -> None:
    append(aws, "p0", incoming_records(10))
    append(aws, "q0", incoming_records(2))
    journal = Journal()
    settings = at(StartPosition.at_sequence({"p0": 7}))
    worker = recording_worker(aws, journal, "w", clock, settings=settings)
    run_until_idle([worker], clock)
    assert journal.seqs("p0") == [7, 8, 9] and journal.seqs("q0") == [0, 1]
    worker.shutdown()


def test_replay_reads_any_range_of_a_partition(aws: AwsEnv) -> None:
    append(aws, "p0", incoming_records(10, arrival_ms=BASE_MS), segment_max_records=4)
    reader = LogReader(aws.clients, aws.config.bucket, aws.config.tables)
    assert [r.seq for r in replay(reader, "p0", from_seq=2, to_seq=5)] == [2, 3, 4]
    assert [r.seq for r in replay(reader, "p0", at_timestamp_ms=BASE_MS + 8)] == [8, 9]
    assert seq_at_timestamp(reader, "p0", 0) == 0
    assert seq_at_timestamp(reader, "p0", BASE_MS + 5) == 5
    assert seq_at_timestamp(reader, "p0", BASE_MS + 99) == 10  # after the last: the head


def test_a_partition_whose_lineage_shard_sync_has_not_recorded_waits(
    aws: AwsEnv, clock: ManualClock
) -> None:
    """The ingest commit can create a child's item before shard sync records its parents:
    it must not be taken for a root and consumed ahead of them."""
    LogWriter(
        aws.clients, WriterSettings(bucket=aws.config.bucket, tables=aws.config.tables)
    ).append("child", incoming_records(2))
    item = aws.clients.dynamodb.get_item(
        TableName=aws.config.partitions_table, Key=partition_key("child")
    )["Item"]
    assert C.ATTR_STARTING_HASH_KEY not in item
    journal = Journal()
    worker = recording_worker(aws, journal, "w", clock)
    run_until_idle([worker], clock)
    assert journal.seqs("child") == []
    register_partition(aws, "child")  # shard sync: a root after all
    run_until_idle([worker], clock)
    assert journal.seqs("child") == [0, 1]
    worker.shutdown()


def test_a_latest_group_created_mid_reshard_skips_the_closed_parent(
    aws: AwsEnv, clock: ManualClock
) -> None:
    """A partition CLOSED at creation is done for LATEST (every record of it arrived before
    the group): what ingest commits to it later is not delivered; its children start at
    their head at creation, once it ENDED."""
    register_partition(aws, "q0", ())
    append(aws, "q0", incoming_records(3))
    close(aws.clients, aws.config.partitions_table, "q0", "9" * 70)
    register_partition(aws, "r1", ("q0",))
    append(aws, "r1", incoming_records(2))
    journal = Journal()
    worker = recording_worker(aws, journal, "w", clock, settings=at(StartPosition.latest()))
    run_until_idle([worker], clock)
    assert checkpoints(aws) == {"q0": C.SHARD_END, "r1": "2"}
    append(aws, "q0", incoming_records(2))  # ingest reaches the closed shard's last records
    append(aws, "r1", incoming_records(1))
    end_partition(aws, "q0")
    run_until_idle([worker], clock)
    assert journal.seqs("q0") == [] and journal.seqs("r1") == [2]
    worker.shutdown()


def test_workers_joining_a_group_being_created_use_its_positions(
    aws: AwsEnv, clock: ManualClock
) -> None:
    """The first worker fixes the positions; one that starts while they are written (it
    sees the group's record before the lease items) uses them, not seq 0 nor its own."""
    append(aws, "p0", incoming_records(4))
    register_partition(aws, "q0", ())
    close(aws.clients, aws.config.partitions_table, "q0", "9" * 70)
    register_partition(aws, "r1", ("q0",))
    append(aws, "r1", incoming_records(3))
    tables = Tables(aws.clients, aws.config.tables)
    reader = LogReader(aws.clients, aws.config.bucket, aws.config.tables)
    creator = GroupCreator(
        aws.clients, tables, reader, LeaseManager(aws.clients, aws.config.consumers_table)
    )
    creator.ensure_leases = lambda record, partitions: None  # type: ignore[method-assign]
    creator.create("readers", WORKERS, StartPosition.latest(), clock.now_ms(), strict=False)
    assert checkpoints(aws) == {}  # created; its lease items not written yet
    journal = Journal()
    late = recording_worker(aws, journal, "late", clock)  # TRIM_HORIZON: not the group's
    run_until_idle([late], clock)
    assert checkpoints(aws) == {"p0": "4", "q0": C.SHARD_END, "r1": "3"}
    append(aws, "r1", incoming_records(1))
    end_partition(aws, "q0")
    run_until_idle([late], clock)
    assert journal.seqs("p0") == [] and journal.seqs("r1") == [3]
    late.shutdown()


def test_a_partition_done_at_creation_still_waits_for_its_parents(
    aws: AwsEnv, clock: ManualClock
) -> None:
    """AT_SEQUENCE can put a child past its end while its parent still has records to
    deliver: the child is not marked done (SHARD_END) ahead of it, so the grandchild still
    waits for the parent's records (each key in order)."""
    register_partition(aws, "p0", ())
    append(aws, "p0", incoming_records(9, keys=["a"]))  # three batches of records_per_call
    end_partition(aws, "p0")
    register_partition(aws, "c1", ("p0",))
    append(aws, "c1", incoming_records(2, keys=["a"]))
    end_partition(aws, "c1")
    register_partition(aws, "g2", ("c1",))
    append(aws, "g2", incoming_records(2, keys=["a"]))
    journal = Journal()
    settings = at(StartPosition.at_sequence({"c1": 9}))
    worker = recording_worker(aws, journal, "w", clock, settings=settings)
    run_until_idle([worker], clock)
    order = [d.partition_id for d in journal.deliveries]
    assert order == ["p0"] * 9 + ["g2"] * 2
    worker.shutdown()
