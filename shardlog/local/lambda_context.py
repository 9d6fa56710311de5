"""The Lambda runtime's side of an in-process call: the context object and the invoker.

moto cannot run Lambda functions (that needs Docker), so the local runtime calls handlers in
this process. ``LambdaContext`` carries the attributes of Lambda's context that handlers and
Powertools read (its remaining time from an injectable clock); ``LocalInvoker`` calls a
function as a synchronous Lambda Invoke would and answers the runner's ``InvokeResult``;
``Environments`` gives concurrent calls (a Lambda consumer group's lanes) what Lambda gives
concurrent invocations: an execution environment each, so a handler's module-level state is
never shared by two calls at once.
Every in-process call of the local runtime (event sources, the HTTP API, custom resources,
Lambda consumer groups) uses these two, and nothing outside the local runtime does.
"""

from __future__ import annotations

import importlib.util
import inspect
import json
import sys
import threading
import traceback
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from shardlog import constants as C
from shardlog.clock import Clock, SystemClock
from shardlog.lambda_consumer.events import InvokeResult


@dataclass
class LambdaContext:
    """The attributes of Lambda's context object that handlers and Powertools read."""

    function_name: str
    aws_request_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    function_version: str = "$LATEST"
    memory_limit_in_mb: int = 512
    region: str = C.DEFAULT_REGION
    timeout_ms: int = 60_000
    clock: Clock = field(default_factory=SystemClock)
    started_ms: int = 0

    def __post_init__(self) -> None:
        self.started_ms = self.clock.now_ms()
        self.invoked_function_arn = (
            f"arn:aws:lambda:{self.region}:000000000000:function:{self.function_name}"
        )
        self.log_group_name = f"/aws/lambda/{self.function_name}"
        self.log_stream_name = f"local/{self.aws_request_id}"

    def get_remaining_time_in_millis(self) -> int:
        return max(0, self.timeout_ms - (self.clock.now_ms() - self.started_ms))


Function = Callable[[dict[str, Any], Any], Any]


class Environments:
    """The execution environments of one function, in this process.

    Lambda runs each invocation in an environment no other invocation uses meanwhile, and
    makes a new one (a cold start: the handler's module loaded again) when all are busy. So
    a handler written for Lambda may keep state at module level, such as Powertools'
    ``BatchProcessor``, which is not safe for two threads at once. Here a module-level
    function gets a fresh copy of its module for each environment beyond the first; any
    other callable (a closure, a callable object: tests and benchmarks) is its own
    environment in every one, safe for threads or not as its author made it."""

    def __init__(self, function: Function) -> None:
        self.function = function
        self._lock = threading.Lock()
        self._free: list[Function] = [function]
        self.cold_starts = 1

    def take(self) -> Function:
        with self._lock:
            if self._free:
                return self._free.pop()
            self.cold_starts += 1
        return self._load_again()

    def give_back(self, function: Function) -> None:
        with self._lock:
            self._free.append(function)

    def _load_again(self) -> Function:
        function = self.function
        module = sys.modules.get(getattr(function, "__module__", "") or "")
        name = getattr(function, "__name__", "")
        spec = getattr(module, "__spec__", None)
        if (
            not inspect.isfunction(function)
            or getattr(module, name, None) is not function
            or spec is None
            or spec.loader is None
        ):
            return function  # not a module's own function: nothing to load again
        copy = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(copy)  # the module's init code, as a cold start runs it
        loaded: Function = getattr(copy, name)
        return loaded


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
        self.environments = Environments(function)
        self.function_name = function_name
        self.region = region
        # Told of each call: the local runtime records the Lambda Invoke it stands for.
        self.on_invoke = on_invoke

    def invoke(self, event: dict[str, Any], timeout_ms: int) -> InvokeResult:
        if self.on_invoke is not None:
            self.on_invoke()

        outcome: dict[str, InvokeResult] = {}
        context = LambdaContext(self.function_name, region=self.region, timeout_ms=timeout_ms)
        request_id = context.aws_request_id

        function = self.environments.take()

        def call() -> None:
            try:
                result = function(event, context)
                outcome["result"] = InvokeResult(None, json.dumps(result).encode())
            except (TypeError, ValueError) as exc:
                if "result" not in outcome and "is not JSON serializable" in str(exc):
                    outcome["result"] = _error("Runtime.MarshalError", exc)
                else:
                    outcome["result"] = _error("Unhandled", exc)
            except Exception as exc:
                outcome["result"] = _error("Unhandled", exc)
            finally:  # a call past its timeout keeps its environment until it ends
                self.environments.give_back(function)

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
