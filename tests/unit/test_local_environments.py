"""The local runtime's execution environments: concurrent in-process calls of a handler
never share its module's state (as Lambda's concurrent invocations never do)."""

from __future__ import annotations

import threading
from typing import Any

from shardlog.format import LogRecord
from shardlog.lambda_consumer.events import kinesis_event
from shardlog.local.lambda_context import Environments, LocalInvoker
from tests.support import powertools_consumer, powertools_sink


def test_a_module_function_gets_a_module_of_its_own_in_each_environment() -> None:
    environments = Environments(powertools_consumer.handler)
    first, second = environments.take(), environments.take()
    assert first is powertools_consumer.handler
    assert second is not first and second.__name__ == "handler"
    copy: dict[str, Any] = second.__globals__  # type: ignore[attr-defined]
    assert copy["processor"] is not powertools_consumer.processor  # its init code ran again
    environments.give_back(second)
    assert environments.take() is second  # a free environment is used again: no cold start
    assert environments.cold_starts == 2


def test_a_callable_object_or_a_closure_is_one_environment_shared() -> None:
    def closure(event: dict[str, Any], context: Any) -> Any:
        return None

    for function in (closure, lambda event, context: None):
        environments = Environments(function)
        assert environments.take() is function and environments.take() is function


def test_concurrent_calls_each_run_in_an_environment_no_other_call_uses_meanwhile() -> None:
    both_in = threading.Barrier(2, timeout=10)
    used: list[object] = []

    invoker = LocalInvoker(powertools_consumer.handler, "f", "us-east-1")
    environments = invoker.environments

    def hold_two() -> None:
        taken = [environments.take(), environments.take()]
        used.extend(taken)
        both_in.wait()
        for function in taken:
            environments.give_back(function)

    thread = threading.Thread(target=hold_two)
    thread.start()
    both_in.wait()
    thread.join(10)
    assert len({id(f) for f in used}) == 2
    event = kinesis_event(
        [LogRecord("p", 0, "k", b"data", "1", 1_000)],
        event_source_arn="arn:aws:kinesis:us-east-1:123456789012:stream/s",
        region="us-east-1",
        invoke_identity_arn="test",
    )
    powertools_sink.reset()
    result = invoker.invoke(event, 5_000)  # an environment is free again: no cold start
    assert result.function_error is None and environments.cold_starts == 2
    assert powertools_sink.processed == [b"data"]
