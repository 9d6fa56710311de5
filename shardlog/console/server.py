"""The console's HTTP server: read-only pages on 127.0.0.1, actions only when allowed.

Security:

- **Loopback only.** ``ConsoleServer`` refuses any host but 127.0.0.1 / localhost, and every
  request whose ``Host`` header names another host is refused (421): a web page elsewhere
  cannot reach the console through a rebound DNS name.
- **Read-only by default.** Every GET reads; nothing else is served, except the actions
  when the console was started with ``allow_actions``: each is a GET that shows a
  confirmation, then a POST that carries the process's token (``secrets.token_urlsafe``,
  made at start, compared in constant time) in a form field. A POST without it, with a
  wrong one, or from another origin is refused (403) before anything is read or written.
- **No credentials on the page or in the log.** Pages show names and numbers from AWS, never
  the session's keys; the access log has the method, path and status only (no query string,
  which holds partition keys, and no form body, which holds the token).

Errors: bad input (an unknown partition or group, a seq past the head, a malformed time) is
a page with the message and a 4xx status; an error of the environment (no credentials,
expired ones, a missing stack, table or endpoint) is a 503 page saying what to do
(``shardlog.explain.explain``, the CLI's own one-liners); anything else is a 500 page
without a traceback (the traceback goes to the log).
"""

from __future__ import annotations

import hmac
import logging
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs, urlsplit

from shardlog.clock import Clock, SystemClock
from shardlog.console import groups as group_queries
from shardlog.console import lake as lake_queries
from shardlog.console import messages as message_queries
from shardlog.console import queries, render
from shardlog.console.source import Deployment
from shardlog.exceptions import NotFoundError, ShardlogError, ValidationError
from shardlog.loopback_server import LOOPBACK_HOSTS, LoopbackServer
from shardlog.tables import Tables

log = logging.getLogger(__name__)

MAX_FORM_BYTES = 4096
_HEADERS = (
    ("Content-Type", "text/html; charset=utf-8"),
    ("Cache-Control", "no-store"),
    ("X-Content-Type-Options", "nosniff"),
    ("X-Frame-Options", "DENY"),
    ("Referrer-Policy", "no-referrer"),
    (
        "Content-Security-Policy",
        "default-src 'none'; style-src 'unsafe-inline'; img-src 'self' data:; "
        "form-action 'self'; frame-ancestors 'none'",
    ),
)


class ConsoleHostError(ShardlogError, ValueError):
    """The console was asked to listen on an interface other than loopback."""


class ConsolePortError(ShardlogError):
    """The console's port cannot be listened on (busy, or not allowed)."""


@dataclass(frozen=True)
class Reply:
    status: int
    body: str


