"""`shardlog group seek` on a worker group: every position redelivers or skips what it says,
running workers are fenced (their next checkpoint or renewal is refused, they stop, the next
owner starts at the new position), children wait for re-opened parents, a dry run writes
nothing, and the seek is recorded in the group's item."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from shardlog import constants as C
from shardlog.clock import ManualClock
from shardlog.consumer import Checkpointer, Worker
from shardlog.consumer.exceptions import CheckpointLeaseLostError, SeekRefusedError
from shardlog.consumer.positions import StartPosition
from shardlog.dal.seek import begin_seek, read_group_summary
from shardlog.exceptions import ValidationError
from shardlog.format import LogRecord
from tests.support.aws import AwsEnv
from tests.support.cli import run_cli
from tests.support.factories import (
    FAST,
    Journal,
    append,
    checkpoints,
    incoming_records,
    leases,
    recording_worker,
    run_until_idle,
)
from tests.support.seek import LEFT, PARENT, RIGHT, assert_parent_first, finished_split, group_seek

GROUP = "readers"  # recording_worker's group
P, Q = "p0", "q0"
BASE_MS = 1_700_000_000_000


@pytest.fixture
def journal() -> Journal:
    return Journal()


@pytest.fixture
def consumed(aws: AwsEnv, clock: ManualClock, journal: Journal) -> Iterator[Worker]:
    """P (6 records) and Q (3), consumed to their heads by worker "w" (into ``journal``),
    which keeps running until the test shuts it down, or ends (also when it fails)."""
    append(aws, P, incoming_records(6, start=0, arrival_ms=BASE_MS))
    append(aws, Q, incoming_records(3, start=0, arrival_ms=BASE_MS))
    worker = recording_worker(aws, journal, "w", clock)
    run_until_idle([worker], clock)
    assert checkpoints(aws) == {P: "6", Q: "3"}
    yield worker
    worker.shutdown()


def test_trim_horizon_redelivers_everything_and_fences_the_running_worker(
    aws: AwsEnv, clock: ManualClock, journal: Journal, consumed: Worker
) -> None:
    plan = group_seek(aws, clock).seek(GROUP, StartPosition.trim_horizon(), "tester@host")
    assert [(m.partition_id, m.old, m.new, m.reprocess) for m in plan.moves] == [
        (P, "6", "0", 6),
        (Q, "3", "0", 3),
    ]
    assert checkpoints(aws) == {P: "0", Q: "0"}
    assert all(lease.owner is None for lease in leases(aws).values())  # released
    run_until_idle([consumed], clock)
    assert consumed.stats.lost == 2  # its leases were taken from it: it stopped, then took them
    assert journal.seqs(P) == [*range(6), *range(6)]
    assert journal.seqs(Q) == [0, 1, 2, 0, 1, 2]
    summary = read_group_summary(aws.clients, aws.config.consumers_table, GROUP)
    assert summary.last_seek is not None and summary.seek_owner is None  # recorded, unlocked
    assert (summary.last_seek.position, summary.last_seek.by) == ("TRIM_HORIZON", "tester@host")
    assert summary.last_seek.positions == {P: "0", Q: "0"}


def test_latest_skips_what_was_committed_before_the_seek(
    aws: AwsEnv, clock: ManualClock, journal: Journal, consumed: Worker
) -> None:
    consumed.shutdown()
    append(aws, P, incoming_records(4, start=6))  # committed while no worker runs
    plan = group_seek(aws, clock).seek(GROUP, StartPosition.latest(), "tester")
    assert {m.partition_id: (m.new, m.skip) for m in plan.moves} == {P: ("10", 4), Q: ("3", 0)}
    later = recording_worker(aws, journal, "later", clock)
    run_until_idle([later], clock)
    append(aws, P, incoming_records(2, start=10))
    run_until_idle([later], clock)
    assert journal.seqs(P) == [*range(6), 10, 11]
    later.shutdown()


def test_at_timestamp_redelivers_from_the_first_record_that_arrived_at_or_after_it(
    aws: AwsEnv, clock: ManualClock, journal: Journal, consumed: Worker
) -> None:
    group_seek(aws, clock).seek(GROUP, StartPosition.at_timestamp(BASE_MS + 4), "tester")
    assert checkpoints(aws) == {P: "4", Q: "3"}  # Q's records all arrived before it
    run_until_idle([consumed], clock)
    assert journal.seqs(P) == [*range(6), 4, 5] and journal.seqs(Q) == [0, 1, 2]


def test_at_seq_moves_only_the_partitions_named_within_their_head(
    aws: AwsEnv, clock: ManualClock, journal: Journal, consumed: Worker
) -> None:
    seek = group_seek(aws, clock)
    with pytest.raises(ValidationError, match=f"{P}=7 is past partition {P}'s head 6") as refused:
        seek.seek(GROUP, StartPosition.at_sequence({P: 7}), "tester")
    assert refused.value.limit == 6 and refused.value.field == "--at-seq"
    with pytest.raises(ValidationError, match="no partition 'nosuch'"):
        seek.seek(GROUP, StartPosition.at_sequence({"nosuch": 0}), "tester")
    assert checkpoints(aws) == {P: "6", Q: "3"}  # refused before anything was written
    seek.seek(GROUP, StartPosition.at_sequence({P: 6}), "tester")  # the head: the edge
    seek.seek(GROUP, StartPosition.at_sequence({P: 2}), "tester")
    assert checkpoints(aws) == {P: "2", Q: "3"}
    run_until_idle([consumed], clock)
    assert journal.seqs(P) == [*range(6), 2, 3, 4, 5] and journal.seqs(Q) == [0, 1, 2]


def test_a_worker_between_process_and_checkpoint_is_fenced_from_the_hold_on(
    aws: AwsEnv, clock: ManualClock
) -> None:
    """The seek lands while the processor holds a batch: its checkpoint is refused as soon as
    the seek holds the lease (before the new position is written) and after; the worker
    stops, and the next owner starts at the new position."""
    append(aws, P, incoming_records(8, start=0))
    seek = group_seek(aws, clock)
    journal = Journal()
    refusals: list[str] = []

    def try_checkpoint(checkpointer: Checkpointer, when: str) -> None:
        try:
            checkpointer.checkpoint()
        except CheckpointLeaseLostError:
            refusals.append(when)

    def handle(records: list[LogRecord], checkpointer: Checkpointer) -> None:
        journal.add("a", records)
        if len(journal.seqs(P)) > len(records):
            checkpointer.checkpoint()
            return

        def between_hold_and_placement(params: dict[str, Any], **_: Any) -> None:
            if "#cp = :cp" in params.get("UpdateExpression", "") and not refusals:
                try_checkpoint(checkpointer, "held")

        seek.tables.clients.add_hook(
            "before-parameter-build.dynamodb.UpdateItem", between_hold_and_placement
        )
        seek.seek(GROUP, StartPosition.trim_horizon(), "tester")
        try_checkpoint(checkpointer, "placed")

    worker = Worker(
        GROUP, handle, aws.config, clients=aws.clients, settings=FAST, clock=clock, worker_id="a"
    )
    run_until_idle([worker], clock)
    assert refusals == ["held", "placed"]
    assert worker.stats.lost == 1
    assert journal.seqs(P) == [0, 1, 2, 3, *range(8)]  # the batch in flight, then from 0
    assert checkpoints(aws) == {P: "8"}
    worker.shutdown()


def test_after_a_split_the_children_wait_for_their_reopened_parent(
    aws: AwsEnv, clock: ManualClock
) -> None:
    """PARENT was finished (SHARD_END) and its children read; a seek into PARENT re-opens it:
    the children start again at 0, after it. A worker cycles between each of the seek's
    writes: no child record is delivered before the parent's."""
    finished_split(aws, 5)
    journal = Journal()
    worker = recording_worker(aws, journal, "w", clock)
    run_until_idle([worker], clock)
    assert checkpoints(aws) == {PARENT: C.SHARD_END, LEFT: "3", RIGHT: "3"}
    before = len(journal.deliveries)
    seek = group_seek(aws, clock)

    def worker_cycle(**_: Any) -> None:
        clock.advance(1)  # the worker's listing is due
        worker.run_once()

    seek.tables.clients.add_hook("after-call.dynamodb.UpdateItem", worker_cycle)
    plan = seek.seek(GROUP, StartPosition.at_sequence({PARENT: 2}), "tester")
    assert {m.partition_id: m.new for m in plan.moves} == {PARENT: "2", LEFT: "0", RIGHT: "0"}
    run_until_idle([worker], clock)
    after = [(d.partition_id, d.seq) for d in journal.deliveries[before:]]
    assert_parent_first(after, PARENT, [2, 3, 4], [0, 0, 1, 1, 2, 2])
    worker.shutdown()


