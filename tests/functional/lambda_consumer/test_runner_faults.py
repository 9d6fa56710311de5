"""The runner under faults: killed between invoke and checkpoint, a zombie past its lease,
a commit racing the release, a restart mid-retry, two runners at once, a group that is
not a Lambda group, a function that times out."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest

from shardlog import constants as C
from shardlog.clock import ManualClock
from shardlog.exceptions import ConfigurationError
from shardlog.lambda_consumer.runner import Outcome, RunReport
from shardlog.lambda_consumer.wake import Wake
from shardlog.tables import Tables, consumer_key
from tests.support.aws import AwsEnv
from tests.support.factories import append, incoming_records
from tests.support.lambda_consumers import (
    Recorder,
    RunnerKilled,
    Seen,
    plenty_of_time,
    received,
    runner_for,
)

P = "shardId-000000000000"


def run(runner: Any, request_id: str = "r1") -> RunReport:
    report: RunReport = runner.run(P, request_id=request_id, remaining_ms=plenty_of_time)
    return report


def lease_of(aws: AwsEnv, group: str = "billing") -> Any:
    return Tables(aws.clients, aws.config.tables).get_lease(group, P)


def test_a_runner_killed_between_invoke_and_checkpoint_redelivers_that_batch_only(
    aws: AwsEnv, clock: ManualClock
) -> None:
    append(aws, P, incoming_records(9, start=0))
    recorder = Recorder()
    doomed, _ = runner_for(aws, clock, recorder, batch_size=3)
    killed: list[bool] = []

    def kill_at_the_checkpoint_after_an_invoke(**_: Any) -> None:
        if len(recorder.calls) == 2 and not killed:  # the second batch was invoked
            killed.append(True)
            raise RunnerKilled

    doomed.clients.add_hook(
        "before-call.dynamodb.UpdateItem", kill_at_the_checkpoint_after_an_invoke
    )
    with pytest.raises(RunnerKilled):
        run(doomed)
    assert lease_of(aws).checkpoint == "3"  # the first batch was checkpointed, the second not
    clock.advance(doomed.consumer.lease_ms)  # its lease expires
    successor, _ = runner_for(aws, clock, recorder, batch_size=3)
    report = run(successor, "r2")
    assert report.outcome is Outcome.CAUGHT_UP
    assert [[s.seq for s in b] for b in recorder.calls] == [
        [0, 1, 2],
        [3, 4, 5],
        [3, 4, 5],
        [6, 7, 8],
    ]
    assert lease_of(aws).checkpoint == "9"


def test_a_zombie_runner_cannot_checkpoint_over_its_successor(
    aws: AwsEnv, clock: ManualClock
) -> None:
    append(aws, P, incoming_records(6, start=0))
    successor_reports: list[RunReport] = []
    recorder = Recorder()

    def slow_first_call(batch: list[Seen]) -> Any:
        if len(recorder.calls) == 1:  # the zombie's first invocation outlives its lease
            clock.advance(zombie.consumer.lease_ms + 1)
            successor, _ = runner_for(aws, clock, Recorder(), batch_size=6)
            successor_reports.append(run(successor, "successor"))
        return None

    recorder.answer = slow_first_call
    zombie, _ = runner_for(aws, clock, recorder, batch_size=2)
    report = run(zombie, "zombie")
    assert report.outcome is Outcome.LOST  # its checkpoint was refused...
    assert len(recorder.calls) == 1  # ...and it stopped there: it invoked nothing more
    assert successor_reports[0].delivered == 6
    assert lease_of(aws).checkpoint == "6"  # the successor's stands: nothing skipped or undone


def test_a_commit_racing_the_release_is_still_delivered(aws: AwsEnv, clock: ManualClock) -> None:
    append(aws, P, incoming_records(3, start=0))
    recorder = Recorder()
    runner, wake_url = runner_for(aws, clock, recorder)
    released: list[bool] = []

    def commit_just_before_the_release(params: dict[str, Any], **_: Any) -> None:
        if (
            "REMOVE" in params.get("UpdateExpression", "")
            and "#owner" in params["UpdateExpression"]
            and not released
        ):
            released.append(True)
            append(aws, P, incoming_records(2, start=3))  # after the runner's last head read

    runner.clients.add_hook(
        "before-parameter-build.dynamodb.UpdateItem", commit_just_before_the_release
    )
    report = run(runner)
    assert released and recorder.seqs(P) == [0, 1, 2]
    assert report.lag_records == 2 and report.woke == [P]  # it re-checked after releasing
    [wake] = [Wake.parse(body) for body in received(aws, wake_url)]
    assert (wake.partition_id, wake.reason) == (P, "rewake")
    again, _ = runner_for(aws, clock, recorder)
    run(again, "r2")
    assert recorder.seqs(P) == [0, 1, 2, 3, 4]


def test_retry_state_survives_a_runner_restart(aws: AwsEnv, clock: ManualClock) -> None:
    append(aws, P, incoming_records(4, start=0))

    def always_fail(_batch: list[Seen]) -> Any:
        raise ValueError("down")

    recorder = Recorder(always_fail)
    settings = {
        "batch_size": 4,
        "bisect_batch_on_function_error": False,
        "maximum_retry_attempts": 2,
        "retry_base_delay_ms": 60_000,
        "retry_max_delay_ms": 60_000,
    }
    first, _ = runner_for(aws, clock, recorder, **settings)
    # 1 minute of backoff does not fit the run's remaining time: it saves the state and stops.
    report = first.run(P, request_id="r1", remaining_ms=lambda: 100_000)
    assert report.outcome is Outcome.STOPPED and report.failed_invocations == 1
    item = aws.clients.dynamodb.get_item(
        TableName=aws.config.consumers_table, Key=consumer_key("billing", P), ConsistentRead=True
    )["Item"]
    assert (
        item[C.ATTR_RETRY_START]["N"],
        item[C.ATTR_RETRY_END]["N"],
        item[C.ATTR_RETRY_ATTEMPTS]["N"],
    ) == ("0", "4", "1")
    second, _ = runner_for(aws, clock, recorder, **settings)
    report = second.run(P, request_id="r2", remaining_ms=plenty_of_time)
    assert report.failed_invocations == 2 and report.sent_to_destination == 4  # attempts 2, 3
    assert len(recorder.calls) == 3 and lease_of(aws).checkpoint == "4"


def test_two_runners_at_once_one_finds_the_lease_held(aws: AwsEnv, clock: ManualClock) -> None:
    append(aws, P, incoming_records(2, start=0))
    busy: list[RunReport] = []
    recorder = Recorder()

    def second_wake(_batch: list[Seen]) -> Any:
        other, _ = runner_for(aws, clock, Recorder())
        busy.append(run(other, "duplicate-wake"))

    recorder.answer = second_wake
    first, _ = runner_for(aws, clock, recorder)
    assert run(first).outcome is Outcome.CAUGHT_UP
    assert [r.outcome for r in busy] == [Outcome.BUSY]


def test_a_worker_group_cannot_become_a_lambda_group(aws: AwsEnv, clock: ManualClock) -> None:
    append(aws, P, incoming_records(1, start=0))
    aws.clients.dynamodb.put_item(
        TableName=aws.config.consumers_table,
        Item={**consumer_key("billing", C.GROUP_ITEM_ID), C.ATTR_GROUP_KIND: {"S": "workers"}},
    )
    with pytest.raises(ConfigurationError, match="not a Lambda consumer group"):
        runner_for(aws, clock, Recorder())  # refused where deploy registers it
    runner, _ = runner_for(aws, clock, Recorder(), register_group=False)
    with pytest.raises(ConfigurationError, match="not a Lambda consumer group"):
        run(runner)


def test_a_function_that_times_out_fails_its_batch(aws: AwsEnv, clock: ManualClock) -> None:
    append(aws, P, incoming_records(2, start=0))
    release = threading.Event()

    def hangs(_batch: list[Seen]) -> Any:
        release.wait(30)  # bounded: the test releases it at the end

    recorder = Recorder(hangs)
    runner, _ = runner_for(
        aws,
        clock,
        recorder,
        function_timeout_ms=1_000,
        maximum_retry_attempts=0,
        bisect_batch_on_function_error=False,
    )
    try:
        report = run(runner)
    finally:
        release.set()
    assert report.failed_invocations == 1 and report.sent_to_destination == 2


def test_a_zombie_gives_up_on_nothing_its_successor_delivered(
    aws: AwsEnv, clock: ManualClock
) -> None:
    """A runner whose failed invocation outlived its lease must not send an on-failure
    record: its successor took the batch over (and delivered it). The give-up is a fenced
    write first, refused here, and only then the destination."""
    append(aws, P, incoming_records(3, start=0))
    settings: dict[str, Any] = {
        "maximum_retry_attempts": 0,
        "bisect_batch_on_function_error": False,
    }
    successor_reports: list[RunReport] = []
    successor, _ = runner_for(aws, clock, Recorder(), "zombie", **settings)

    def fails_after_a_takeover(_batch: list[Seen]) -> Any:
        clock.advance(successor.consumer.lease_ms + 1)  # this invocation outlives the lease
        successor_reports.append(run(successor, "r2"))
        raise RuntimeError("the zombie's invocation fails")

    zombie, _ = runner_for(aws, clock, Recorder(fails_after_a_takeover), "zombie", **settings)
    failure_url = zombie.settings.consumer.on_failure_destination
    assert failure_url is not None
    report = run(zombie)
    assert [r.outcome for r in successor_reports] == [Outcome.CAUGHT_UP]
    assert successor_reports[0].delivered == 3
    assert report.outcome is Outcome.LOST and report.sent_to_destination == 0
    queue = aws.clients.client("sqs").get_queue_url(QueueName=failure_url.split(":")[-1])
    assert received(aws, queue["QueueUrl"]) == []
    assert lease_of(aws, "zombie").checkpoint == "3"


def test_a_give_up_interrupted_before_its_record_is_sent_is_sent_by_the_next_runner(
    aws: AwsEnv, clock: ManualClock
) -> None:
    """Killed after the fenced give-up and before the destination: the next runner sends the
    record (it does not invoke the batch again) and moves on."""
    append(aws, P, incoming_records(4, start=0))
    settings: dict[str, Any] = {
        "maximum_retry_attempts": 0,
        "bisect_batch_on_function_error": False,
        "batch_size": 2,
    }

    def fails(_batch: list[Seen]) -> Any:
        raise RuntimeError("always")

    recorder = Recorder(fails)
    doomed, _ = runner_for(aws, clock, recorder, "interrupted", **settings)

    def killed_before_sending(**_: Any) -> None:
        raise RunnerKilled

    doomed.clients.add_hook("before-call.sqs.*", killed_before_sending)
    with pytest.raises(RunnerKilled):
        run(doomed)
    assert len(recorder.calls) == 1
    clock.advance(doomed.consumer.lease_ms + 1)
    successor, _ = runner_for(aws, clock, Recorder(), "interrupted", **settings)
    report = run(successor, "r2")
    assert report.sent_to_destination == 2 and report.delivered == 2
    assert successor.settings.consumer.on_failure_destination is not None
    failure_url = successor.settings.consumer.on_failure_destination
    queue = aws.clients.client("sqs").get_queue_url(QueueName=failure_url.split(":")[-1])
    [record] = [json.loads(b) for b in received(aws, queue["QueueUrl"])]
    info = record["shardlogBatchInfo"]
    assert (info["startSequenceNumber"], info["endSequenceNumber"]) == (0, 1)
    assert record["requestContext"]["condition"] == "RetryAttemptsExhausted"
    assert lease_of(aws, "interrupted").checkpoint == "4"
