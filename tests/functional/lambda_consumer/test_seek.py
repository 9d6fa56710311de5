"""`shardlog group seek` on a Lambda consumer group: the runner delivers again or skips what
the position says, a runner mid-session is fenced (its next write refused, it stops; its
retry state is gone), a give-up not sent yet refuses the seek, and children wait for a
re-opened parent."""

from __future__ import annotations

from typing import Any

import pytest

from shardlog import constants as C
from shardlog.clock import ManualClock
from shardlog.consumer.exceptions import SeekRefusedError
from shardlog.consumer.positions import StartPosition
from shardlog.exceptions import ValidationError
from shardlog.lambda_consumer.runner import Outcome, Runner, RunReport
from shardlog.tables import consumer_key
from tests.functional.lambda_consumer.conftest import Start
from tests.support.aws import AwsEnv
from tests.support.factories import append, incoming_records
from tests.support.lambda_consumers import (
    Recorder,
    RunnerKilled,
    Seen,
    drive,
    plenty_of_time,
    runner_for,
)
from tests.support.seek import LEFT, PARENT, RIGHT, assert_parent_first, finished_split, group_seek

P = "shardId-000000000000"
GROUP = "seeking"  # start_group's group: its own queues
RUNNER_GROUP = "billing"  # runner_for's
SWEEP_MS = 60_000  # the local sweep's interval: a moved group is woken by it
BASE_MS = 1_700_000_000_000


def seek_to(aws: AwsEnv, clock: ManualClock, group: str, position: StartPosition) -> Any:
    return group_seek(aws, clock).seek(group, position, "tester")


def item(aws: AwsEnv, group: str, partition_id: str = P) -> dict[str, Any]:
    return dict(
        aws.clients.dynamodb.get_item(
            TableName=aws.config.consumers_table,
            Key=consumer_key(group, partition_id),
            ConsistentRead=True,
        )["Item"]
    )


def run(runner: Runner, request_id: str) -> RunReport:
    return runner.run(P, request_id=request_id, remaining_ms=plenty_of_time)


def test_trim_horizon_redelivers_everything_at_the_next_sweep(
    aws: AwsEnv, clock: ManualClock, start_group: Start
) -> None:
    append(aws, P, incoming_records(5, start=0))
    recorder = Recorder()
    group = start_group(recorder, GROUP)
    drive(group, clock)
    assert recorder.seqs(P) == [0, 1, 2, 3, 4]
    seek_to(aws, clock, GROUP, StartPosition.trim_horizon())
    clock.advance(SWEEP_MS)
    drive(group, clock)
    assert recorder.seqs(P) == [0, 1, 2, 3, 4, 0, 1, 2, 3, 4]
    assert item(aws, GROUP)[C.ATTR_CHECKPOINT]["S"] == "5"


def test_latest_delivers_nothing_committed_before_the_seek(
    aws: AwsEnv, clock: ManualClock, start_group: Start
) -> None:
    append(aws, P, incoming_records(5, start=0))
    recorder = Recorder()
    group = start_group(recorder, GROUP)
    drive(group, clock)
    append(aws, P, incoming_records(3, start=5))  # its wake is queued, not run yet
    plan = seek_to(aws, clock, GROUP, StartPosition.latest())
    assert [(m.old, m.new, m.skip) for m in plan.moves] == [("5", "8", 3)]
    drive(group, clock)
    append(aws, P, incoming_records(2, start=8))
    drive(group, clock)
    assert recorder.seqs(P) == [0, 1, 2, 3, 4, 8, 9]


def test_at_timestamp_and_at_seq_within_the_head(
    aws: AwsEnv, clock: ManualClock, start_group: Start
) -> None:
    append(aws, P, incoming_records(6, start=0, arrival_ms=BASE_MS))
    recorder = Recorder()
    group = start_group(recorder, GROUP)
    drive(group, clock)
    seek_to(aws, clock, GROUP, StartPosition.at_timestamp(BASE_MS + 3))
    clock.advance(SWEEP_MS)
    drive(group, clock)
    assert recorder.seqs(P) == [*range(6), 3, 4, 5]
    with pytest.raises(ValidationError, match=f"{P}=7 is past partition {P}'s head 6"):
        seek_to(aws, clock, GROUP, StartPosition.at_sequence({P: 7}))
    seek_to(aws, clock, GROUP, StartPosition.at_sequence({P: 5}))
    clock.advance(SWEEP_MS)
    drive(group, clock)
    assert recorder.seqs(P) == [*range(6), 3, 4, 5, 5]


