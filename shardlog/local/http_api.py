"""The producer API over real HTTP on 127.0.0.1: each request becomes an API Gateway REST
proxy event for the Lambda handler, called in-process, and its proxy response goes back.

What API Gateway does in front of the function is done here too, as far as a local
server needs: the 10 MiB payload limit, a request id, the stage, the caller's address.
IAM auth is not: on loopback requests are unsigned. One function instance answers at a
time (the handler, like a Lambda sandbox, holds one request's state), while connections
are read and written in parallel threads.
"""

from __future__ import annotations

import base64
import json
import logging
import threading
import uuid
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from shardlog import constants as C
from shardlog.clock import SystemClock
from shardlog.local.lambda_context import LambdaContext
from shardlog.local.ports import PRODUCER_API, listening
from shardlog.loopback_server import LOOPBACK_HOSTS, LoopbackServer

logger = logging.getLogger(__name__)

ProxyHandler = Callable[[dict[str, Any], Any], dict[str, Any]]

API_GATEWAY_MAX_PAYLOAD_BYTES = 10 * C.MIB
_MAX_DRAIN_BYTES = 64 * C.MIB  # past this, a refused body is not even read to the end
FUNCTION_NAME = "shardlog-producer-api-local"
STAGE = "local"


def to_proxy_event(
    method: str,
    target: str,
    headers: list[tuple[str, str]],
    body: bytes,
    *,
    source_ip: str = "127.0.0.1",
    host: str = "127.0.0.1",
    now_ms: int | None = None,
) -> dict[str, Any]:
    """An API Gateway REST (v1) proxy event for one HTTP request."""
    url = urlsplit(target)
    path = unquote(url.path) or "/"
    multi_headers: dict[str, list[str]] = {}
    for name, value in headers:
        multi_headers.setdefault(name, []).append(value)
    multi_query: dict[str, list[str]] = {}
    for name, value in parse_qsl(url.query, keep_blank_values=True):
        multi_query.setdefault(name, []).append(value)
    try:
        text: str | None = body.decode("utf-8") if body else None
        is_base64 = False
    except UnicodeDecodeError:
        text, is_base64 = base64.b64encode(body).decode("ascii"), True
    request_time_ms = SystemClock().now_ms() if now_ms is None else now_ms
    request_id = str(uuid.uuid4())
    user_agent = next((v for k, v in headers if k.lower() == "user-agent"), None)
    return {
        "resource": path,
        "path": path,
        "httpMethod": method,
        "headers": {name: values[-1] for name, values in multi_headers.items()} or None,
        "multiValueHeaders": multi_headers or None,
        "queryStringParameters": {k: v[-1] for k, v in multi_query.items()} or None,
        "multiValueQueryStringParameters": multi_query or None,
        "pathParameters": None,
        "stageVariables": None,
        "requestContext": {
            "accountId": "000000000000",
            "apiId": "local",
            "domainName": host,
            "httpMethod": method,
            "path": f"/{STAGE}{path}",
            "protocol": "HTTP/1.1",
            "requestId": request_id,
            "extendedRequestId": request_id,
            "requestTimeEpoch": request_time_ms,
            "resourcePath": path,
            "stage": STAGE,
            "identity": {"sourceIp": source_ip, "userAgent": user_agent, "caller": None},
        },
        "body": text,
        "isBase64Encoded": is_base64,
    }


def response_headers(response: dict[str, Any]) -> list[tuple[str, str]]:
    """The headers of a proxy response (multiValueHeaders win over headers, as on AWS)."""
    merged: dict[str, list[str]] = {
        name: [str(value)] for name, value in (response.get("headers") or {}).items()
    }
    for name, values in (response.get("multiValueHeaders") or {}).items():
        merged[name] = [str(v) for v in values]
    return [(name, value) for name, values in merged.items() for value in values]


