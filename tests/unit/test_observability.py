"""One observability module for the handlers, and one quiet Powertools for local runs."""

from __future__ import annotations

import importlib
from typing import Any

import pytest

from lambdas import observability
from shardlog import constants as C
from shardlog.local.lambda_context import LambdaContext
from shardlog.local.quiet import QUIET_POWERTOOLS_ENV, quiet_powertools

HANDLERS = [
    "lambdas.ingest.handler",
    "lambdas.shard_sync.handler",
    "lambdas.spark_trigger.handler",
    "lambdas.producer_api.handler",
    "lambdas.lambda_consumer.handler",
    "lambdas.consumer_waker.handler",
]


@pytest.mark.parametrize("module", HANDLERS)
def test_handlers_log_measure_and_trace_through_the_one_module(module: str) -> None:
    handler = importlib.import_module(module)
    for name in ("logger", "metrics"):
        if hasattr(handler, name):
            assert getattr(handler, name) is getattr(observability, name), (module, name)
    assert not any(
        type(value).__name__ in ("Logger", "Metrics", "Tracer")
        and value not in (observability.logger, observability.metrics, observability.tracer)
        for value in vars(handler).values()
    ), f"{module} builds its own Powertools object"


def test_names_come_from_the_shared_constants() -> None:
    assert observability.logger.service == C.POWERTOOLS_SERVICE_NAME
    assert observability.metrics.namespace == C.METRICS_NAMESPACE
    assert observability.metrics.service == C.POWERTOOLS_SERVICE_NAME


def test_instrumented_starts_every_invocation_with_an_empty_metric_set() -> None:
    seen: list[set[str]] = []

    def handle(event: dict[str, Any], context: Any) -> dict[str, Any]:
        seen.append(set(observability.metrics.metric_set))
        observability.metrics.add_metric("Probe", "Count", 1)
        return {"ok": True}

    run = observability.instrumented(handle)
    assert run({}, LambdaContext("probe")) == {"ok": True}
    assert run({}, LambdaContext("probe")) == {"ok": True}
    assert seen == [set(), set()]


def test_quiet_powertools_sets_what_is_unset_and_keeps_the_rest() -> None:
    environ = {C.ENV_POWERTOOLS_LOG_LEVEL: "DEBUG"}
    quiet_powertools(environ)
    assert environ == {
        C.ENV_POWERTOOLS_LOG_LEVEL: "DEBUG",  # the user's choice wins
        C.ENV_POWERTOOLS_METRICS_DISABLED: "true",
        C.ENV_POWERTOOLS_TRACE_DISABLED: "true",
    }
    assert QUIET_POWERTOOLS_ENV[C.ENV_POWERTOOLS_LOG_LEVEL] == "WARNING"


def test_every_local_entry_point_uses_the_one_helper() -> None:
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    for path in ("shardlog/local/runtime.py", "tests/conftest.py", "bench/common.py"):
        text = (root / path).read_text()
        assert "quiet_powertools()" in text, path
        assert C.ENV_POWERTOOLS_METRICS_DISABLED not in text, f"{path} copies the variables"
