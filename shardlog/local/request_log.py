"""Every request the embedded AWS serves, with the principal that signed it.

The embedded AWS enforces no IAM policy, key policy or bucket policy, so a request that AWS
would refuse succeeds here. To check the code's requests against the synthesized policies
anyway, the server records each request signed by a named local principal
(``shardlog.local.principals``; the access key id names it, ``shardlog.config``): who, the
service of the signature's scope, method, path, query string, the headers IAM conditions read,
the body of JSON and form requests (the parameters), and the status it answered. Requests
signed otherwise (a test's own set-up, a CLI user) are not recorded. Each record names the
host it was sent to, so a listener can keep one embedded AWS's requests. The middleware sees every
client: boto3, pyiceberg's Glue client, pyarrow's S3 filesystem, the Spark jobs' processes.

Some calls of the local runtime stand in for an AWS request it cannot make: a Lambda consumer
group's function is called in-process instead of through Lambda's Invoke. Those are recorded
with ``stand_in`` as the request AWS would have received (operation and parameters).

Listeners: ``recording()`` collects in memory (the IAM replay test); with
``SHARDLOG_REQUEST_LOG=<directory>`` set, each process that serves an embedded AWS appends its
records to ``<directory>/requests-<pid>.jsonl`` (an audit of a whole test run). With no
listener the middleware costs one check per request.
"""

from __future__ import annotations

import io
import json
import os
import re
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from shardlog import constants as C
from shardlog.config import principal_of_key

Record = dict[str, Any]
Listener = Callable[[Record], None]

_lock = threading.Lock()
_listeners: list[Listener] = []
_env_file_installed = False
_CREDENTIAL = re.compile(r"Credential=([^/,\s]+)/[^/]+/([^/]+)/([^/]+)/")
# The headers IAM condition keys or the operation's parameters are read from; never the
# signature's own.
_KEPT_HEADERS = ("content-type", "if-none-match", "if-match", "range")
_SIGNATURE_HEADERS = ("x-amz-date", "x-amz-content-sha256", "x-amz-security-token")
# Bodies kept: the parameters of JSON and form requests, and S3's DeleteObjects list.
_TEXT_BODY_TYPES = ("json", "x-www-form-urlencoded", "cbor")


def add_listener(listener: Listener) -> None:
    with _lock:
        _listeners.append(listener)


def remove_listener(listener: Listener) -> None:
    with _lock:
        if listener in _listeners:
            _listeners.remove(listener)


class Recording:
    """The records received while it listens, in arrival order."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._records: list[Record] = []

    def __call__(self, record: Record) -> None:
        with self._lock:
            self._records.append(record)

    @property
    def records(self) -> list[Record]:
        with self._lock:
            return list(self._records)


@contextmanager
def recording() -> Iterator[Recording]:
    """Record every principal's requests to any embedded AWS of this process meanwhile."""
    found = Recording()
    add_listener(found)
    try:
        yield found
    finally:
        remove_listener(found)


def stand_in(
    principal: str, service: str, operation: str, params: dict[str, Any], endpoint: str
) -> None:
    """Record the AWS request a local in-process call stands for, as if sent to ``endpoint``
    (the embedded AWS the caller's other requests go to)."""
    _emit(
        {
            "principal": principal,
            "host": urlparse(endpoint).netloc,
            "service": service,
            "operation": operation,
            "params": params,
            "status": 200,
            "standIn": True,
        }
    )


def _emit(record: Record) -> None:
    with _lock:
        listeners = list(_listeners)
    for listener in listeners:
        listener(record)


def install_from_environment() -> None:
    """Append this process's records to the directory SHARDLOG_REQUEST_LOG names (once)."""
    global _env_file_installed
    directory = os.environ.get(C.ENV_REQUEST_LOG)
    with _lock:
        if not directory or _env_file_installed:
            return
        _env_file_installed = True
    add_listener(JsonLinesFile(Path(directory) / f"requests-{os.getpid()}.jsonl"))


class JsonLinesFile:
    """A listener appending one JSON line per record (one write per line, under a lock)."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._lock = threading.Lock()

    def __call__(self, record: Record) -> None:
        line = json.dumps(record, separators=(",", ":")) + "\n"
        with self._lock, self.path.open("a") as out:
            out.write(line)


def read_json_lines(directory: Path) -> list[Record]:
    """Every record of every process's file in ``directory``."""
    records = []
    for path in sorted(directory.glob("requests-*.jsonl")):
        with path.open() as lines:
            records += [json.loads(line) for line in lines if line.strip()]
    return records


class RequestLogApp:
    """WSGI middleware in front of moto's app: records each request of a named principal."""

    def __init__(self, app: Any) -> None:
        self.app = app

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Any:
        if not _listeners:
            return self.app(environ, start_response)
        signed = _signature(environ)
        principal = principal_of_key(signed[0]) if signed else None
        if principal is None or signed is None:
            return self.app(environ, start_response)
        record = _request_record(environ, principal, region=signed[1], service=signed[2])

        def capture(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
            record["status"] = int(status.split(" ", 1)[0])
            return start_response(status, headers, exc_info)

        result = self.app(environ, capture)
        _emit(record)
        return result


def _signature(environ: dict[str, Any]) -> tuple[str, str, str] | None:
    """(access key id, region, service) of a SigV4 header or presigned query, else None."""
    text = environ.get("HTTP_AUTHORIZATION") or ""
    if "Credential=" not in text:
        text = "Credential=" + _query_value(environ.get("QUERY_STRING", ""), "X-Amz-Credential")
    found = _CREDENTIAL.search(text)
    return (found.group(1), found.group(2), found.group(3)) if found else None


def _query_value(query: str, name: str) -> str:
    from urllib.parse import parse_qs

    values = parse_qs(query).get(name)
    return values[0] if values else ""


def _request_record(
    environ: dict[str, Any], principal: str, *, region: str, service: str
) -> Record:
    headers = {
        key[5:].replace("_", "-").lower(): str(value)
        for key, value in environ.items()
        if key.startswith("HTTP_")
    }
    if environ.get("CONTENT_TYPE"):
        headers["content-type"] = str(environ["CONTENT_TYPE"])
    kept = {
        name: value
        for name, value in headers.items()
        if name in _KEPT_HEADERS or (name.startswith("x-amz-") and name not in _SIGNATURE_HEADERS)
    }
    query = str(environ.get("QUERY_STRING", ""))
    record: Record = {
        "principal": principal,
        "host": str(environ.get("HTTP_HOST", "")),
        "service": service,
        "region": region,
        "method": str(environ.get("REQUEST_METHOD", "")),
        "path": str(environ.get("RAW_URI") or environ.get("PATH_INFO", "")).split("?", 1)[0],
        "query": query,
        "headers": kept,
    }
    content_type = headers.get("content-type", "")
    delete_objects = service == "s3" and "delete" in query.split("&")
    if any(kind in content_type for kind in _TEXT_BODY_TYPES) or delete_objects:
        record["body"] = _body(environ).decode("utf-8", errors="replace")
    return record


def _body(environ: dict[str, Any]) -> bytes:
    """The request body, leaving the stream readable from its start for moto."""
    stream = environ.get("wsgi.input")
    if isinstance(stream, io.BytesIO):
        return stream.getvalue()
    data = stream.read() if stream is not None else b""
    environ["wsgi.input"] = io.BytesIO(data)
    return bytes(data)
