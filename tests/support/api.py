"""The producer API served over HTTP on 127.0.0.1 against the embedded AWS, and a raw HTTP
client that sends exactly the bytes and headers a test wants."""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from lambdas.producer_api.handler import create_handler
from shardlog.aws import Clients, RequestCounter
from shardlog.clock import ManualClock
from shardlog.function_settings import ProducerApiSettings
from shardlog.local.http_api import LocalApiServer
from shardlog.producer import Producer
from tests.support.aws import AwsEnv


@dataclass
class HttpAnswer:
    status: int
    headers: dict[str, str]
    body: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.body)

    def header(self, name: str) -> str | None:
        return next((v for k, v in self.headers.items() if k.lower() == name.lower()), None)


def send(
    url: str,
    method: str,
    path: str,
    body: bytes | str | None = None,
    headers: dict[str, str] | None = None,
) -> HttpAnswer:
    """One request with exactly these headers (plus Host and Content-Length)."""
    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=60)
    try:
        payload = body.encode() if isinstance(body, str) else body
        connection.request(method, path, body=payload, headers=headers or {})
        response = connection.getresponse()
        return HttpAnswer(response.status, dict(response.getheaders()), response.read())
    finally:
        connection.close()


def post_json(url: str, document: Any, content_type: str = "application/json") -> HttpAnswer:
    body = document if isinstance(document, bytes | str) else json.dumps(document)
    return send(url, "POST", "/v1/records", body, {"Content-Type": content_type})


@dataclass
class ApiUnderTest:
    url: str
    aws: AwsEnv
    clock: ManualClock
    requests: RequestCounter  # every AWS request the handler sent
    server: LocalApiServer = field(repr=False)

    @property
    def kinesis_puts(self) -> int:
        counts = self.requests.snapshot()
        return counts["kinesis.PutRecords"] + counts["kinesis.PutRecord"]


def serve(
    aws: AwsEnv,
    clock: ManualClock,
    producer_class: type[Producer] | None = None,
    serve_docs: bool = False,
    settings: dict[str, Any] | None = None,
    clients: Clients | None = None,
    **producer_kwargs: Any,
) -> Iterator[ApiUnderTest]:
    """The handler on 127.0.0.1; its AWS clients are ``clients`` (e.g. through a proxy) or
    fresh ones, and its Producer a ``producer_class`` (tests/support/faults.py) if given."""
    clients = clients or aws.fresh_clients()
    requests = RequestCounter().attach(clients)
    api_settings = ProducerApiSettings(stream_name=aws.config.stream_name, **(settings or {}))
    producer = None
    if producer_class is not None:
        producer = producer_class(
            api_settings.stream_name,
            clients,
            max_attempts=api_settings.max_attempts,
            base_backoff_s=api_settings.base_backoff_ms / 1000,
            max_backoff_s=api_settings.max_backoff_ms / 1000,
            clock=clock,
            **producer_kwargs,
        )
    handle = create_handler(api_settings, clients, clock, producer=producer, serve_docs=serve_docs)
    with LocalApiServer(handle) as server:
        yield ApiUnderTest(server.url, aws, clock, requests, server)
