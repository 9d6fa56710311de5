"""Calling the group's function: a real Lambda Invoke (``LambdaInvoker``).

Every ``Invoker`` answers an ``InvokeResult`` the runner interprets the same way; the local
runtime's in-process one (shardlog/local/lambda_context.py, ``LocalInvoker``) too, so it
exercises the runner's own code. A Lambda invocation is synchronous (RequestResponse) and
never retried by the SDK: the runner decides about retries, with its retry state fenced
in the consumers table.
"""

from __future__ import annotations

import json
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
