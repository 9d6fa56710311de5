"""The whole system on one machine: embedded AWS, ingest handler, poller, shard sync, the
producer HTTP API, Lambda consumer groups and, with record retention set, the trim (the
trimmer, then the bucket's lifecycle rules the embedded AWS does not run, both on the
runtime's clock: ``trim_once``). The embedded AWS's server runs in this process or, with
``aws_process``, in a child process of its own (``shardlog.local.server_process``); the
rest runs here either way and reaches it over HTTP."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from shardlog import constants as C
from shardlog.aws import Clients, RequestCounter
from shardlog.clock import Clock, SystemClock
from shardlog.config import ShardlogConfig
from shardlog.format import Compression
from shardlog.lake.settings import LakeSettings
from shardlog.local import principals
from shardlog.local.checkout import require_checkout
from shardlog.local.embedded import EmbeddedServer, provision
from shardlog.local.http_api import LocalApiServer
from shardlog.local.lambda_consumers import LocalGroup, LocalLambdaConsumers
from shardlog.local.lifecycle import expire_now, put_rule
from shardlog.local.poller import EventSourcePoller, EventSourceSettings
from shardlog.local.quiet import quiet_powertools
from shardlog.local.server_process import embedded_aws
from shardlog.retention import PartitionTrim, RetentionPolicy, Trimmer, expiry_rule
from shardlog.shardsync import ShardSync
from shardlog.tables import Tables

TRIM_INTERVAL_S = 3600.0  # how often (wall time) the background trim runs


class LocalRuntime:
    def __init__(
        self,
        config: ShardlogConfig | None = None,
        *,
        port: int = 0,
        shard_count: int = 4,
        event_source: EventSourceSettings | None = None,
        segment_max_records: int = C.DEFAULT_SEGMENT_MAX_RECORDS,
        segment_max_bytes: int = C.DEFAULT_SEGMENT_MAX_BYTES,
        segment_compression: Compression = C.DEFAULT_SEGMENT_COMPRESSION,
        lease_duration_ms: int = C.DEFAULT_LEASE_DURATION_MS,
        clock: Clock | None = None,
        state_file: str | Path | None = None,
        api_port: int | None = 0,  # the producer HTTP API; 0 = a free port, None = none
        lambda_consumers: Sequence[LocalGroup] = (),  # `--lambda-consumer GROUP=MODULE:FUNCTION`
        retention: RetentionPolicy | None = None,  # `--record-retention-days`; None: forever
        trim_interval_s: float = TRIM_INTERVAL_S,
        # The embedded AWS's server in a child process of its own (`local up`'s default), or
        # in this one (tests that read moto's state or record requests in memory).
        aws_process: bool = False,
    ) -> None:
        self.retention = retention
        self.trim_interval_s = trim_interval_s
        self.lambda_groups = list(lambda_consumers)
        self.lambda_consumers: LocalLambdaConsumers | None = None
        self.api_port = api_port
        self.api: LocalApiServer | None = None
        self.base_config = config or ShardlogConfig()
        self.aws: EmbeddedServer = embedded_aws(port, process=aws_process)
        self.shard_count = shard_count
        self.event_source = event_source or EventSourceSettings()
        self.segment_max_records = segment_max_records
        self.segment_max_bytes = segment_max_bytes
        self.segment_compression = segment_compression
        self.lease_duration_ms = lease_duration_ms
        self.clock = clock or SystemClock()
        self.state_file = state_file
        self.ingest_requests = RequestCounter()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._trimmer: threading.Thread | None = None
        self.config: ShardlogConfig = self.base_config
        self.clients: Clients
        self.poller: EventSourcePoller
        self.shard_sync: ShardSync

    def start(self) -> LocalRuntime:
        """Start everything; on a failure (a port in use, say), stop what already started."""
        try:
            return self._start()
        except BaseException:
            self.stop()
            raise

    def _start(self) -> LocalRuntime:
        require_checkout()
        # The handlers run in this process, not a Lambda sandbox.
        quiet_powertools()
        endpoint = self.aws.start()
        self.config = replace(self.base_config, endpoint_url=endpoint)
        self.clients = self.config.clients()
        provision(self.clients, self.config, self.shard_count)
        # Each function's code signs as that function (shardlog.local.principals), its event
        # source too: on AWS the event source mapping reads with the function's role.
        self.shard_sync = ShardSync(
            self.config.clients(principals.function("lambdas.shard_sync.handler")),
            self.config.stream_name,
            self.config.tables,
        )
        self.shard_sync.sync()
        ingest = principals.function("lambdas.ingest.handler")
        self.poller = EventSourcePoller(
            self.config.clients(ingest),
            self.config.stream_name,
            self._build_handler(self.config.clients(ingest)),
            settings=self.event_source,
            clock=self.clock,
            start_after=self._ingest_checkpoint,
            on_shard_end=lambda _shard: self.shard_sync.sync(),
        )
        if self.api_port is not None:
            self.api = LocalApiServer(self._build_api_handler(), port=self.api_port)
            api_url = self.api.start()
            self.config = replace(self.config, extra={**self.config.extra, "apiUrl": api_url})
        if self.lambda_groups:
            self.lambda_consumers = LocalLambdaConsumers(
                self.clients, self.config, self.lambda_groups, clock=self.clock
            ).start()
            state = self.lambda_consumers.state()
            self.config = replace(
                self.config, extra={**self.config.extra, "lambdaConsumers": state}
            )
        # The lake table's catalog name, load_catalog properties and identifier (docs/LAKE.md).
        lake = LakeSettings.for_deployment(
            self.config.bucket, self.config.region, self.config.endpoint_url
        )
        self.config = replace(self.config, extra={**self.config.extra, "lake": lake.to_json()})
        if self.retention is not None and self.retention.days is not None:
            put_rule(self.clients, self.config.bucket, expiry_rule(self.retention.days))
        if self.state_file is not None:
            self.config.write(self.state_file)
        return self

    def trim_once(self) -> tuple[list[PartitionTrim], list[str]]:
        """One trim (shardlog/retention.py), then the bucket's lifecycle applied as S3 would
        by now: what each partition's trim did, and the keys expired."""
        if self.retention is None:
            return [], []
        trims = Trimmer(
            self.clients, self.config.bucket, self.config.tables, self.retention, self.clock
        ).run()
        return trims, expire_now(self.clients, self.config.bucket, self.clock.now_ms())

    def _trim_until_stopped(self) -> None:
        while not self._stop.wait(self.trim_interval_s):
            self.trim_once()

    def _build_api_handler(self) -> Callable[[dict[str, Any], Any], Any]:
        from lambdas.producer_api.handler import create_handler
        from shardlog.function_settings import ProducerApiSettings

        settings = ProducerApiSettings(stream_name=self.config.stream_name)
        clients = self.config.clients(principals.function(create_handler.__module__))
        return create_handler(settings, clients, self.clock, serve_docs=True)

    def _build_handler(self, ingest_clients: Clients) -> Callable[[dict[str, Any], Any], Any]:
        from lambdas.ingest.handler import create_handler
        from shardlog.function_settings import IngestSettings

        settings = IngestSettings(
            bucket=self.config.bucket,
            tables=self.config.tables,
            lease_duration_ms=self.lease_duration_ms,
            segment_max_records=self.segment_max_records,
            segment_max_bytes=self.segment_max_bytes,
            segment_compression=self.segment_compression,
        )
        # The handler has clients of its own (not the poller's), so its requests are counted apart.
        self.ingest_requests.attach(ingest_clients)
        return create_handler(settings, ingest_clients, self.clock)

    def _ingest_checkpoint(self, shard_id: str) -> str | None:
        lease = Tables(self.clients, self.config.tables).get_lease(C.INGEST_GROUP, shard_id)
        return lease.checkpoint if lease else None

    def committed_records(self) -> int:
        return sum(p.next_seq for p in Tables(self.clients, self.config.tables).list_partitions())

    def run_in_background(self) -> None:
        self._thread = threading.Thread(
            target=self.poller.run, args=(self._stop,), name="shardlog-poller", daemon=True
        )
        self._thread.start()
        if self.lambda_consumers is not None:
            self.lambda_consumers.run_in_background(self._stop)
        if self.retention is not None:
            self._trimmer = threading.Thread(
                target=self._trim_until_stopped, name="shardlog-trim", daemon=True
            )
            self._trimmer.start()

    def wait_until(self, done: Callable[[], bool], timeout_s: float, poll_s: float = 0.1) -> bool:
        """Wait (bounded) until ``done()``; polls the poller itself when no thread runs it."""
        deadline = SystemClock().now_ms() + int(timeout_s * 1000)
        while SystemClock().now_ms() < deadline:
            if done():
                return True
            if self._thread is None:
                self.poller.poll_once()
                if self.lambda_consumers is not None:
                    self.lambda_consumers.poll_once()
            else:
                self._stop.wait(poll_s)
        return done()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
            self._thread = None
        if self.lambda_consumers is not None:
            self.lambda_consumers.join(timeout_s=30)
        if self._trimmer is not None:
            self._trimmer.join(timeout=30)
            self._trimmer = None
        if self.api is not None:
            self.api.shutdown()
            self.api = None
        self.aws.stop()
        if self.state_file is not None:
            Path(self.state_file).unlink(missing_ok=True)

    def __enter__(self) -> LocalRuntime:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
