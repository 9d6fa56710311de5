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
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any

from moto.dynamodb.responses import DynamoHandler
from moto.dynamodbstreams.responses import DynamoDBStreamsHandler
from moto.s3.responses import S3Response

_dynamodb_lock = threading.Lock()
_s3_put_lock = threading.Lock()
_applied = False
_apply_lock = threading.Lock()


def serialized(method: Callable[..., Any], lock: threading.Lock) -> Callable[..., Any]:
    @functools.wraps(method)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with lock:
            return method(*args, **kwargs)

    return wrapper


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
        _applied = True