def test_a_dry_run_writes_nothing_and_counts_what_would_move(aws: AwsEnv, consumed: Worker) -> None:
    consumed.shutdown()
    append(aws, Q, incoming_records(2, start=3))
    before = leases(aws)
    result = run_cli(aws, "group", "seek", "--group", GROUP, "--latest", "--dry-run", "--json")
    assert result.exit_code == 0, result.output
    plan = json.loads(result.output)
    assert (plan["done"], plan["skip"], plan["reprocess"]) == (False, 2, 0)
    assert {
        p["partitionId"]: (p["oldCheckpoint"], p["newCheckpoint"]) for p in plan["partitions"]
    } == {
        P: ("6", "6"),
        Q: ("3", "5"),
    }
    assert leases(aws) == before  # counters included: nothing was written
    summary = read_group_summary(aws.clients, aws.config.consumers_table, GROUP)
    assert summary.last_seek is None and summary.seek_owner is None


def test_the_cli_asks_before_skipping_and_status_shows_the_last_seek(
    aws: AwsEnv, consumed: Worker
) -> None:
    consumed.shutdown()
    append(aws, Q, incoming_records(2, start=3))
    declined = run_cli(aws, "group", "seek", "--group", GROUP, "--latest", input="n\n")
    assert declined.exit_code == 1 and "2 committed records would be skipped" in declined.output
    assert checkpoints(aws) == {P: "6", Q: "3"}
    done = run_cli(aws, "group", "seek", "--group", GROUP, "--latest", "--by", "ops", input="y\n")
    assert done.exit_code == 0, done.output
    assert checkpoints(aws) == {P: "6", Q: "5"}
    status = run_cli(aws, "status", "--group", GROUP)
    assert "last seek: to LATEST at " in status.output and "by ops" in status.output
    rows = json.loads(run_cli(aws, "status", "--group", GROUP, "--json").output)
    assert rows[0]["lastSeek"]["position"] == "LATEST" and rows[0]["lastSeek"]["by"] == "ops"
    quiet = run_cli(aws, "group", "seek", "--group", GROUP, "--trim-horizon")  # no skip: no ask
    assert quiet.exit_code == 0 and checkpoints(aws) == {P: "0", Q: "0"}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--at-seq", f"{P}=7"], f"error: --at-seq: {P}=7 is past partition {P}'s head 6"),
        (["--group", "nosuch", "--latest"], "error: no consumer group 'nosuch'"),
    ],
)
def test_cli_refusals_are_one_line_with_exit_2(
    aws: AwsEnv, consumed: Worker, args: list[str], message: str
) -> None:
    consumed.shutdown()
    group = [] if "--group" in args else ["--group", GROUP]
    result = run_cli(aws, "group", "seek", *group, *args, "--yes")
    assert result.exit_code == 2
    assert result.output.strip().splitlines()[-1].startswith(message)


def test_cli_takes_exactly_one_position() -> None:
    for args in ([], ["--latest", "--trim-horizon"]):
        result = run_cli(None, "group", "seek", "--group", GROUP, *args)
        assert result.exit_code == 2 and "give exactly one of" in result.output


def test_a_second_seek_is_refused_while_one_holds_the_group(
    aws: AwsEnv, clock: ManualClock, consumed: Worker
) -> None:
    consumed.shutdown()
    now = clock.now_ms()
    table = aws.config.consumers_table
    assert (
        begin_seek(aws.clients, table, GROUP, "seek:other", "workers", now_ms=now, hold_ms=60_000)
        is None
    )
    with pytest.raises(SeekRefusedError, match=r"another seek \(seek:other\) is in progress"):
        group_seek(aws, clock).seek(GROUP, StartPosition.trim_horizon(), "tester")
    assert checkpoints(aws) == {P: "6", Q: "3"}
    clock.advance(60_000)  # that seek died: its lock expires
    group_seek(aws, clock).seek(GROUP, StartPosition.trim_horizon(), "tester")
    assert checkpoints(aws) == {P: "0", Q: "0"}
