"""The producer API handler's settings at cold start, and its Lambda entry point."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from lambdas.producer_api import handler as handler_module
from shardlog import constants as C
from shardlog.exceptions import ConfigurationError
from shardlog.function_settings import ProducerApiSettings
from shardlog.local.lambda_context import LambdaContext


def test_settings_come_from_the_stream_name_variable() -> None:
    settings = ProducerApiSettings.from_env({C.ENV_STREAM_NAME: "events"})
    assert settings.stream_name == "events"
    assert settings.max_attempts >= 1 and settings.retry_after_s >= 0


@pytest.mark.parametrize("environ", [{}, {C.ENV_STREAM_NAME: ""}, {C.ENV_STREAM_NAME: "a b"}])
def test_missing_or_bad_stream_name_is_a_clear_error(environ: dict[str, str]) -> None:
    with pytest.raises(ConfigurationError, match=C.ENV_STREAM_NAME):
        ProducerApiSettings.from_env(environ)


@pytest.fixture
def fresh_entry_point() -> Iterator[None]:
    handler_module.handler.reset()
    yield
    handler_module.handler.reset()


def context() -> Any:
    """The local runtime's stand-in for Lambda's context object."""
    return LambdaContext("producer")


def health_event() -> dict[str, Any]:
    return {
        "resource": "/v1/health",
        "path": "/v1/health",
        "httpMethod": "GET",
        "headers": {"Accept": "application/json"},
        "multiValueHeaders": {"Accept": ["application/json"]},
        "queryStringParameters": None,
        "multiValueQueryStringParameters": None,
        "pathParameters": None,
        "stageVariables": None,
        "requestContext": {"requestId": "r-1", "stage": "api", "resourcePath": "/v1/health"},
        "body": None,
        "isBase64Encoded": False,
    }


def test_entry_point_builds_the_handler_once_from_the_environment(
    fresh_entry_point: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(C.ENV_STREAM_NAME, "events")
    first = handler_module.handler(health_event(), context())
    built = handler_module.handler.built
    second = handler_module.handler(health_event(), context())
    assert first["statusCode"] == second["statusCode"] == 200
    assert handler_module.handler.built is built is not None


def test_entry_point_without_settings_fails_before_any_request(
    fresh_entry_point: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(C.ENV_STREAM_NAME, raising=False)
    with pytest.raises(ConfigurationError):
        handler_module.handler(health_event(), context())
