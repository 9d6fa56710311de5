"""Tumbling windows of a Lambda consumer group on the embedded AWS: the state carried
across a window's invocations, the final invocation, a crash mid-window, a zombie's state
refused, early termination past 1 MB, windows across a split, and the sweep that closes a
window no record comes to close, and a seek that drops the open window."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pytest

from shardlog import constants as C
from shardlog.clock import ManualClock
from shardlog.consumer.positions import StartPosition
from shardlog.dal.consumers import LaneProgress
from shardlog.lambda_consumer.runner import Outcome, Runner, RunReport
from shardlog.lambda_consumer.windows import CLOSE_GRACE_MS, STATE_LIMIT_BYTES
from shardlog.tables import Tables, consumer_key, from_ddb
from tests.functional.lambda_consumer.conftest import Start
from tests.support.aws import AwsEnv
from tests.support.factories import append, end_partition, incoming_records, register_partition
from tests.support.lambda_consumers import Recorder, drive, plenty_of_time, runner_for
from tests.support.seek import group_seek

P = "shardId-000000000000"
GROUP = "windowed"  # its own queues: no other test's group of the same name
WINDOW_S = 60
T0 = 1_700_000_040_000  # a window's start: a multiple of 60 s
T1 = T0 + WINDOW_S * 1000  # the next window's


@dataclass(frozen=True)
class Invocation:
    seqs: list[int]
    window: dict[str, str]
    state: dict[str, Any]
    final: bool
    early: bool
    shard_id: str


@dataclass
class Counting(Recorder):
    """A windowed function: counts the records of each window in its state; ``fail``
    decides from the invocation whether it raises, ``pad`` how much padding its state gets."""

    invocations: list[Invocation] = field(default_factory=list)
    fail: Any = lambda _inv: False
    pad: int = 0

    def __call__(self, event: dict[str, Any], context: Any) -> Any:
        invocation = Invocation(
            [int(r["kinesis"]["sequenceNumber"]) for r in event["Records"]],
            event["window"],
            event["state"],
            event["isFinalInvokeForWindow"],
            event["isWindowTerminatedEarly"],
            event["shardId"],
        )
        assert event["eventSourceARN"].startswith("arn:aws:kinesis:")
        self.invocations.append(invocation)
        if self.fail(invocation):
            raise RuntimeError("the function fails")
        state = {"n": event["state"].get("n", 0) + len(invocation.seqs)}
        if self.pad:
            state["pad"] = "x" * self.pad
        return {"state": state, "batchItemFailures": []}

    def summary(self) -> list[tuple[list[int], int | None, bool]]:
        """Per invocation: its seqs, the count its state came in with, and whether final."""
        return [(i.seqs, i.state.get("n"), i.final) for i in self.invocations]


def run(runner: Runner, partition_id: str = P, request_id: str = "r1") -> RunReport:
    report: RunReport = runner.run(partition_id, request_id=request_id, remaining_ms=plenty_of_time)
    return report


def stored_window(aws: AwsEnv, group: str = GROUP, partition_id: str = P) -> Any:
    item = aws.clients.dynamodb.get_item(
        TableName=aws.config.tables.consumers,
        Key=consumer_key(group, partition_id),
        ConsistentRead=True,
    )["Item"]
    return LaneProgress.from_item(from_ddb(item)).window


def checkpoint(aws: AwsEnv, group: str = GROUP, partition_id: str = P) -> str | None:
    lease = Tables(aws.clients, aws.config.tables).get_lease(group, partition_id)
    return lease.checkpoint if lease else None


def two_windows(aws: AwsEnv, first: int = 5, second: int = 3) -> None:
    append(aws, P, incoming_records(first, start=0, arrival_ms=T0))
    append(aws, P, incoming_records(second, start=first, arrival_ms=T1))


def test_the_state_is_carried_through_a_window_and_a_later_record_closes_it(
    aws: AwsEnv, clock: ManualClock
) -> None:
    two_windows(aws)
    function = Counting()
    runner, _ = runner_for(aws, clock, function, GROUP, batch_size=2, tumbling_window_s=WINDOW_S)
    assert run(runner).outcome is Outcome.CAUGHT_UP
    assert function.summary() == [
        ([0, 1], None, False),  # a window starts with an empty state
        ([2, 3], 2, False),
        ([4], 4, False),  # a batch never crosses into the next window
        ([], 5, True),  # a record of the next window was read: the final invocation
        ([5, 6], None, False),  # the next window starts afresh
        ([7], 2, False),
    ]
    first, final, second = function.invocations[0], function.invocations[3], function.invocations[4]
    assert (
        first.window
        == final.window
        == {"start": "2023-11-14T22:14:00Z", "end": "2023-11-14T22:15:00Z"}
    )
    assert second.window == {"start": "2023-11-14T22:15:00Z", "end": "2023-11-14T22:16:00Z"}
    assert not any(i.early for i in function.invocations)
    assert {i.shard_id for i in function.invocations} == {P}
    assert checkpoint(aws) == "8"
    window = stored_window(aws)  # the open window's state, with the checkpoint
    assert (window.start_ms, json.loads(window.state_json)) == (T1, {"n": 3})


def test_the_clock_closes_a_window_only_after_its_end_and_the_grace(
    aws: AwsEnv, clock: ManualClock
) -> None:
    two_windows(aws)
    function = Counting()
    runner, _ = runner_for(aws, clock, function, GROUP, batch_size=10, tumbling_window_s=WINDOW_S)
    run(runner)
    assert function.summary()[-1] == ([5, 6, 7], None, False)
    clock.advance(T1 + WINDOW_S * 1000 + CLOSE_GRACE_MS - 1 - clock.now_ms())
    run(runner, request_id="r2")  # one ms short: the window stays open
    assert len(function.invocations) == 3
    clock.advance(1)
    run(runner, request_id="r3")
    assert function.summary()[-1] == ([], 3, True)
    assert stored_window(aws) is None  # the state is dropped with the final invocation
    assert checkpoint(aws) == "8"


def test_a_failed_final_invocation_is_retried_until_it_succeeds(
    aws: AwsEnv, clock: ManualClock
) -> None:
    two_windows(aws, first=2, second=1)
    finals: list[int] = []

    def fails_twice(invocation: Invocation) -> bool:
        if invocation.final:
            finals.append(1)
        return invocation.final and len(finals) <= 2

    function = Counting(fail=fails_twice)
    runner, _ = runner_for(
        aws,
        clock,
        function,
        GROUP,
        batch_size=10,
        tumbling_window_s=WINDOW_S,
        maximum_retry_attempts=0,
    )
    run(runner)
    assert function.summary() == [
        ([0, 1], None, False),
        ([], 2, True),
        ([], 2, True),
        ([], 2, True),  # the same state each time; nothing of the next window before it
        ([2], None, False),
    ]


def test_a_runner_killed_mid_window_resumes_with_the_last_committed_state(
    aws: AwsEnv, clock: ManualClock
) -> None:
    append(aws, P, incoming_records(6, start=0, arrival_ms=T0))
    function = Counting()
    doomed, _ = runner_for(aws, clock, function, GROUP, batch_size=2, tumbling_window_s=WINDOW_S)

    class Killed(BaseException):
        pass

    def kill_after_the_second_invocation(**_: Any) -> None:
        if len(function.invocations) == 2:
            raise Killed  # its state {n: 4} is never written, nor its checkpoint

    doomed.clients.add_hook("before-call.dynamodb.UpdateItem", kill_after_the_second_invocation)
    with pytest.raises(Killed):
        run(doomed)
    assert checkpoint(aws) == "2"
    assert json.loads(stored_window(aws).state_json) == {"n": 2}
    clock.advance(doomed.consumer.lease_ms)
    successor, _ = runner_for(aws, clock, function, GROUP, batch_size=2, tumbling_window_s=WINDOW_S)
    run(successor, request_id="r2")
    assert function.summary() == [
        ([0, 1], None, False),
        ([2, 3], 2, False),  # the killed runner's invocation
        ([2, 3], 2, False),  # again, with the state committed with checkpoint 2
        ([4, 5], 4, False),
    ]
    assert json.loads(stored_window(aws).state_json) == {"n": 6}


def test_a_zombie_cannot_write_its_state_over_its_successor(
    aws: AwsEnv, clock: ManualClock
) -> None:
    append(aws, P, incoming_records(4, start=0, arrival_ms=T0))
    reports: list[RunReport] = []

    @dataclass
    class Slow(Counting):
        def __call__(self, event: dict[str, Any], context: Any) -> Any:
            answer = super().__call__(event, context)
            if len(self.invocations) == 1:  # the zombie's invocation outlives its lease
                clock.advance(zombie.consumer.lease_ms + 1)
                successor, _ = runner_for(
                    aws, clock, Counting(), GROUP, batch_size=4, tumbling_window_s=WINDOW_S
                )
                reports.append(run(successor, request_id="successor"))
                answer["state"] = {"n": 1000, "from": "zombie"}
            return answer

    zombie_function = Slow()
    zombie, _ = runner_for(
        aws, clock, zombie_function, GROUP, batch_size=2, tumbling_window_s=WINDOW_S
    )
    report = run(zombie, request_id="zombie")
    assert report.outcome is Outcome.LOST  # its fenced write was refused
    assert reports[0].delivered == 4
    assert checkpoint(aws) == "4"
    assert json.loads(stored_window(aws).state_json) == {"n": 4}  # the successor's state


@pytest.mark.parametrize(
    ("state_bytes", "early"),
    [(100, False), (STATE_LIMIT_BYTES, False), (STATE_LIMIT_BYTES + 1, True)],
    ids=["within", "at-1MB", "past-1MB"],
)
def test_a_state_past_1_mb_ends_its_window_early(
    aws: AwsEnv, clock: ManualClock, state_bytes: int, early: bool
) -> None:
    append(aws, P, incoming_records(2, start=0, arrival_ms=T0))
    function = Counting(pad=state_bytes - len('{"n":1,"pad":""}'))  # the first state's size
    runner, _ = runner_for(aws, clock, function, GROUP, batch_size=1, tumbling_window_s=WINDOW_S)
    run(runner)
    summary = [(i.seqs, i.final, i.early) for i in function.invocations]
    returned = json.dumps(function.invocations[1].state, separators=(",", ":"))
    if not early:
        assert summary == [([0], False, False), ([1], False, False)]
        assert len(returned) == state_bytes  # kept, stored and handed on
        assert checkpoint(aws) == "2"
        return
    assert summary == [
        ([0], False, False),
        ([], True, True),  # the oversized state, final, terminated early
        ([1], False, False),  # the same window goes on, with a fresh state
        ([], True, True),  # (whose answer is past the limit again)
    ]
    assert len(returned) == state_bytes
    assert function.invocations[2].state == {}
    assert function.invocations[2].window == function.invocations[0].window
    assert checkpoint(aws) == "2"


def test_a_split_parent_closes_its_window_and_children_start_their_own(
    aws: AwsEnv, clock: ManualClock
) -> None:
    child = "shardId-000000000002"
    append(aws, P, incoming_records(3, start=0, arrival_ms=T0))
    end_partition(aws, P)
    register_partition(aws, child, parents=(P,))
    append(aws, child, incoming_records(2, start=3, arrival_ms=T0 + 10))  # the same window
    function = Counting()
    runner, _ = runner_for(aws, clock, function, GROUP, batch_size=10, tumbling_window_s=WINDOW_S)
    assert run(runner).outcome is Outcome.FINISHED
    assert run(runner, child, "r2").outcome is Outcome.CAUGHT_UP
    assert [(i.shard_id, i.seqs, i.state.get("n"), i.final) for i in function.invocations] == [
        (P, [0, 1, 2], None, False),
        (P, [], 3, True),  # the parent's window closes at its end
        (child, [0, 1], None, False),  # the child's own window, from an empty state
    ]
    assert checkpoint(aws) == C.SHARD_END


def test_the_sweep_wakes_a_partition_whose_window_the_clock_closed(
    aws: AwsEnv, clock: ManualClock, start_group: Start
) -> None:
    append(aws, P, incoming_records(2, start=0, arrival_ms=T0))
    function = Counting()
    group = start_group(function, "sweeping", tumbling_window_s=WINDOW_S)
    drive(group, clock)
    assert function.summary() == [([0, 1], None, False)]  # caught up, the window open
    clock.advance(T1 + CLOSE_GRACE_MS - clock.now_ms())  # no record will come to wake it
    drive(group, clock)
    assert function.summary() == [([0, 1], None, False), ([], 2, True)]
    assert stored_window(aws, "sweeping") is None


def test_a_seek_drops_the_open_window_and_its_state(aws: AwsEnv, clock: ManualClock) -> None:
    append(aws, P, incoming_records(4, start=0, arrival_ms=T0))
    function = Counting()
    runner, _ = runner_for(aws, clock, function, GROUP, batch_size=4, tumbling_window_s=WINDOW_S)
    run(runner)
    assert json.loads(stored_window(aws).state_json) == {"n": 4}
    group_seek(aws, clock).seek(GROUP, StartPosition.trim_horizon(), "tester")
    assert stored_window(aws) is None
    run(runner, request_id="r2")
    assert function.summary() == [([0, 1, 2, 3], None, False), ([0, 1, 2, 3], None, False)]
