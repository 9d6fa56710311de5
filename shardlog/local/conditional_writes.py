"""Make moto's conditional writes atomic under its threaded server.

DynamoDB evaluates a ConditionExpression and applies the write as one atomic
step, and S3 does the same for ``If-None-Match: *``. moto checks and writes in
separate steps, and its server handles requests on many threads, so two
concurrent conditional writes can both succeed (seen: two lease acquisitions
winning at once). shardlog's safety rests on exactly that atomicity, so
``apply()`` serializes each DynamoDB request and each S3 PutObject in the
in-process server. Throughput is bounded by one Python process anyway.
DynamoDB Streams requests take the same lock, so a stream reader never sees a
transaction half done (``transactions`` undoes a cancelled one in place).
SQS's receive, send and delete take a lock of their own: a FIFO queue's receive reads and
marks the message groups in flight while another thread's delete removes one (moto iterates
a set the other call changes); a receive that long-polls is left unlocked, as it waits for
a send.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

from moto.dynamodb.responses import DynamoHandler
from moto.dynamodbstreams.responses import DynamoDBStreamsHandler
from moto.s3.responses import S3Response
from moto.sqs.models import SQSBackend

_dynamodb_lock = threading.Lock()
_s3_put_lock = threading.Lock()
_sqs_lock = threading.RLock()  # a batch send calls send_message per entry
_applied = False
_apply_lock = threading.Lock()


def serialized(method: Callable[..., Any], lock: AbstractContextManager[Any]) -> Callable[..., Any]:
    @functools.wraps(method)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with lock:
            return method(*args, **kwargs)

    return wrapper


def _short_receive(method: Callable[..., Any]) -> Callable[..., Any]:
    locked = serialized(method, _sqs_lock)

    @functools.wraps(method)
    def receive(
        self: Any, queue_name: str, count: int, wait_seconds_timeout: int, *a: Any, **k: Any
    ) -> Any:
        if wait_seconds_timeout:
            return method(self, queue_name, count, wait_seconds_timeout, *a, **k)
        return locked(self, queue_name, count, wait_seconds_timeout, *a, **k)

    return receive


def apply() -> None:
    """Install the locks (idempotent). Call before the moto server takes requests."""
    global _applied
    with _apply_lock:
        if _applied:
            return
        DynamoHandler.call_action = serialized(DynamoHandler.call_action, _dynamodb_lock)  # type: ignore[method-assign]
        DynamoDBStreamsHandler.call_action = serialized(  # type: ignore[method-assign]
            DynamoDBStreamsHandler.call_action, _dynamodb_lock
        )
        S3Response.put_object = serialized(S3Response.put_object, _s3_put_lock)  # type: ignore[method-assign]
        SQSBackend.receive_message = _short_receive(SQSBackend.receive_message)  # type: ignore[method-assign]
        SQSBackend.send_message = serialized(SQSBackend.send_message, _sqs_lock)  # type: ignore[method-assign]
        SQSBackend.delete_message = serialized(SQSBackend.delete_message, _sqs_lock)  # type: ignore[method-assign]
        _applied = True
