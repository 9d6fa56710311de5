"""A wake names the head it announces: a runner whose group already delivered past it stops
after one read, and any wake for a head past the checkpoint still delivers everything."""

from __future__ import annotations

from typing import Any

from shardlog.clock import ManualClock
from shardlog.lambda_consumer.runner import Outcome, RunReport
from shardlog.lambda_consumer.wake import Wake
from tests.support.aws import AwsEnv, make_env
from tests.support.factories import append, incoming_records
from tests.support.lambda_consumers import Recorder, plenty_of_time, received, runner_for

P = "shardId-000000000000"


def run(runner: Any, request_id: str, head: int | None = None) -> RunReport:
    report: RunReport = runner.run(P, request_id=request_id, remaining_ms=plenty_of_time, head=head)
    return report


def delivered_to_3(aws: AwsEnv, clock: ManualClock) -> tuple[Any, Recorder]:
    """A runner whose group has delivered seqs 0 to 2 (checkpoint 3)."""
    append(aws, P, incoming_records(3, start=0))
    recorder = Recorder()
    runner, _ = runner_for(aws, clock, recorder)
    assert run(runner, "r1", head=3).delivered == 3
    return runner, recorder


def test_a_wake_for_a_head_already_delivered_costs_one_read_and_invokes_nothing(
    aws: AwsEnv, clock: ManualClock
) -> None:
    runner, recorder = delivered_to_3(aws, clock)
    operations: list[str] = []

    def note(model: Any, **_: Any) -> None:
        operations.append(model.name)

    runner.clients.add_hook("before-call", note)
    report = run(runner, "r2", head=3)
    assert report.outcome is Outcome.DELIVERED and report.invocations == 0
    assert operations == ["GetItem"]  # the lease's checkpoint, and nothing else
    assert recorder.seqs(P) == [0, 1, 2]


def test_a_wake_for_a_head_past_the_checkpoint_delivers_up_to_the_head_it_reads(
    aws: AwsEnv, clock: ManualClock
) -> None:
    runner, recorder = delivered_to_3(aws, clock)
    append(aws, P, incoming_records(2, start=3))
    report = run(runner, "r2", head=4)  # one past the checkpoint (3): not delivered yet
    assert report.outcome is Outcome.CAUGHT_UP
    assert recorder.seqs(P) == [0, 1, 2, 3, 4]  # to the head it read, past the wake's


def test_a_runner_that_wakes_itself_names_the_head_it_read(aws: AwsEnv, clock: ManualClock) -> None:
    append(aws, P, incoming_records(4, start=0))
    recorder = Recorder()
    runner, wake_url = runner_for(aws, clock, recorder, batch_size=2)
    time_left = iter([900_000])  # one batch's worth, then out of time
    report = runner.run(P, request_id="r1", remaining_ms=lambda: next(time_left, 0))
    assert report.outcome is Outcome.STOPPED and report.woke == [P]
    assert recorder.seqs(P) == [0, 1]
    [wake] = [Wake.parse(body) for body in received(aws, wake_url)]
    assert (wake.reason, wake.head) == ("rewake", 4)
    again = run(runner, "r2", head=wake.head)
    assert again.outcome is Outcome.CAUGHT_UP and recorder.seqs(P) == [0, 1, 2, 3]


def test_two_deployments_on_one_account_never_share_a_wake(aws: AwsEnv, clock: ManualClock) -> None:
    """Same group name, same partition, same request id: each deployment's wake lands on its
    own queue. (With one queue per group name, the second was the first's FIFO duplicate
    and SQS dropped it silently: a full test run once found a runner's wake missing.)"""
    other = make_env(aws.config.endpoint_url or "")
    queues = []
    for env in (aws, other):
        append(env, P, incoming_records(4, start=0))
        runner, wake_url = runner_for(env, clock, Recorder(), batch_size=2)
        one_batch = iter([900_000])  # one batch's worth, then out of time

        def remaining(batches: Any = one_batch) -> int:
            return int(next(batches, 0))

        assert runner.run(P, request_id="r1", remaining_ms=remaining).woke == [P]
        queues.append(wake_url)
    assert queues[0] != queues[1]
    for wake_url in queues:
        assert [(w.reason, w.head) for w in map(Wake.parse, received(aws, wake_url))] == [
            ("rewake", 4)
        ]


def test_a_wake_that_delivers_a_commit_reads_the_head_and_the_retry_state_once(
    aws: AwsEnv, clock: ManualClock
) -> None:
    """A commit's wake, under way (checkpoint 3, a commit of 6 more, batches of 2): the
    partition is read once before delivering (the first batches read to that head), the
    retry state comes with the take's answer, then one checkpoint per batch, the head once
    more when caught up, the release and the re-check: nothing read twice in a row."""
    append(aws, P, incoming_records(3, start=0))
    recorder = Recorder()
    runner, _ = runner_for(aws, clock, recorder, batch_size=2)
    assert run(runner, "r1", head=3).delivered == 3
    append(aws, P, incoming_records(6, start=3), segment_max_records=6)  # one segment
    operations: list[str] = []

    def note(model: Any, **_: Any) -> None:
        operations.append(model.name)

    runner.clients.add_hook("before-call", note)
    report = run(runner, "r2", head=9)
    assert (report.outcome, report.invocations) == (Outcome.CAUGHT_UP, 3)
    assert recorder.seqs(P) == list(range(9))
    dynamodb = [o for o in operations if o in ("GetItem", "UpdateItem")]
    assert dynamodb == [
        "GetItem",  # the checkpoint against the wake's head
        "GetItem",  # the partition: ready, and its head
        "UpdateItem",  # the take (its answer holds the retry state)
        "UpdateItem",  # a checkpoint per batch
        "UpdateItem",
        "UpdateItem",
        "GetItem",  # the head once the buffer ran out: caught up
        "UpdateItem",  # the release
        "GetItem",  # the re-check after it
    ]
    assert sorted(o for o in operations if o not in dynamodb) == [
        "GetObject",
        "ListObjectsV2",
        "ListObjectsV2",
    ]
