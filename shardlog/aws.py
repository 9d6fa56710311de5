"""boto3 plumbing: one place that builds clients and counts the requests they send.

Every component takes an optional session (or clients); the local runtime and the
tests inject a session pointed at the embedded AWS. Nothing here calls AWS at import.
"""

from __future__ import annotations

import copy
import os
import re
import threading
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import boto3
import botocore.client
import botocore.handlers
import botocore.session
import botocore.utils
from botocore.config import Config
from botocore.hooks import EventAliaser, HierarchicalEmitter
from botocore.loaders import Loader, create_loader
from dateutil.tz import tzlocal

from shardlog import constants as C

_RETRY_CONFIG = Config(
    retries={"max_attempts": 5, "mode": "standard"},
    connect_timeout=5,
    read_timeout=30,
    max_pool_connections=32,
)
# Putting records is not idempotent: botocore resending a PutRecords whose answer was lost
# would put its records twice. The client that puts records never resends by itself; the
# Producer decides what may be sent again (shardlog/producer.py). Other calls keep retrying.
_NO_RESEND_CONFIG = _RETRY_CONFIG.merge(
    Config(retries={"total_max_attempts": 1, "mode": "standard"})
)


_LOADER_LOCK = threading.Lock()
_SHARED_LOADER: Loader | None = None


def shared_loader() -> Loader:
    """One loader of service models for the process: each boto3 session otherwise parses
    the models again, and building a session's clients takes five times longer."""
    global _SHARED_LOADER
    with _LOADER_LOCK:
        if _SHARED_LOADER is None:
            _SHARED_LOADER = create_loader()
        return _SHARED_LOADER


# The timestamps AWS answers with: ISO 8601 in UTC or with an offset (S3's LastModified,
# Glue's, Lambda's), or epoch seconds (the JSON protocols: Kinesis's ApproximateArrivalTimestamp
# on every record, DynamoDB's).
_ISO_8601 = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,6})?(Z|[+-]\d\d:\d\d)")
_LOCAL_ZONE = tzlocal()


def parse_timestamp(value: Any) -> datetime:
    """botocore's timestamp parsing (``botocore.utils.parse_timestamp``) at a fraction of its
    CPU on the forms AWS sends; any other form goes to botocore's.

    botocore parses every timestamp of an answer with dateutil's generic parser (53 us for an
    S3 object's LastModified; a listing of 1,000 objects: 53 ms) and builds a new local zone
    for each epoch value (9 us a Kinesis record). Here an ISO 8601 text with a zone is read
    by ``datetime.fromisoformat`` (1 us), in UTC, and epoch seconds in the local zone, as
    botocore does: the same instant, aware, every time (tests/unit/test_aws_timestamps.py).
    """
    try:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return datetime.fromtimestamp(value, _LOCAL_ZONE)
        if isinstance(value, str) and _ISO_8601.fullmatch(value):
            return datetime.fromisoformat(value).astimezone(UTC)
    except (ValueError, OverflowError, OSError):
        pass
    return botocore.utils.parse_timestamp(value)


_CLIENT_METHODS: dict[int, tuple[Any, dict[str, Any]]] = {}


def _shared_client_methods(create_methods: Any) -> Any:
    """botocore's ``ClientCreator._create_methods``, made once per service model of the
    shared loader: a client's class has a method per operation (Glue 312, S3 107), each with
    its docstring's operation model, and botocore made all of them for every client (a new
    session and its Glue client: 11 to 17 ms of CPU, 6 to 7 with the methods made once). A
    method is a function of the operation's name alone; the class still is made per
    client, from a copy of the methods, and the session's ``creating-client-class``
    handlers still add to or take from that copy. Clients of another loader are made as
    botocore makes them."""

    def methods(creator: Any, service_model: Any) -> dict[str, Any]:
        if creator._loader is not _SHARED_LOADER:
            return create_methods(creator, service_model)  # type: ignore[no-any-return]
        # The loader caches each model's description: one per service and API version. The
        # entry holds it, so no other object takes its id.
        description = service_model._service_description
        with _LOADER_LOCK:
            cached = _CLIENT_METHODS.get(id(description))
        if cached is None:
            cached = (description, create_methods(creator, service_model))
            with _LOADER_LOCK:
                _CLIENT_METHODS[id(description)] = cached
        return dict(cached[1])

    methods.wrapped = create_methods  # type: ignore[attr-defined]
    return methods


if not hasattr(botocore.client.ClientCreator._create_methods, "wrapped"):
    botocore.client.ClientCreator._create_methods = _shared_client_methods(  # type: ignore[method-assign]
        botocore.client.ClientCreator._create_methods
    )


_BUILTIN_HANDLERS: tuple[tuple[Any, ...], Any] | None = None


def _builtin_handlers() -> Any:
    """A new event emitter holding botocore's built-in handlers, as a new session registers
    them: a copy of one emitter (botocore copies its session's emitter the same way for
    every client), made again whenever the list of built-in handlers changed (moto adds its
    stubber to it when imported). Registering them took 22 of a session's 25 ms of CPU, and
    every process of a lake run, every worker and writer of the tests builds sessions of
    its own."""
    global _BUILTIN_HANDLERS
    builtin = tuple(botocore.handlers.BUILTIN_HANDLERS)
    with _LOADER_LOCK:
        if _BUILTIN_HANDLERS is None or _BUILTIN_HANDLERS[0] != builtin:
            # botocore's own registration, on a bare session: not through __init__, whose
            # initializers (Powertools' user agent) each session then runs once itself.
            emitter = HierarchicalEmitter()
            bare = botocore.session.Session.__new__(botocore.session.Session)
            bare._events = EventAliaser(emitter)  # type: ignore[attr-defined]
            bare._register_builtin_handlers(bare._events)  # type: ignore[attr-defined]
            _BUILTIN_HANDLERS = (builtin, emitter)
        return copy.copy(_BUILTIN_HANDLERS[1])


