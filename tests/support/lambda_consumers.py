"""Lambda consumer tests: a recording function, a bounded driver of the local groups, a
runner of one's own (another process), its death, and a peek into queues."""

from __future__ import annotations

import base64
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from shardlog.clock import Clock, ManualClock
from shardlog.lambda_consumer.registration import register
from shardlog.lambda_consumer.runner import Runner
from shardlog.lambda_consumer.settings import LambdaConsumerSettings, RunnerSettings
from shardlog.lambda_consumer.wake import WakeSender, scope_tag, wake_queue_name
from shardlog.local.lambda_consumers import LocalLambdaConsumers
from shardlog.local.lambda_context import LocalInvoker
from tests.support.aws import AwsEnv


class RunnerKilled(BaseException):
    """The runner's process dies (not an Exception: nothing in it may catch this)."""


@dataclass(frozen=True)
class Seen:
    partition_id: str
    seq: int
    key: str
    data: bytes


@dataclass
class Recorder:
    """A function ``f(event, context)`` that records each invocation's records; ``answer``
    decides its result from the batch (raise to fail it)."""

    answer: Callable[[list[Seen]], Any] = lambda _batch: {"batchItemFailures": []}
    calls: list[list[Seen]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, event: dict[str, Any], context: Any) -> Any:
        batch = [
            Seen(
                r["eventID"].rsplit(":", 1)[0],
                int(r["kinesis"]["sequenceNumber"]),
                r["kinesis"]["partitionKey"],
                base64.b64decode(r["kinesis"]["data"]),
            )
            for r in event["Records"]
        ]
        with self.lock:
            self.calls.append(batch)
        return self.answer(batch)

    def seqs(self, partition_id: str) -> list[int]:
        return [s.seq for batch in self.calls for s in batch if s.partition_id == partition_id]

    def data(self) -> list[bytes]:
        return [s.data for batch in self.calls for s in batch]


def drive(consumers: LocalLambdaConsumers, clock: ManualClock, max_steps: int = 200) -> int:
    """Poll every source until three steps in a row do nothing (bounded); the steps taken.
    The clock moves 100 ms a step, so lease expiries and the sweep come when due."""
    quiet = 0
    for step in range(max_steps):
        quiet = quiet + 1 if consumers.poll_once() == 0 else 0
        clock.advance(100)
        if quiet >= 3:
            return step
    raise AssertionError(f"still busy after {max_steps} steps")


def received(aws: AwsEnv, queue_url: str) -> list[str]:
    """Every message body now in a queue (received once, then left to reappear)."""
    sqs = aws.clients.client("sqs")
    bodies: list[str] = []
    for _ in range(100):
        response = sqs.receive_message(
            QueueUrl=queue_url, MaxNumberOfMessages=10, VisibilityTimeout=600
        )
        messages = response.get("Messages", [])
        if not messages:
            return bodies
        bodies += [m["Body"] for m in messages]
    return bodies


def runner_for(
    aws: AwsEnv,
    clock: Clock,
    recorder: Recorder,
    group: str = "billing",
    *,
    register_group: bool = True,
    **settings: Any,
) -> tuple[Runner, str]:
    """A runner (another "process": its own clients) and its group's wake queue URL, with an
    SQS on-failure queue; the function is called in-process. The group is registered first
    (as at deploy), unless ``register_group`` is false."""
    sqs = aws.clients.client("sqs")
    # Queues of this test's deployment only: moto's state is shared by the tests of a process.
    scope = aws.config.stream_name
    wake_url = sqs.create_queue(
        QueueName=wake_queue_name(group, scope), Attributes={"FifoQueue": "true"}
    )["QueueUrl"]
    failure_url = sqs.create_queue(QueueName=f"failures-{group}-{scope_tag(scope)}")["QueueUrl"]
    failure_arn = sqs.get_queue_attributes(QueueUrl=failure_url, AttributeNames=["QueueArn"])[
        "Attributes"
    ]["QueueArn"]
    consumer = LambdaConsumerSettings(
        group=group, function_name="recorder", on_failure_destination=failure_arn, **settings
    )
    runner_settings = RunnerSettings(
        consumer=consumer,
        bucket=aws.config.bucket,
        tables=aws.config.tables,
        wake_queue_url=wake_url,
        event_source_arn="arn:aws:kinesis:us-east-1:123456789012:stream/test",
    )
    clients = aws.fresh_clients()
    if register_group:  # what deploy does before any wake
        register(
            clients,
            group,
            consumer.start_position(),
            bucket=aws.config.bucket,
            names=aws.config.tables,
            now_ms=clock.now_ms(),
        )
    invoker = LocalInvoker(recorder, "recorder", clients.region)
    wakes = WakeSender(clients, {group: wake_url})
    return Runner(clients, runner_settings, invoker, wakes, clock=clock), wake_url


def plenty_of_time() -> int:
    return 900_000
