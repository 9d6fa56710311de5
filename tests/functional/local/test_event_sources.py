"""The local SQS event source on a FIFO queue, as Lambda's: several message groups at once
in execution environments of their own, each group in order (real SQS calls to the embedded
AWS, real threads; bounded waits, no sleeps)."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from shardlog.local.event_sources import SqsEventSource
from tests.support.aws import AwsEnv

Handler = Callable[[dict[str, Any], Any], Any]


def _fifo_queue(aws: AwsEnv) -> str:
    url: str = aws.clients.client("sqs").create_queue(
        QueueName=f"wakes-{uuid.uuid4().hex[:12]}.fifo",
        Attributes={"FifoQueue": "true", "ContentBasedDeduplication": "true"},
    )["QueueUrl"]
    return url


def _send(aws: AwsEnv, url: str, messages: list[tuple[str, str]]) -> None:
    for group, body in messages:
        aws.clients.client("sqs").send_message(QueueUrl=url, MessageBody=body, MessageGroupId=group)


class Recorder:
    """Handlers that record (environment, group, body) per invocation; ``gate`` makes the
    first invocation of group g1 wait until another group's invocation started."""

    def __init__(self, expected: int, fail_once: str | None = None) -> None:
        self.lock = threading.Lock()
        self.calls: list[tuple[int, str, str]] = []
        self.expected = expected
        self.enough = threading.Event()
        self.other_group_started = threading.Event()
        self.overlapped = False
        self.fail_once = fail_once

    def handler(self, environment: int) -> Handler:
        def handle(event: dict[str, Any], _context: Any) -> dict[str, Any]:
            (record,) = event["Records"]
            group = record["attributes"]["MessageGroupId"]
            body = record["body"]
            if group != "g1":
                self.other_group_started.set()
            elif body == "g1-0":  # runs while another group's invocation starts, or times out
                self.overlapped = self.other_group_started.wait(timeout=20)
            with self.lock:
                self.calls.append((environment, group, body))
                if len(self.calls) >= self.expected:
                    self.enough.set()
            if body == self.fail_once:
                self.fail_once = None
                return {"batchItemFailures": [{"itemIdentifier": record["messageId"]}]}
            return {"batchItemFailures": []}

        return handle

    def bodies(self, group: str) -> list[str]:
        return [body for _, g, body in self.calls if g == group]


def _run_until(source: SqsEventSource, done: threading.Event) -> None:
    stop = threading.Event()
    thread = threading.Thread(target=source.run, args=(stop,), kwargs={"idle_sleep_s": 0.01})
    thread.start()
    try:
        assert done.wait(timeout=60), "the event source never handled the expected messages"
    finally:
        stop.set()
        thread.join(timeout=60)
    assert not thread.is_alive()


def test_message_groups_run_at_once_each_in_order(aws: AwsEnv) -> None:
    url = _fifo_queue(aws)
    messages = [(f"g{g}", f"g{g}-{i}") for i in range(3) for g in (1, 2, 3)]
    _send(aws, url, messages)
    recorder = Recorder(expected=len(messages))
    source = SqsEventSource(
        aws.clients,
        url,
        recorder.handler(0),
        handlers=[recorder.handler(1), recorder.handler(2)],
        function_name="runner",
    )
    assert source.concurrency == 3
    _run_until(source, recorder.enough)
    assert recorder.overlapped, "group g1 never ran while another group's invocation started"
    for g in (1, 2, 3):
        assert recorder.bodies(f"g{g}") == [f"g{g}-{i}" for i in range(3)]
    assert len(recorder.calls) == len(messages)  # each once
    attributes = aws.clients.client("sqs").get_queue_attributes(
        QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages"]
    )["Attributes"]
    assert attributes["ApproximateNumberOfMessages"] == "0"  # every success deleted
    assert source.invocations == len(messages) and source.failures == 0


def test_a_failed_message_holds_back_the_rest_of_its_group_only(aws: AwsEnv) -> None:
    url = _fifo_queue(aws)
    _send(aws, url, [("g1", "g1-0"), ("g1", "g1-1"), ("g2", "g2-0"), ("g2", "g2-1")])
    recorder = Recorder(expected=3, fail_once="g1-0")  # g1-0 (failed), g2-0, g2-1
    source = SqsEventSource(
        aws.clients,
        url,
        recorder.handler(0),
        handlers=[recorder.handler(1)],
        function_name="runner",
        visibility_timeout_s=600,  # the failed one does not come back within the test
    )
    _run_until(source, recorder.enough)
    assert recorder.bodies("g2") == ["g2-0", "g2-1"]
    assert recorder.bodies("g1") == ["g1-0"]  # g1-1 waits behind it: never invoked first
    assert source.failures == 1


def test_one_environment_polls_as_before(aws: AwsEnv) -> None:
    url = _fifo_queue(aws)
    _send(aws, url, [("g1", "g1-0"), ("g2", "g2-0")])
    recorder = Recorder(expected=2)
    recorder.other_group_started.set()  # no gate: one environment runs one group at a time
    source = SqsEventSource(aws.clients, url, recorder.handler(0), function_name="runner")
    assert source.concurrency == 1
    assert source.drain() == 2
    assert {body for _, _, body in recorder.calls} == {"g1-0", "g2-0"}


@pytest.mark.parametrize("environments", [1, 2])
def test_a_nudge_ends_the_wait_between_receives(aws: AwsEnv, environments: int) -> None:
    """Polling every 600 s, a message sent and nudged is handled at once (as Lambda's long
    poll takes it), by one environment or several; a finished invocation ends the wait
    too, so a message sent while one ran is received when it ends."""
    url = _fifo_queue(aws)
    recorder = Recorder(expected=2)
    recorder.other_group_started.set()  # no gate
    handle = recorder.handler(0)

    def first(event: dict[str, Any], context: Any) -> Any:
        answer = handle(event, context)
        if len(recorder.calls) == 1:
            _send(aws, url, [("g1", "g1-1")])  # sent while it runs, not nudged
        return answer

    source = SqsEventSource(
        aws.clients, url, first, handlers=[first] * (environments - 1), function_name="runner"
    )
    stop = threading.Event()
    thread = threading.Thread(target=source.run, args=(stop, 600.0))
    thread.start()
    try:
        _send(aws, url, [("g1", "g1-0")])
        source.nudge()
        assert recorder.enough.wait(timeout=30), "waited for the 600 s poll"
    finally:
        stop.set()
        source.nudge()
        thread.join(timeout=60)
    assert not thread.is_alive()
    assert recorder.bodies("g1") == ["g1-0", "g1-1"]
