"""Calling the group's function: a real Lambda Invoke (``LambdaInvoker``), and up to a
parallelization factor of them in flight at once (``InFlight``).

Every ``Invoker`` answers an ``InvokeResult`` the runner interprets the same way; the local
runtime's in-process one (shardlog/local/lambda_context.py, ``LocalInvoker``) too, so it
exercises the runner's own code. A Lambda invocation is synchronous (RequestResponse) and
never retried by the SDK: the runner decides about retries, with its retry state fenced
in the consumers table.
"""

from __future__ import annotations

import json
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Any, Protocol

from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from shardlog.aws import Clients
from shardlog.exceptions import aws_error_code
from shardlog.lambda_consumer.events import InvokeResult


class Invoker(Protocol):
    def invoke(self, event: dict[str, Any], timeout_ms: int) -> InvokeResult: ...


class LambdaInvoker:
    """``lambda:InvokeFunction`` with RequestResponse. Service-side failures (throttling,
    the function missing, a timeout of the call) are whole-batch failures too."""

    def __init__(self, clients: Clients, function_name: str, function_timeout_ms: int) -> None:
        self.function_name = function_name
        read_timeout_s = function_timeout_ms / 1000 + 30
        self._client = clients.session.client(
            "lambda",
            endpoint_url=clients.endpoint_url,
            region_name=clients.region,
            config=Config(
                retries={"max_attempts": 1, "mode": "standard"},
                read_timeout=read_timeout_s,
                connect_timeout=5,
            ),
        )

    def invoke(self, event: dict[str, Any], timeout_ms: int) -> InvokeResult:
        try:
            response = self._client.invoke(
                FunctionName=self.function_name,
                InvocationType="RequestResponse",
                Payload=json.dumps(event).encode(),
            )
        except ClientError as exc:
            code = aws_error_code(exc) or "ClientError"
            return InvokeResult(f"Invoke.{code}", str(exc).encode(), 500)
        except BotoCoreError as exc:  # connection lost, read timeout: the outcome is unknown
            return InvokeResult(f"Invoke.{type(exc).__name__}", str(exc).encode(), 500)
        return InvokeResult(
            response.get("FunctionError"), response["Payload"].read(), response["StatusCode"]
        )


class InFlight:
    """The invocations of one delivery session in flight: up to ``factor`` at once, each
    from a thread of its own (the Invoker is called from several threads at once: a boto3
    client is safe for that, and holds 10 connections, Lambda's maximum factor); at
    factor 1, in the caller's thread, as before lanes. Answers are taken in the caller's
    thread only, so every write stays with the one thread that holds the lease."""

    def __init__(self, invoker: Invoker, factor: int) -> None:
        self.invoker = invoker
        self._pool = ThreadPoolExecutor(factor, "lane") if factor > 1 else None
        self._answered: list[tuple[Any, InvokeResult]] = []
        self._running: dict[Future[InvokeResult], Any] = {}

    def start(self, tag: Any, event: dict[str, Any], timeout_ms: int) -> None:
        """Invoke with ``event``; its answer comes back with ``tag`` from ``answers``."""
        if self._pool is None:
            self._answered.append((tag, self.invoker.invoke(event, timeout_ms)))
        else:
            self._running[self._pool.submit(self.invoker.invoke, event, timeout_ms)] = tag

    def __len__(self) -> int:
        return len(self._answered) + len(self._running)

    def answers(self, wait_s: float | None = 0) -> list[tuple[Any, InvokeResult]]:
        """The answers in, waiting up to ``wait_s`` (None: for ever) for a first one when
        none is in."""
        if self._running and not self._answered:
            finished, _ = wait(self._running, timeout=wait_s, return_when=FIRST_COMPLETED)
            for future in finished:
                self._answered.append((self._running.pop(future), future.result()))
        answered, self._answered = self._answered, []
        return answered

    def __enter__(self) -> InFlight:
        return self

    def __exit__(self, *_: object) -> None:
        """Leaving (done, stopped, or the lease lost): every invocation started has ended,
        so none runs on behind the runner (the invoker's own timeout bounds the wait)."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