class PageError(Exception):
    """A request the console answers with a message and a 4xx status."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class Console:
    """The pages: each a method from the request's query to a Reply (no HTTP here)."""

    def __init__(
        self, deployment: Deployment, *, allow_actions: bool = False, clock: Clock | None = None
    ) -> None:
        self.deployment = deployment
        self.allow_actions = allow_actions
        self.clock = clock or SystemClock()
        self.token = secrets.token_urlsafe(32)
        self.clients = deployment.clients()
        self.where = deployment.where
        self._routes: dict[str, Callable[[dict[str, str]], str]] = {
            "/": self.overview,
            "/messages": self.messages,
            "/record": self.record,
            "/search": self.search,
            "/groups": self.groups,
            "/group": self.group,
            "/lake": self.lake,
            "/actions/sync": self.confirm_sync,
        }

    # --- dispatch -------------------------------------------------------------------------
    def get(self, path: str, params: dict[str, str]) -> Reply:
        view = self._routes.get(path)
        if view is None:
            return self._error(404, f"no page {path!r}: the pages are in the bar above")
        return self._answer(lambda: view(params))

    def post(self, path: str, form: dict[str, str]) -> Reply:
        if not self.allow_actions:
            return self._error(403, "the console is read-only (start it with --allow-actions)")
        if not hmac.compare_digest(form.get("token", ""), self.token):
            return self._error(403, "refused: the form's token is missing or wrong")
        if path != "/actions/sync":
            return self._error(404, f"no action {path!r}")
        return self._answer(self.sync)

    def _answer(self, view: Callable[[], str]) -> Reply:
        from shardlog.explain import explain

        try:
            return Reply(200, view())
        except PageError as exc:
            return self._error(exc.status, str(exc))
        except NotFoundError as exc:
            return self._error(404, str(exc))
        except ValidationError as exc:
            return self._error(400, str(exc))
        except Exception as exc:
            message = explain(exc, self.deployment.config)
            if message is None:
                log.exception("console page failed")
                return self._error(500, "the console failed to build this page (see its log)")
            log.warning("console page refused: %s", message)
            return self._error(503, message)

    def _error(self, status: int, message: str) -> Reply:
        return Reply(status, render.error_page(status, message, self.where))

    # --- pages ----------------------------------------------------------------------------
    def overview(self, params: dict[str, str]) -> str:
        now = datetime.fromtimestamp(self.clock.now_ms() / 1000, UTC)
        view = queries.overview(self.deployment, self.clients, now, lag=params.get("lag") == "1")
        html = render.overview_page(view, self.where)
        if self.allow_actions:
            html = html.replace(
                "<h2>Lineage</h2>",
                '<p><a id="sync" href="/actions/sync">Run shard sync now</a></p><h2>Lineage</h2>',
                1,
            )
        return html

    def messages(self, params: dict[str, str]) -> str:
        partitions = self._partitions()
        partition = params.get("partition") or (partitions[0] if partitions else "")
        if not partition:
            return render.page("Messages", "<p>No partition yet.</p>", self.where)
        decoding = self._decoding(params)
        limit = _int(params, "limit", queries.PAGE_RECORDS)
        at = queries.parse_time(params["time"]) if params.get("time") else None
        seq = _int(params, "seq", 0) if at is None else None
        view = message_queries.browse(
            self.deployment, self.clients, partition, seq=seq, at=at, limit=limit
        )
        return render.browse_page(view, partitions, decoding, limit, self.where)

    def record(self, params: dict[str, str]) -> str:
        partition = params.get("partition") or ""
        if not partition:
            raise ValidationError("partition", "give the record's partition")
        found = message_queries.record(
            self.deployment, self.clients, partition, _int(params, "seq", 0)
        )
        return render.record_page(found, self._decoding(params), self.where)

    def search(self, params: dict[str, str]) -> str:
        budget = _int(params, "budget", queries.SEARCH_BUDGET)
        result = message_queries.search(
            self.deployment, self.clients, params.get("key", ""), params.get("cursor"), budget
        )
        return render.search_page(result, result.partition_ids, budget, self.where)

    def groups(self, _params: dict[str, str]) -> str:
        names = group_queries.list_groups(self.deployment, self.clients)
        return render.groups_page(names, self.where)

    def group(self, params: dict[str, str]) -> str:
        view = group_queries.group(
            self.deployment, self.clients, params.get("name", ""), self.clock.now_ms()
        )
        return render.group_page(view, self.where)

    def lake(self, _params: dict[str, str]) -> str:
        return render.lake_page(lake_queries.lake(self.deployment, self.clients), self.where)

    # --- actions --------------------------------------------------------------------------
    def confirm_sync(self, _params: dict[str, str]) -> str:
        if not self.allow_actions:
            raise PageError(403, "the console is read-only (start it with --allow-actions)")
        what = "run shard sync (record new shards' lineage, mark CLOSED and ENDED partitions)"
        return render.confirm_page("sync", what, self.token, self.where)

    def sync(self) -> str:
        """Shard sync, the same as `shardlog sync`: idempotent, every write conditional."""
        from shardlog.shardsync import ShardSync

        config = self.deployment.config
        result = ShardSync(self.clients, config.stream_name, config.tables).sync()
        return render.done_page(
            "Shard sync",
            f"{result.shards} shards; created {result.created}; closed {result.closed}; "
            f"ended {result.ended}",
            self.where,
        )

    # --- helpers --------------------------------------------------------------------------
    def _partitions(self) -> list[str]:
        """The partition ids, for the picker (one Scan)."""
        tables = Tables(self.clients, self.deployment.config.tables)
        return [p.partition_id for p in tables.list_partitions()]

    @staticmethod
    def _decoding(params: dict[str, str]) -> str:
        decoding = params.get("decode") or "auto"
        if decoding not in render.DECODINGS:
            raise ValidationError("decode", f"{decoding!r} is not one of {render.DECODINGS}")
        return decoding


