"""A wake names the head it announces: a runner whose group already delivered past it stops
after one read, and any wake for a head past the checkpoint still delivers everything."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from shardlog.clock import ManualClock
from shardlog.lambda_consumer.runner import Outcome, RunReport
from shardlog.lambda_consumer.wake import Wake
from tests.support.aws import AwsEnv
from tests.support.factories import append, incoming_records
from tests.support.lambda_consumers import Recorder, plenty_of_time, runner_for

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
    runner, _wake_url = runner_for(aws, clock, recorder, batch_size=2)
    sent: list[Wake] = []
    send = runner.wakes.send

    def recorded(wakes: Iterable[Wake]) -> int:
        """The wakes as sent (their queue is read by the local runtime's event source)."""
        batch = list(wakes)
        sent.extend(batch)
        return send(batch)

    runner.wakes.send = recorded  # type: ignore[method-assign]
    time_left = iter([900_000])  # one batch's worth, then out of time
    report = runner.run(P, request_id="r1", remaining_ms=lambda: next(time_left, 0))
    assert report.outcome is Outcome.STOPPED and report.woke == [P]
    assert recorder.seqs(P) == [0, 1]
    [wake] = [Wake.parse(w.body()) for w in sent]  # as its queue would carry it
    assert (wake.reason, wake.head) == ("rewake", 4)
    again = run(runner, "r2", head=wake.head)
    assert again.outcome is Outcome.CAUGHT_UP and recorder.seqs(P) == [0, 1, 2, 3]
