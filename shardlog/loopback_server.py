"""An HTTP server on the loopback interface, serving from a thread: the local producer API
(``shardlog.local.http_api``) and the console (``shardlog.console.server``) are both one.

Only 127.0.0.1 (or ``localhost``) is accepted: both serve with the caller's credentials and
must not be reachable from another machine. Port 0 picks a free port; ``port`` and ``url``
name the bound one after ``start``. ``start`` raises the bind's ``OSError`` (a busy port)
before anything is served; each user turns it into its own one-line error.
"""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Self

LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost"})


class LoopbackServer:
    """A ``ThreadingHTTPServer`` on 127.0.0.1, started and stopped with its thread."""

    THREAD_NAME = "shardlog-http"
    POLL_INTERVAL_S = 0.1

    def __init__(self, *, port: int = 0, host: str = "127.0.0.1") -> None:
        self.host = host
        self.port = port
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def handler_class(self) -> type[BaseHTTPRequestHandler]:
        raise NotImplementedError

    def _bind(self) -> ThreadingHTTPServer:
        """The bound server (OSError when the port is taken); subclasses may wrap it."""
        return ThreadingHTTPServer((self.host, self.port), self.handler_class())

    def start(self) -> str:
        """Bind, then serve in a daemon thread; the URL served."""
        server = self._bind()
        server.daemon_threads = True
        self._server = server
        self.port = int(server.server_address[1])
        self._thread = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": self.POLL_INTERVAL_S},
            name=self.THREAD_NAME,
            daemon=True,
        )
        self._thread.start()
        return self.url

    def shutdown(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