class LocalApiServer(LoopbackServer):
    """Serves ``handler`` on http://127.0.0.1:<port>; port 0 picks a free one."""

    THREAD_NAME = "shardlog-api"
    POLL_INTERVAL_S = 0.05

    def __init__(self, handler: ProxyHandler, *, port: int = 0, host: str = "127.0.0.1") -> None:
        if host not in LOOPBACK_HOSTS:
            raise ValueError("the local API only listens on the loopback interface")
        super().__init__(port=port, host=host)
        self.handler = handler
        self.requests = 0
        self._invoke_lock = threading.Lock()

    def handler_class(self) -> type[BaseHTTPRequestHandler]:
        return _request_handler_class(self)

    def _bind(self) -> ThreadingHTTPServer:
        with listening(PRODUCER_API, self.host, self.port):
            return super()._bind()

    def invoke(self, event: dict[str, Any]) -> dict[str, Any]:
        with self._invoke_lock:
            self.requests += 1
            return self.handler(event, LambdaContext(FUNCTION_NAME))


def _error_body(error: str, field: str | None = None, limit: Any = None) -> bytes:
    return json.dumps({"error": error, "field": field, "limit": limit}).encode()


def _request_handler_class(api: LocalApiServer) -> type[BaseHTTPRequestHandler]:
    class ProxyRequestHandler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive: every response has a Content-Length
        server_version = "shardlog-local-api"

        def _serve(self) -> None:
            body = self._read_body()
            if body is None:
                return
            event = to_proxy_event(
                self.command,
                self.path,
                list(self.headers.items()),
                body,
                source_ip=self.client_address[0],
                host=f"{api.host}:{api.port}",
            )
            try:
                response = api.invoke(event)
            except Exception:  # what API Gateway answers when the function fails: 502
                logger.exception("the producer API handler failed")
                self._send(502, [], _error_body("the function failed (see the server log)"))
                return
            payload = response.get("body") or ""
            data = (
                base64.b64decode(payload)
                if response.get("isBase64Encoded")
                else str(payload).encode("utf-8")
            )
            self._send(int(response.get("statusCode", 200)), response_headers(response), data)

        def _read_body(self) -> bytes | None:
            if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
                self.close_connection = True
                self._send(
                    411,
                    [],
                    _error_body("send a Content-Length (chunked bodies are not accepted)"),
                )
                return None
            try:
                length = int(self.headers.get("Content-Length") or 0)
            except ValueError:
                length = -1
            if length < 0:
                self.close_connection = True
                self._send(400, [], _error_body("bad Content-Length", "Content-Length"))
                return None
            if length > API_GATEWAY_MAX_PAYLOAD_BYTES:
                # Refuse without invoking the function, as API Gateway does. The body is
                # drained (bounded) so the client can read the answer, then dropped.
                self.close_connection = True
                remaining = min(length, _MAX_DRAIN_BYTES)
                while remaining > 0:
                    chunk = self.rfile.read(min(remaining, 1 << 16))
                    if not chunk:
                        break
                    remaining -= len(chunk)
                error = f"body: {length} bytes, API Gateway takes at most"
                self._send(
                    413,
                    [],
                    _error_body(
                        f"{error} {API_GATEWAY_MAX_PAYLOAD_BYTES}",
                        "body",
                        API_GATEWAY_MAX_PAYLOAD_BYTES,
                    ),
                )
                return None
            return self.rfile.read(length) if length else b""

        def _send(self, status: int, headers: list[tuple[str, str]], data: bytes) -> None:
            self.send_response(status)
            names = {name.lower() for name, _ in headers}
            for name, value in headers:
                if name.lower() not in ("content-length", "connection", "transfer-encoding"):
                    self.send_header(name, value)
            if "content-type" not in names:
                self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            if self.close_connection:
                self.send_header("Connection", "close")
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)

        def __getattr__(self, name: str) -> Any:
            # Every method goes to the function, which answers 405 where it has no route.
            if name.startswith("do_"):
                return self._serve
            raise AttributeError(name)

        def log_message(self, format: str, *args: Any) -> None:
            logger.debug("%s - " + format, self.client_address[0], *args)

    return ProxyRequestHandler
