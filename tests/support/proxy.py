"""A TCP proxy on 127.0.0.1 in front of an HTTP server (the embedded AWS) that loses answers.

Clients pointed at ``proxy.url`` reach the server through it, byte for byte. After
``lose_answers(n)`` the next ``n`` answers are lost: the request reaches the server whole
and is served (a PutRecords puts its records), and then the connection to the client is
closed before a byte of the answer reaches it, as when a connection dies while the client
awaits the answer. ``lose_answers(None)`` loses every answer from then on; ``refuse()``
closes the listening socket so connecting fails (nothing is sent). Loopback only; every
wait is bounded.
"""

from __future__ import annotations

import selectors
import socket
import threading
import time
from urllib.parse import urlsplit

_CHUNK = 1 << 16
_IDLE_TIMEOUT_S = 60.0  # a connection with no traffic for this long is closed
_ACCEPT_POLL_S = 0.05  # how often the accept loop checks whether it should stop
_SERVE_POLL_S = 0.05  # how often a connection's loop checks whether the proxy stops


class LossyProxy:
    def __init__(self, upstream_url: str) -> None:
        parts = urlsplit(upstream_url)
        if parts.hostname not in ("127.0.0.1", "localhost") or parts.port is None:
            raise ValueError(f"the proxy forwards to loopback only, not {upstream_url!r}")
        self._upstream = (parts.hostname, parts.port)
        self._lock = threading.Lock()
        self._to_lose: int | None = 0  # None: every answer
        self._stopping = threading.Event()
        self._refusing = threading.Event()
        self._listener: socket.socket | None = None
        self._accepting: threading.Thread | None = None
        self._threads: list[threading.Thread] = []
        self.port = 0
        self.lost = 0  # answers lost so far
        self.forwarded = 0  # answers that reached the client

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def lose_answers(self, count: int | None) -> None:
        with self._lock:
            self._to_lose = count

    def refuse(self) -> None:
        """Stop listening: from now on connecting to the proxy fails, nothing is sent.
        Returns once the listening socket is closed (its accept loop closes it: a socket
        closed under a blocked accept() would still take connections, then reset them)."""
        self._refusing.set()
        if self._accepting is not None:
            self._accepting.join(timeout=10)

    def start(self) -> LossyProxy:
        listener = socket.create_server(("127.0.0.1", 0))
        listener.settimeout(_ACCEPT_POLL_S)
        self._listener = listener
        self.port = int(listener.getsockname()[1])
        self._accepting = threading.Thread(
            target=self._accept_loop, name="lossy-proxy", daemon=True
        )
        self._accepting.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        self.refuse()
        for thread in self._threads:
            thread.join(timeout=10)

    def __enter__(self) -> LossyProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- internals ----------------------------------------------------------------------
    def _accept_loop(self) -> None:
        assert self._listener is not None
        with self._listener:
            while not self._refusing.is_set():
                try:
                    client, _ = self._listener.accept()
                except TimeoutError:
                    continue
                thread = threading.Thread(target=self._serve, args=(client,), daemon=True)
                thread.start()
                self._threads.append(thread)

    def _lose_this_answer(self) -> bool:
        with self._lock:
            if self._to_lose is None:
                self.lost += 1
                return True
            if self._to_lose > 0:
                self._to_lose -= 1
                self.lost += 1
                return True
            self.forwarded += 1
            return False

    def _serve(self, client: socket.socket) -> None:
        """Copy bytes both ways; the first bytes from the server after a request are the
        start of its answer, where the connection may be cut."""
        upstream = socket.create_connection(self._upstream, timeout=_IDLE_TIMEOUT_S)
        awaiting_answer = False
        with client, upstream, selectors.DefaultSelector() as selector:
            selector.register(client, selectors.EVENT_READ, upstream)
            selector.register(upstream, selectors.EVENT_READ, client)
            idle_since = time.monotonic()
            while not self._stopping.is_set():
                # Short waits, so stop() ends an idle keep-alive connection at once instead
                # of after its join timeout.
                ready = selector.select(timeout=_SERVE_POLL_S)
                if not ready:
                    if time.monotonic() - idle_since > _IDLE_TIMEOUT_S:
                        return
                    continue
                idle_since = time.monotonic()
                for key, _ in ready:
                    source: socket.socket = key.fileobj  # type: ignore[assignment]
                    target: socket.socket = key.data
                    try:
                        data = source.recv(_CHUNK)
                    except OSError:
                        return
                    if not data:
                        return
                    if source is client:
                        awaiting_answer = True  # before forwarding: the answer may be quick
                    elif awaiting_answer:
                        awaiting_answer = False
                        if self._lose_this_answer():
                            return  # closes both ends: the client never sees the answer
                    try:
                        target.sendall(data)
                    except OSError:
                        return
