"""Calling the group's function: a real Lambda Invoke on AWS, an in-process call locally.

Both answer an ``InvokeResult`` the runner interprets the same way, so the local runtime
exercises the runner's own code. A Lambda invocation is synchronous (RequestResponse) and
never retried by the SDK: the runner decides about retries, with its retry state fenced
in the consumers table.
"""

from __future__ import annotations

import json
import threading
import traceback
import uuid
from collections.abc import Callable
from dataclasses import dataclass
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


@dataclass
class LocalContext:
    """The attributes of Lambda's context object that handlers and Powertools read."""

    function_name: str
    timeout_ms: int
    started_at: float
    aws_request_id: str
    region: str

    @property
    def invoked_function_arn(self) -> str:
        return f"arn:aws:lambda:{self.region}:000000000000:function:{self.function_name}"

    @property
    def function_version(self) -> str:
        return "$LATEST"

    @property
    def memory_limit_in_mb(self) -> int:
        return 128

    @property
    def log_group_name(self) -> str:
        return f"/aws/lambda/{self.function_name}"

    @property
    def log_stream_name(self) -> str:
        return f"local/{self.aws_request_id}"

    def get_remaining_time_in_millis(self) -> int:
        import time

        return max(0, self.timeout_ms - int((time.monotonic() - self.started_at) * 1000))


class LocalInvoker:
    """Calls a Python function ``f(event, context)`` in this process, as Lambda would:
    an exception is ``FunctionError: Unhandled`` with Lambda's error payload, a result that
    is not JSON-serialisable fails, and a call still running after the function's timeout
    is ``Task timed out`` (its thread is left to finish: Python cannot stop it)."""

    def __init__(
        self,
        function: Callable[[dict[str, Any], Any], Any],
        function_name: str,
        region: str,
        on_invoke: Callable[[], None] | None = None,
    ) -> None:
        self.function = function
        self.function_name = function_name
        self.region = region
        # Told of each call: the local runtime records the Lambda Invoke it stands for.
        self.on_invoke = on_invoke

    def invoke(self, event: dict[str, Any], timeout_ms: int) -> InvokeResult:
        import time

        if self.on_invoke is not None:
            self.on_invoke()

        outcome: dict[str, InvokeResult] = {}
        request_id = str(uuid.uuid4())
        context = LocalContext(
            self.function_name, timeout_ms, time.monotonic(), request_id, self.region
        )

        def call() -> None:
            try:
                result = self.function(event, context)
                outcome["result"] = InvokeResult(None, json.dumps(result).encode())
            except (TypeError, ValueError) as exc:
                if "result" not in outcome and "is not JSON serializable" in str(exc):
                    outcome["result"] = _error("Runtime.MarshalError", exc)
                else:
                    outcome["result"] = _error("Unhandled", exc)
            except Exception as exc:
                outcome["result"] = _error("Unhandled", exc)

        thread = threading.Thread(target=call, name=f"lambda-{self.function_name}", daemon=True)
        thread.start()
        thread.join(timeout_ms / 1000)
        if thread.is_alive() or "result" not in outcome:
            message = {
                "errorMessage": f"{request_id} Task timed out after {timeout_ms / 1000:.2f} seconds"
            }
            return InvokeResult("Unhandled", json.dumps(message).encode())
        return outcome["result"]


def _error(kind: str, exc: BaseException) -> InvokeResult:
    body = {
        "errorMessage": str(exc),
        "errorType": type(exc).__name__,
        "stackTrace": traceback.format_exception(exc)[-3:],
    }
    return InvokeResult(kind, json.dumps(body).encode())
