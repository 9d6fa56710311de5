"""The console under test: `shardlog local up`'s runtime (in-process, its own embedded AWS)
with produced data, a Lambda consumer group with a given-up batch, a lake table, and the
console serving it on a free loopback port."""

from __future__ import annotations

import contextlib
import json
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from html.parser import HTMLParser
from typing import Any

from shardlog import constants as C
from shardlog.aws import RequestCounter
from shardlog.clock import ManualClock
from shardlog.console.server import Console, ConsoleServer
from shardlog.console.source import Deployment
from shardlog.lambda_consumer.settings import LambdaConsumerSettings
from shardlog.local.lambda_consumers import LocalGroup
from shardlog.local.runtime import LocalRuntime
from shardlog.producer import Producer, ProducerRecord
from shardlog.reader import LogReader
from shardlog.status_rows import group_rows
from shardlog.tables import Tables
from tests.support.aws import AwsEnv
from tests.support.factories import Journal, recording_worker, run_until_idle
from tests.support.lambda_consumers import Recorder, Seen
from tests.support.runtime import e2e_runtime, produce_across_split_and_merge

GROUP = "audit"
WORKER_GROUP = "readers"
POISON_KEY = "poison"  # the group's function fails every batch holding it
SCRIPT_KEY = '<script>alert("pwned")</script>'
SCRIPT_DATA = b'{"note": "<img src=x onerror=alert(1)>"}'
BINARY_KEY = "binary-key"
BINARY_DATA = bytes([0, 1, 2, 254, 255])


def _fail_on_poison(batch: list[Seen]) -> dict[str, Any]:
    if any(seen.key == POISON_KEY for seen in batch):
        raise RuntimeError("poison record")
    return {"batchItemFailures": []}


@dataclass
class ConsoleUnderTest:
    runtime: LocalRuntime
    server: ConsoleServer
    clock: ManualClock
    lake_watermarks: dict[str, int] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return self.server.url

    @property
    def config(self) -> Any:
        return self.runtime.config

    def get(self, path: str, headers: dict[str, str] | None = None) -> tuple[int, str]:
        return http(self.url + path, headers=headers)

    def post(self, path: str, form: dict[str, str]) -> tuple[int, str]:
        body = "&".join(f"{k}={urllib.request.quote(v)}" for k, v in form.items()).encode()
        return http(self.url + path, data=body)