def _int(params: dict[str, str], name: str, default: int) -> int:
    text = params.get(name, "").strip()
    if not text:
        return default
    if not text.isdigit():
        raise ValidationError(name, f"{text!r} is not a whole number >= 0")
    return int(text)


class ConsoleServer(LoopbackServer):
    """Serves a ``Console`` on http://127.0.0.1:<port> (port 0: a free one)."""

    THREAD_NAME = "shardlog-console"

    def __init__(self, console: Console, *, port: int = 0, host: str = "127.0.0.1") -> None:
        if host not in LOOPBACK_HOSTS:
            raise ConsoleHostError(
                f"the console listens on 127.0.0.1 only, not {host!r} (it shows your log with "
                "your credentials: reach it from elsewhere through an SSH tunnel)"
            )
        super().__init__(port=port)
        self.console = console

    def handler_class(self) -> type[BaseHTTPRequestHandler]:
        return _handler_class(self)

    def allowed_host(self, host_header: str | None) -> bool:
        return host_header in {f"{h}:{self.port}" for h in LOOPBACK_HOSTS}


def _handler_class(server: ConsoleServer) -> type[BaseHTTPRequestHandler]:
    console = server.console

    class ConsoleRequestHandler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "shardlog-console"
        sys_version = ""

        def do_GET(self) -> None:
            if not self._host_ok():
                return
            target = urlsplit(self.path)
            params = {k: v[-1] for k, v in parse_qs(target.query, keep_blank_values=True).items()}
            self._send(console.get(target.path, params))

        def do_POST(self) -> None:
            if not self._host_ok():
                return
            origin = self.headers.get("Origin")
            if origin is not None and origin not in (f"http://{self.headers.get('Host')}",):
                self._send(Reply(403, render.error_page(403, "refused: another origin", "")))
                return
            length = int(self.headers.get("Content-Length") or 0)
            if not 0 <= length <= MAX_FORM_BYTES:
                self.close_connection = True
                self._send(Reply(413, render.error_page(413, "form too large", "")))
                return
            body = self.rfile.read(length).decode("utf-8", "replace") if length else ""
            form = {k: v[-1] for k, v in parse_qs(body, keep_blank_values=True).items()}
            self._send(console.post(urlsplit(self.path).path, form))

        def _host_ok(self) -> bool:
            if server.allowed_host(self.headers.get("Host")):
                return True
            self.close_connection = True
            message = "refused: the console answers only to 127.0.0.1 and localhost"
            self._send(Reply(421, render.error_page(421, message, "")))
            return False

        def _send(self, reply: Reply) -> None:
            data = reply.body.encode("utf-8")
            self.send_response(reply.status)
            for name, value in _HEADERS:
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(data)))
            if self.close_connection:
                self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(data)

        def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
            # The path without its query string: partition keys stay out of the log.
            log.info("%s %s %s", self.command, urlsplit(self.path).path, code)

        def log_message(self, format: str, *args: Any) -> None:
            log.debug("console: " + format, *args)

    return ConsoleRequestHandler
