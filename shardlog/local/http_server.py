"""The embedded AWS's HTTP server: moto's WSGI app behind keep-alive connections.

moto's ``ThreadedMotoServer`` runs werkzeug's development server, which answers every
request with ``Connection: close``: each AWS call pays a TCP connect, an accept, a new
server thread and a close, then waits while werkzeug drains the socket. Measured on this
project's 2-core machine, that transport was 1.43 ms of the 2.56 ms of CPU a DynamoDB
GetItem cost end to end (moto's app 0.87 ms, botocore 0.26 ms). This server keeps the
connection open, as AWS's endpoints do: one thread per connection serves request after
request, the body is read exactly (``Content-Length`` or chunked), and each response goes
out in one write with its length. It also remembers which moto backend serves a host,
which moto works out again for every request, and the names of each response class's
methods, which moto lists again for every request to check that the action is one
(``remember_action_names``: 5% of the embedded AWS's CPU at 5,000 records/s); and it records
who made each request while anyone listens (``shardlog.local.request_log``). Requests are
still HTTP, through botocore and urllib3's connection pool: the same code paths as against
AWS.

``stop()`` closes the connections it kept open as well as the listening socket, so a
stopped endpoint is down for pooled clients too.
"""

from __future__ import annotations

import contextlib
import functools
import io
import logging
import socket
import threading
from typing import Any

from moto.core import responses as moto_responses
from moto.moto_server.werkzeug_app import (
    DomainDispatcherApplication,
    MotoRequestHandler,
    create_backend_app,
)
from werkzeug.serving import ThreadedWSGIServer

from shardlog.local.ports import EMBEDDED_AWS, listening

log = logging.getLogger(__name__)

# A connection nobody used for this long is closed (its thread ends). Clients reopen one
# by themselves: urllib3 checks a pooled connection before it reuses it.
IDLE_TIMEOUT_S = 300
# Hop-by-hop headers are the server's to set, never the app's.
_HOP_BY_HOP = frozenset({"connection", "keep-alive", "transfer-encoding", "content-length"})
_NO_BODY = frozenset({204, 304})


class _KeepAliveHandler(MotoRequestHandler):
    """moto's request handler (its environ, with S3's underscored headers kept), answering
    with a length and without ``Connection: close``."""

    protocol_version = "HTTP/1.1"
    timeout = IDLE_TIMEOUT_S
    disable_nagle_algorithm = True  # a response is one write; never wait for an ACK
    server: Any

    def setup(self) -> None:
        super().setup()
        self.server.track(self.connection, open_=True)

    def finish(self) -> None:
        self.server.track(self.connection, open_=False)
        super().finish()

    def run_wsgi(self) -> None:  # werkzeug calls it for every method (do_GET, do_PUT, ...)
        environ = self.make_environ()
        body = _read_body(environ)
        environ["wsgi.input"] = io.BytesIO(body)
        environ["CONTENT_LENGTH"] = str(len(body))
        environ.pop("wsgi.input_terminated", None)
        environ.pop("HTTP_TRANSFER_ENCODING", None)
        started: list[Any] = []
        chunks: list[bytes] = []

        def start_response(
            status: str, headers: list[tuple[str, str]], exc_info: Any = None
        ) -> Any:
            if exc_info is not None and started:
                raise exc_info[1].with_traceback(exc_info[2])
            started[:] = [status, headers]
            return chunks.append

        try:
            result = self.server.app(environ, start_response)
            try:
                chunks.extend(result)
            finally:
                if hasattr(result, "close"):
                    result.close()
        except Exception:
            log.exception("the embedded AWS failed on %s %s", self.command, self.path)
            self.close_connection = True
            started[:] = ["500 INTERNAL SERVER ERROR", [("Content-Type", "text/plain")]]
            chunks[:] = [b"the embedded AWS failed on this request; see its log"]
        self._respond(started[0], started[1], b"".join(chunks))

    def _respond(self, status: str, headers: list[tuple[str, str]], data: bytes) -> None:
        code_text, _, reason = status.partition(" ")
        code = int(code_text)
        self.send_response(code, reason)
        declared = None
        for name, value in headers:
            if name.lower() == "content-length":
                declared = value
            if name.lower() not in _HOP_BY_HOP:
                self.send_header(name, value)
        if self.command == "HEAD":
            if declared is not None:  # HEAD says how long the GET would be
                self.send_header("Content-Length", declared)
            data = b""
        elif code in _NO_BODY or 100 <= code < 200:
            data = b""
        else:
            self.send_header("Content-Length", str(len(data)))
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers_and_body(data)

    def end_headers_and_body(self, data: bytes) -> None:
        """The headers and the body in one write (http.server buffers the headers)."""
        self._headers_buffer.append(b"\r\n" + data)  # type: ignore[attr-defined]
        self.flush_headers()

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        """No line per request (werkzeug's would go to the 'werkzeug' logger)."""