def shardlog(console: ConsoleUnderTest, *args: str) -> str:
    """The CLI's output against the console's deployment (its names, no state file)."""
    from click.testing import CliRunner

    from shardlog.cli.main import cli

    config = console.config
    result = CliRunner().invoke(
        cli,
        [
            "--state-file",
            "/nonexistent/local.json",
            "--endpoint-url",
            config.endpoint_url,
            "--stream",
            config.stream_name,
            "--bucket",
            config.bucket,
            *args,
        ],
        env={
            "SHARDLOG_PARTITIONS_TABLE": config.partitions_table,
            "SHARDLOG_CONSUMERS_TABLE": config.consumers_table,
        },
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    return result.output


def read_lines(console: ConsoleUnderTest, *args: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in shardlog(console, "read", *args).splitlines()]


def http(
    url: str, *, data: bytes | None = None, headers: dict[str, str] | None = None
) -> tuple[int, str]:
    request = urllib.request.Request(url, data=data, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:
            return answer.status, answer.read().decode("utf-8")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode("utf-8")


@contextlib.contextmanager
def console_under_test(*, allow_actions: bool = False) -> Iterator[ConsoleUnderTest]:
    """The runtime with data (ingested, consumed, partly compacted) and a console on it."""
    clock = ManualClock()
    recorder = Recorder(answer=_fail_on_poison)
    settings = LambdaConsumerSettings(
        group=GROUP,
        function_name="audit-fn",
        batch_size=10,
        maximum_retry_attempts=0,
        retry_base_delay_ms=0,
    )
    runtime = e2e_runtime(
        "console",
        clock=clock,
        api_port=None,
        lambda_consumers=[LocalGroup(settings, recorder, "tests:audit")],
    )
    with runtime:
        produce_across_split_and_merge(runtime, per_step=40, between=lambda: _step(runtime))
        Producer(runtime.config.stream_name, runtime.clients).put_records(
            [
                ProducerRecord(SCRIPT_KEY, SCRIPT_DATA),
                ProducerRecord(BINARY_KEY, BINARY_DATA),
                ProducerRecord(POISON_KEY, b"bad"),
            ]
        )
        _settle(runtime, clock)
        run_worker_group(runtime, clock)
        marks = commit_half_to_lake(runtime)
        server = ConsoleServer(
            Console(
                Deployment.from_config(runtime.config), allow_actions=allow_actions, clock=clock
            )
        )
        with server:
            yield ConsoleUnderTest(runtime, server, clock, marks)


def _step(runtime: LocalRuntime) -> None:
    runtime.poller.poll_once()
    assert runtime.lambda_consumers is not None
    runtime.lambda_consumers.poll_once()


def _settle(runtime: LocalRuntime, clock: ManualClock) -> None:
    """Until every record is ingested, every partition synced and the group at every head."""
    tables = Tables(runtime.clients, runtime.config.tables)
    produced = 3 * 40 + 3

    def done() -> bool:
        runtime.shard_sync.sync()
        _step(runtime)
        clock.advance(1_000)
        partitions = tables.list_partitions()
        if sum(p.next_seq for p in partitions) < produced:
            return False
        if any(p.state == C.STATE_CLOSED for p in partitions):
            return False
        rows = group_rows(
            runtime.clients, runtime.config.bucket, runtime.config.tables, GROUP, clock.now_ms()
        )
        return all(row["lagRecords"] == 0 for row in rows)

    assert runtime.wait_until(done, timeout_s=120), "the deployment did not settle"


def run_worker_group(runtime: LocalRuntime, clock: ManualClock) -> None:
    """Two workers of group ``WORKER_GROUP`` read the whole log (their leases stay live)."""
    env = AwsEnv(runtime.config, runtime.clients, RequestCounter())
    journal = Journal()
    workers = [
        recording_worker(env, journal, f"worker-{i}", clock, group=WORKER_GROUP) for i in (1, 2)
    ]
    run_until_idle(workers, clock)


def commit_half_to_lake(runtime: LocalRuntime) -> dict[str, int]:
    """A lake table holding the first half of each partition (shardlog's own commit)."""
    from shardlog.lake.catalog import open_table
    from shardlog.lake.commit import LakeAppend, append
    from shardlog.lake.files import s3_uri, write_data_files
    from shardlog.lake.settings import LakeSettings

    # A table of its own: moto's Glue is shared by every test of the process.
    config = runtime.config
    settings = LakeSettings.for_deployment(
        config.bucket, config.region, config.endpoint_url, f"console_{uuid.uuid4().hex[:8]}.events"
    )
    runtime.config = replace(config, extra={**config.extra, "lake": settings.to_json()})
    table = open_table(settings, create=True)
    reader = LogReader(runtime.clients, runtime.config.bucket, runtime.config.tables)
    ranges, segments = {}, []
    for partition in Tables(runtime.clients, runtime.config.tables).list_partitions():
        half = partition.next_seq // 2
        if half == 0:
            continue
        chosen = list(reader.segments(partition.partition_id, 0, half))
        end = chosen[-1].next_seq
        ranges[partition.partition_id] = (0, end)
        segments += chosen
    run_id = f"console-test-{uuid.uuid4().hex[:8]}"
    files = write_data_files(runtime.clients.s3, settings, segments, run_id)
    append(table, LakeAppend(ranges, [s3_uri(settings.bucket, f.key) for f in files], run_id))
    return {pid: end for pid, (_, end) in ranges.items()}


class Cells(HTMLParser):
    """``data-field`` cells of a page by table id, row key (data-partition) and field."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: dict[str, dict[str, dict[str, str]]] = {}
        self._table = ""
        self._row = ""
        self._field: str | None = None
        self._text: list[str] = []
        self.texts: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if tag == "table":
            self._table = values.get("id") or ""
        elif tag == "tr":
            self._row = values.get("data-partition") or values.get("data-job") or ""
            if values.get("data-seq"):
                self._row += f"#{values['data-seq']}"
        elif tag == "td" and values.get("data-field"):
            self._field, self._text = values["data-field"], []

    def handle_endtag(self, tag: str) -> None:
        if tag == "td" and self._field is not None:
            row = self.tables.setdefault(self._table, {}).setdefault(self._row, {})
            row[self._field] = "".join(self._text).strip()
            self._field = None

    def handle_data(self, data: str) -> None:
        self.texts.append(data)
        if self._field is not None:
            self._text.append(data)


def cells(page: str) -> Cells:
    parser = Cells()
    parser.feed(page)
    return parser


def number(text: str) -> int | None:
    return None if text in ("-", "", "not read") else int(text)