def new_botocore_session() -> botocore.session.Session:
    """A botocore session of its own on the shared loader (for libraries that build their
    boto3 session from one, as pyiceberg's Glue catalog does), whose clients parse
    timestamps with ``parse_timestamp``."""
    core = botocore.session.Session(event_hooks=_builtin_handlers(), include_builtin_handlers=False)
    core.register_component("data_loader", shared_loader())
    core.get_component("response_parser_factory").set_parser_defaults(
        timestamp_parser=parse_timestamp
    )
    return core


def new_session(
    region: str, access_key_id: str | None = None, secret_access_key: str | None = None
) -> boto3.session.Session:
    """A boto3 session of its own (credentials, event hooks) on the shared loader."""
    session = boto3.session.Session(
        botocore_session=new_botocore_session(),
        region_name=region,
        aws_access_key_id=access_key_id,
        aws_secret_access_key=secret_access_key,
    )
    loader = shared_loader()
    with _LOADER_LOCK:  # each boto3 session appends its data path again
        loader.search_paths[:] = list(dict.fromkeys(loader.search_paths))
    return session


@dataclass
class AwsConfig:
    """Where the clients point. ``endpoint_url`` None means real AWS."""

    region: str = field(default_factory=lambda: os.environ.get(C.ENV_REGION, C.DEFAULT_REGION))
    endpoint_url: str | None = field(default_factory=lambda: os.environ.get(C.ENV_ENDPOINT_URL))
    access_key_id: str | None = None
    secret_access_key: str | None = None

    def session(self) -> boto3.session.Session:
        return new_session(self.region, self.access_key_id, self.secret_access_key)


class Clients:
    """Lazily built, thread-safe-to-share boto3 clients of one session."""

    def __init__(
        self,
        session: boto3.session.Session | None = None,
        *,
        endpoint_url: str | None = None,
        config: AwsConfig | None = None,
    ) -> None:
        self._config = config or AwsConfig()
        self._session = session or self._config.session()
        self._endpoint_url = endpoint_url or self._config.endpoint_url
        self._clients: dict[str, Any] = {}
        self._hooks: list[tuple[str, Any]] = []
        self._lock = threading.Lock()

    @property
    def session(self) -> boto3.session.Session:
        return self._session

    @property
    def endpoint_url(self) -> str | None:
        return self._endpoint_url

    @property
    def region(self) -> str:
        return self._session.region_name or self._config.region

    def client(self, service: str, *, resend: bool = True) -> Any:
        """The service's client; ``resend=False``: one that never sends a request twice."""
        name = service if resend else f"{service} (no resend)"
        with self._lock:
            if name not in self._clients:
                client = self._session.client(
                    service,  # type: ignore[call-overload]
                    endpoint_url=self._endpoint_url,
                    region_name=self.region,
                    config=_RETRY_CONFIG if resend else _NO_RESEND_CONFIG,
                )
                for event, hook in self._hooks:
                    client.meta.events.register(event, hook)
                self._clients[name] = client
            return self._clients[name]

    def add_hook(self, event: str, hook: Any) -> None:
        """Register a botocore event hook on every client, built now or later."""
        with self._lock:
            self._hooks.append((event, hook))
            for client in self._clients.values():
                client.meta.events.register(event, hook)

    @property
    def s3(self) -> Any:
        return self.client("s3")

    @property
    def dynamodb(self) -> Any:
        return self.client("dynamodb")

    @property
    def kinesis(self) -> Any:
        return self.client("kinesis")

    @property
    def kinesis_puts(self) -> Any:
        """The Kinesis client for PutRecords and PutRecord: it never resends a request."""
        return self.client("kinesis", resend=False)


class RequestCounter:
    """Counts HTTP requests (every attempt, retries included) sent by a session's clients.

    Requests are the cost of a serverless system, so benchmarks and budget tests
    read them from here rather than estimating.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.by_operation: Counter[str] = Counter()

    def attach(self, target: boto3.session.Session | Clients) -> RequestCounter:
        """Count requests of a session's future clients, or of a Clients' all clients.

        botocore copies a session's event hooks into each client when the client is
        built, so a session hook alone misses clients that already exist.
        """
        if isinstance(target, Clients):
            target.add_hook("before-send", self._on_send)
        else:
            target.events.register("before-send", self._on_send)
        return self

    def _on_send(self, request: Any = None, **kwargs: Any) -> None:
        event_name = str(kwargs.get("event_name", ""))  # before-send.<service>.<Operation>
        parts = event_name.split(".")
        key = ".".join(parts[1:3]) if len(parts) >= 3 else event_name
        with self._lock:
            self.by_operation[key] += 1

    @property
    def total(self) -> int:
        with self._lock:
            return sum(self.by_operation.values())

    def snapshot(self) -> Counter[str]:
        with self._lock:
            return Counter(self.by_operation)

    def reset(self) -> None:
        with self._lock:
            self.by_operation.clear()