def test_a_runner_mid_retry_is_fenced_and_its_retry_state_cleared(
    aws: AwsEnv, clock: ManualClock
) -> None:
    """The seek lands while the runner retries a failed batch: the runner's next write (the
    retry state) is refused and it stops; the seek's write cleared the retry state, so the
    next runner starts at the new position with a fresh batch."""
    append(aws, P, incoming_records(8, start=0))
    sought: list[Any] = []

    def fail_after_the_first_batch(batch: list[Seen]) -> Any:
        if batch[0].seq == 0:
            return {"batchItemFailures": []}
        if recorder.calls[-2:-1] and recorder.calls[-2][0].seq == 4:  # the retry
            sought.append(seek_to(aws, clock, RUNNER_GROUP, StartPosition.at_sequence({P: 2})))
        raise ValueError("down")

    recorder = Recorder(fail_after_the_first_batch)
    settings = {
        "batch_size": 4,
        "bisect_batch_on_function_error": False,
        "maximum_retry_attempts": 5,
        "retry_base_delay_ms": 0,
        "retry_max_delay_ms": 0,
    }
    runner, _ = runner_for(aws, clock, recorder, **settings)
    report = run(runner, "r1")
    assert sought and report.outcome is Outcome.LOST
    assert [[s.seq for s in b] for b in recorder.calls] == [
        [0, 1, 2, 3],
        [4, 5, 6, 7],
        [4, 5, 6, 7],
    ]
    state = item(aws, RUNNER_GROUP)
    assert state[C.ATTR_CHECKPOINT]["S"] == "2" and C.ATTR_LEASE_OWNER not in state
    assert not {C.ATTR_RETRY_START, C.ATTR_RETRY_END, C.ATTR_PENDING_FAILURE} & set(state)
    recorder.answer = lambda _batch: {"batchItemFailures": []}
    successor, _ = runner_for(aws, clock, recorder, **settings)
    assert run(successor, "r2").outcome is Outcome.CAUGHT_UP
    assert [[s.seq for s in b] for b in recorder.calls[3:]] == [[2, 3, 4, 5], [6, 7]]


def test_a_give_up_not_sent_yet_refuses_the_seek_until_a_runner_sends_it(
    aws: AwsEnv, clock: ManualClock
) -> None:
    append(aws, P, incoming_records(4, start=0))

    def fail(_batch: list[Seen]) -> Any:
        raise ValueError("poison")

    settings = {
        "batch_size": 4,
        "maximum_retry_attempts": 0,
        "bisect_batch_on_function_error": False,
    }
    doomed, _ = runner_for(aws, clock, Recorder(fail), **settings)

    def die(**_: Any) -> None:
        raise RunnerKilled

    doomed.clients.add_hook("before-call.sqs.SendMessage", die)  # after the give-up's record
    with pytest.raises(RunnerKilled):
        run(doomed, "r1")
    assert C.ATTR_PENDING_FAILURE in item(aws, RUNNER_GROUP)
    with pytest.raises(SeekRefusedError, match=f"{P} seqs 0 to 3"):
        seek_to(aws, clock, RUNNER_GROUP, StartPosition.latest())
    state = item(aws, RUNNER_GROUP)
    assert C.ATTR_PENDING_FAILURE in state and state[C.ATTR_CHECKPOINT]["S"] == "0"
    assert C.ATTR_LEASE_OWNER not in state  # the hold was given back: a runner may take it
    recorder = Recorder()
    successor, _ = runner_for(aws, clock, recorder, **settings)
    report = run(successor, "r2")
    assert report.sent_to_destination == 4 and recorder.calls == []  # sent, not invoked
    seek_to(aws, clock, RUNNER_GROUP, StartPosition.trim_horizon())
    run(successor, "r3")
    assert recorder.seqs(P) == [0, 1, 2, 3]


def test_after_a_split_the_children_wait_for_their_reopened_parent(
    aws: AwsEnv, clock: ManualClock, start_group: Start
) -> None:
    finished_split(aws, 4)
    recorder = Recorder()
    group = start_group(recorder, GROUP)
    drive(group, clock)
    before = len(recorder.calls)
    plan = seek_to(aws, clock, GROUP, StartPosition.trim_horizon())
    assert {m.partition_id: (m.old, m.new) for m in plan.moves} == {
        PARENT: (C.SHARD_END, "0"),
        LEFT: ("3", "0"),
        RIGHT: ("3", "0"),
    }
    clock.advance(SWEEP_MS)
    drive(group, clock)
    after = [(s.partition_id, s.seq) for batch in recorder.calls[before:] for s in batch]
    assert_parent_first(after, PARENT, [0, 1, 2, 3], [0, 0, 1, 1, 2, 2])
