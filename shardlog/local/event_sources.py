"""Lambda event sources the embedded AWS cannot run (moto has no Lambda without Docker):
an SQS queue and a DynamoDB stream, each calling a handler in-process with Lambda's event
shape and the semantics shardlog relies on.

- ``SqsEventSource``: receive up to ``batch_size`` messages, invoke, delete what
  succeeded (honouring ``batchItemFailures`` by messageId); a failure leaves its message
  to reappear after the visibility timeout, as Lambda does. On a FIFO queue, SQS itself
  keeps one message group in flight at a time. Given more than one handler (``handlers``:
  one per execution environment, as Lambda keeps them), ``run`` invokes up to that many at
  once, each on messages of one message group, in their order: Lambda's event source for a
  FIFO queue scales out to the queue's active message groups the same way, while each group
  stays in order (a failed message holds back the rest of its group's received messages,
  which reappear with it). Lambda long-polls a queue, so a message is taken as soon as it is
  sent; here ``nudge()`` (the local waker calls it after sending wakes) ends ``run``'s wait
  between receives at once, and so does a finished invocation, so a wake sent in this
  process waits for no poll interval, and ``run`` polls only every ``idle_sleep_s``
  otherwise (wakes sent by another process).
- ``DynamoDbStreamSource``: read every shard of a table's stream from LATEST (as a new
  event source mapping does) and invoke with the records, in order; a failed batch is
  retried until it succeeds (Lambda's default for streams).

``poll_once`` does one step, so tests drive them deterministically; ``run`` loops.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Any

from shardlog import constants as C
from shardlog.aws import Clients
from shardlog.clock import Clock, SystemClock
from shardlog.local.lambda_context import LambdaContext

logger = logging.getLogger("shardlog.local")
Handler = Callable[[dict[str, Any], Any], Any]


class SqsEventSource:
    def __init__(
        self,
        clients: Clients,
        queue_url: str,
        handler: Handler,
        *,
        function_name: str,
        batch_size: int = 1,
        visibility_timeout_s: int = 60,
        timeout_ms: int = 900_000,
        clock: Clock | None = None,
        handlers: Sequence[Handler] = (),
    ) -> None:
        """``handlers``: more execution environments beside ``handler`` (``run`` invokes up to
        ``1 + len(handlers)`` at once, one message group each; ``poll_once`` uses
        ``handler``)."""
        self.sqs = clients.client("sqs")
        self.queue_url = queue_url
        self.queue_arn = self.sqs.get_queue_attributes(
            QueueUrl=queue_url, AttributeNames=["QueueArn"]
        )["Attributes"]["QueueArn"]
        self.handler = handler
        self.function_name = function_name
        self.batch_size = batch_size
        self.visibility_timeout_s = visibility_timeout_s
        self.timeout_ms = timeout_ms
        self.region = clients.region
        self.clock = clock or SystemClock()
        self.concurrency = 1 + len(handlers)
        self._more_handlers = list(handlers)
        self._environments: queue.SimpleQueue[Handler] = queue.SimpleQueue()
        self._nudged = threading.Event()  # a message was sent, or an invocation finished
        self._counts = threading.Lock()
        self.invocations = 0
        self.failures = 0

    def nudge(self) -> None:
        """A message was just sent to the queue: ``run`` receives now, not at its next poll."""
        self._nudged.set()

    def _idle(self, stop: threading.Event, seconds: float) -> None:
        """Wait until nudged, stopped (checked within ``seconds``) or ``seconds`` passed."""
        if not stop.is_set() and self._nudged.wait(seconds):
            self._nudged.clear()

    def wrap(self, wrapper: Callable[[Handler], Handler]) -> None:
        """Wrap every execution environment's handler (a benchmark's timing); before ``run``."""
        self.handler = wrapper(self.handler)
        self._more_handlers = [wrapper(h) for h in self._more_handlers]

    def poll_once(self) -> int:
        """One receive and one invocation. Returns the messages it got."""
        messages = self._receive(self.batch_size)
        if messages:
            self._invoke(self.handler, messages)
        return len(messages)

    def _receive(self, count: int) -> list[dict[str, Any]]:
        response = self.sqs.receive_message(
            QueueUrl=self.queue_url,
            MaxNumberOfMessages=count,
            VisibilityTimeout=self.visibility_timeout_s,
            AttributeNames=["All"],
            WaitTimeSeconds=0,
        )
        return list(response.get("Messages", []))

    def _invoke(self, handler: Handler, messages: list[dict[str, Any]]) -> bool:
        """One invocation; deletes what succeeded. True when every message did."""
        event = {"Records": [self._record(m) for m in messages]}
        context = LambdaContext(
            self.function_name, region=self.region, timeout_ms=self.timeout_ms, clock=self.clock
        )
        with self._counts:
            self.invocations += 1
        try:
            answer = handler(event, context) or {}
            failed = {f.get("itemIdentifier") for f in answer.get("batchItemFailures") or []}
        except Exception:
            logger.exception("%s failed; its messages will be received again", self.function_name)
            failed = {m["MessageId"] for m in messages}
        if failed:
            with self._counts:
                self.failures += 1
        done = [m for m in messages if m["MessageId"] not in failed]
        if done:
            self.sqs.delete_message_batch(
                QueueUrl=self.queue_url,
                Entries=[
                    {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(done)
                ],
            )
        return not failed

    def _invoke_group(self, messages: list[dict[str, Any]]) -> None:
        """One message group's received messages, ``batch_size`` per invocation, in order, in
        an execution environment of the pool; the first failure holds back the rest (not
        deleted, they reappear after the visibility timeout, behind the failed one)."""
        handler = self._environments.get()
        try:
            for start in range(0, len(messages), self.batch_size):
                if not self._invoke(handler, messages[start : start + self.batch_size]):
                    return
        finally:
            self._environments.put(handler)

    def _record(self, message: dict[str, Any]) -> dict[str, Any]:
        return {
            "messageId": message["MessageId"],
            "receiptHandle": message["ReceiptHandle"],
            "body": message["Body"],
            "attributes": message.get("Attributes", {}),
            "messageAttributes": {},
            "md5OfBody": message.get("MD5OfBody", ""),
            "eventSource": "aws:sqs",
            "eventSourceARN": self.queue_arn,
            "awsRegion": self.region,
        }

    def drain(self, max_polls: int = 1_000) -> int:
        """Poll until a receive comes back empty (bounded); the messages handled."""
        total = 0
        for _ in range(max_polls):
            got = self.poll_once()
            if not got:
                return total
            total += got
        return total

    def run(self, stop: threading.Event, idle_sleep_s: float = 0.05) -> None:
        if self.concurrency == 1:
            while not stop.is_set():
                if self.poll_once() == 0:
                    self._idle(stop, idle_sleep_s)
            return
        for environment in (self.handler, *self._more_handlers):
            self._environments.put(environment)
        with ThreadPoolExecutor(self.concurrency, thread_name_prefix=self.function_name) as pool:
            running: set[Future[None]] = set()
            while not stop.is_set():
                running = {f for f in running if not f.done()}
                free = self.concurrency - len(running)
                # At most one message group per free environment: SQS returns no message of
                # a group with one in flight, so a group never runs in two at once.
                messages = self._receive(min(free, MAX_RECEIVE)) if free else []
                for group in _by_message_group(messages):  # at most `free` groups
                    future = pool.submit(self._invoke_group, group)
                    future.add_done_callback(lambda _done: self._nudged.set())
                    running.add(future)
                if messages and len(running) < self.concurrency:
                    continue
                self._idle(stop, idle_sleep_s)  # a finished invocation nudges too
            wait(running)


MAX_RECEIVE = 10  # SQS's most messages per ReceiveMessage


def _by_message_group(messages: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Received messages by message group, each group's in the order SQS gave them (a
    standard queue's message is a group of its own)."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for message in messages:
        key = message.get("Attributes", {}).get("MessageGroupId") or message["MessageId"]
        groups.setdefault(key, []).append(message)
    return list(groups.values())


class DynamoDbStreamSource:
    def __init__(
        self,
        clients: Clients,
        stream_arn: str,
        handler: Handler,
        *,
        function_name: str,
        batch_size: int = 100,
        clock: Clock | None = None,
    ) -> None:
        self.streams = clients.client("dynamodbstreams")
        self.stream_arn = stream_arn
        self.handler = handler
        self.function_name = function_name
        self.batch_size = batch_size
        self.region = clients.region
        self.clock = clock or SystemClock()
        self._iterators: dict[str, str | None] = {}
        self._pending: dict[str, list[dict[str, Any]]] = {}
        self.invocations = 0
        self.failures = 0

    def start(self) -> DynamoDbStreamSource:
        """Open iterators at LATEST: only changes from now on are delivered."""
        self._discover()
        return self

    def _discover(self) -> None:
        description = self.streams.describe_stream(StreamArn=self.stream_arn)["StreamDescription"]
        for shard in description["Shards"]:
            if shard["ShardId"] not in self._iterators:
                self._iterators[shard["ShardId"]] = self.streams.get_shard_iterator(
                    StreamArn=self.stream_arn,
                    ShardId=shard["ShardId"],
                    ShardIteratorType=C.WAKER_STARTING_POSITION,
                )["ShardIterator"]

    def poll_once(self) -> int:
        """Read each shard once and invoke with what arrived. Returns records delivered."""
        delivered = 0
        for shard_id, iterator in list(self._iterators.items()):
            pending = self._pending.setdefault(shard_id, [])
            if iterator is not None and len(pending) < self.batch_size:
                response = self.streams.get_records(ShardIterator=iterator, Limit=self.batch_size)
                pending += [self._record(r) for r in response.get("Records", [])]
                self._iterators[shard_id] = response.get("NextShardIterator")
            if not pending:
                continue
            batch = pending[: self.batch_size]
            context = LambdaContext(self.function_name, region=self.region, clock=self.clock)
            self.invocations += 1
            try:
                self.handler({"Records": batch}, context)
            except Exception:
                self.failures += 1
                logger.exception("%s failed; the batch will be retried", self.function_name)
                continue
            del pending[: len(batch)]
            delivered += len(batch)
        return delivered

    def _record(self, record: dict[str, Any]) -> dict[str, Any]:
        dynamodb = dict(record["dynamodb"])
        created = dynamodb.get("ApproximateCreationDateTime")
        if created is not None and not isinstance(created, int | float):
            dynamodb["ApproximateCreationDateTime"] = created.timestamp()
        return {
            "eventID": record["eventID"],
            "eventName": record["eventName"],
            "eventVersion": record.get("eventVersion", "1.1"),
            "eventSource": "aws:dynamodb",
            "awsRegion": self.region,
            "dynamodb": dynamodb,
            "eventSourceARN": self.stream_arn,
        }

    def run(self, stop: threading.Event, idle_sleep_s: float = 0.05) -> None:
        while not stop.is_set():
            if self.poll_once() == 0:
                stop.wait(idle_sleep_s)