def _read_body(environ: dict[str, Any]) -> bytes:
    """The request body, read exactly, so the next request on the connection starts clean."""
    stream = environ["wsgi.input"]
    if environ.get("wsgi.input_terminated"):  # chunked: werkzeug's DechunkedInput
        return bytes(stream.read())
    length = environ.get("CONTENT_LENGTH") or "0"
    try:
        size = int(length)
    except ValueError:
        size = 0
    return bytes(stream.read(size)) if size > 0 else b""


class _Server(ThreadedWSGIServer):
    """werkzeug's threaded server; the connections it serves are tracked so that ``stop``
    can close them."""

    daemon_threads = True

    def __init__(self, host: str, port: int, app: Any) -> None:
        super().__init__(host, port, app, handler=_KeepAliveHandler)
        self.connections: set[socket.socket] = set()
        self.connections_opened = 0
        self._lock = threading.Lock()

    def server_bind(self) -> None:
        # werkzeug turns an OSError here into a message on stderr and sys.exit(1); a port in
        # use must reach the CLI as the error that names its option.
        host, port = self.server_address[:2]
        with listening(EMBEDDED_AWS, str(host), int(port)):
            super().server_bind()

    def track(self, connection: socket.socket, *, open_: bool) -> None:
        with self._lock:
            if open_:
                self.connections.add(connection)
                self.connections_opened += 1
            else:
                self.connections.discard(connection)

    def close_connections(self) -> None:
        with self._lock:
            open_now = list(self.connections)
        for connection in open_now:
            with contextlib.suppress(OSError):  # closed by the client meanwhile
                connection.shutdown(socket.SHUT_RDWR)


class _Dispatcher(DomainDispatcherApplication):
    """moto's dispatcher, remembering which backend serves a host: moto works it out for
    every request by listing its package directory and trying each service's URL pattern
    (a sixth of the app's time for a GetItem)."""

    _MAX_HOSTS = 4096

    def __init__(self) -> None:
        super().__init__(create_backend_app)
        self._backends: dict[str | None, Any] = {}

    def get_backend_for_host(self, host: str | None) -> Any:
        try:
            return self._backends[host]
        except KeyError:
            backend = super().get_backend_for_host(host)
            if len(self._backends) < self._MAX_HOSTS:
                self._backends[host] = backend
            return backend


_ACTION_NAMES_SEEN = 1024  # response classes: a few dozen services at most


def remember_action_names() -> None:
    """moto's ``method_names_from_class`` (every request: is the action a method of the
    service's response class?) computed once per class (idempotent). The fidelity patches
    replace methods of those classes, never add or remove one, so the names stay true."""
    if isinstance(moto_responses.method_names_from_class, functools._lru_cache_wrapper):
        return
    moto_responses.method_names_from_class = functools.lru_cache(maxsize=_ACTION_NAMES_SEEN)(
        moto_responses.method_names_from_class
    )


class KeepAliveMotoServer:
    """moto's server app on ``host:port`` (0: a free port), one thread per connection."""

    def __init__(self, host: str, port: int = 0, app: Any = None) -> None:
        self.host, self.port = host, port
        self._app = app
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> int:
        """Listen and serve in a daemon thread; return the port."""
        from shardlog.local import request_log

        request_log.install_from_environment()
        # Records each request of a named principal while anyone listens (the IAM replay).
        app = request_log.RequestLogApp(self._app or _Dispatcher())
        server = _Server(self.host, self.port, app)
        self._server = server
        self.port = server.server_address[1]
        self._thread = threading.Thread(
            target=server.serve_forever, name="embedded-aws", daemon=True
        )
        self._thread.start()
        return self.port

    @property
    def connections_opened(self) -> int:
        """Connections accepted since start (a kept-alive connection counts once)."""
        return self._server.connections_opened if self._server else 0

    def stop(self) -> None:
        """Stop accepting, close the kept-alive connections and wait for the server thread."""
        server, self._server = self._server, None
        if server is None:
            return
        server.shutdown()
        server.server_close()
        server.close_connections()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None
