"""Errors a person can read: every failure of the environment is one line on stderr saying
what is wrong and what to do, with exit code 2 and no traceback; --debug shows the traceback.

No request leaves this machine: without credentials the CLI fails before sending anything
(and a dead loopback proxy would catch anything that tried); the other endpoints are the
embedded AWS, a closed loopback port and a loopback server that answers like a throttled AWS.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError
from botocore.retries.standard import ExponentialBackoff
from click.testing import CliRunner, Result

from shardlog import constants as C
from shardlog.cli.main import cli
from shardlog.config import ShardlogConfig
from shardlog.explain import explain
from tests.support.aws import AwsEnv
from tests.support.cli import free_port
from tests.support.factories import incoming_records, writer_for

NO_STATE = ["--state-file", "/nonexistent/local.json"]


def shardlog(*args: str, env: dict[str, str | None] | None = None) -> Result:
    """``shardlog *args`` in this process; exceptions end as they would for a user."""
    return CliRunner().invoke(cli, [*NO_STATE, *args], env=env, catch_exceptions=True)


def on(aws: AwsEnv, **names: str) -> list[str]:
    """The global options that point the CLI at this test's resources (or other names)."""
    stream = names.get("stream", aws.config.stream_name)
    bucket = names.get("bucket", aws.config.bucket)
    return ["--endpoint-url", aws.config.endpoint_url or "", "--stream", stream, "--bucket", bucket]


def tables(aws: AwsEnv, **names: str) -> dict[str, str | None]:
    return {
        C.ENV_PARTITIONS_TABLE: names.get("partitions", aws.config.partitions_table),
        C.ENV_CONSUMERS_TABLE: names.get("consumers", aws.config.consumers_table),
    }


def one_line_error(result: Result) -> str:
    """The error line, after checking it is the whole story: exit 2, one line, no trace."""
    assert result.exit_code == 2, (result.exit_code, result.output, result.exception)
    assert "Traceback" not in result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("error: ")
    return lines[0]


def fresh(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex[:10]}"


# --- missing credentials ------------------------------------------------------------------------
@pytest.fixture
def no_credentials(tmp_path: Path) -> dict[str, str | None]:
    """An environment where the SDK finds no credentials at all: no variables, empty config
    and credentials files, no instance metadata; and, should anything still try to send a
    request, a proxy on a loopback port nobody listens on."""
    empty = tmp_path / "empty"
    empty.write_text("")
    dead_proxy = f"http://127.0.0.1:{free_port()}"
    return {
        "AWS_ACCESS_KEY_ID": None,
        "AWS_SECRET_ACCESS_KEY": None,
        "AWS_SESSION_TOKEN": None,
        "AWS_PROFILE": None,
        "AWS_DEFAULT_PROFILE": None,
        C.ENV_ENDPOINT_URL: None,
        "AWS_SHARED_CREDENTIALS_FILE": str(empty),
        "AWS_CONFIG_FILE": str(empty),
        "BOTO_CONFIG": str(empty),
        "AWS_EC2_METADATA_DISABLED": "true",
        "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI": None,
        "AWS_CONTAINER_CREDENTIALS_FULL_URI": None,
        "AWS_WEB_IDENTITY_TOKEN_FILE": None,
        "AWS_ROLE_ARN": None,
        "HTTPS_PROXY": dead_proxy,
        "HTTP_PROXY": dead_proxy,
        "https_proxy": dead_proxy,
        "http_proxy": dead_proxy,
        "NO_PROXY": None,
        "no_proxy": None,
    }


@pytest.mark.parametrize(
    "command",
    [
        ["status"],
        ["sync"],
        ["read", "--partition", "shardId-000000000000"],
        ["spark", "summary"],
        ["smoke"],
    ],
)
def test_missing_credentials(no_credentials: dict[str, str | None], command: list[str]) -> None:
    line = one_line_error(shardlog(*command, env=no_credentials))
    assert "no AWS credentials" in line
    assert "AWS_PROFILE" in line and "--endpoint-url" in line
    assert "cannot reach" not in line, "nothing was sent, so nothing was unreachable"


# --- an endpoint that is down -------------------------------------------------------------------
def test_endpoint_down() -> None:
    endpoint = f"http://127.0.0.1:{free_port()}"  # nobody listens there
    line = one_line_error(shardlog("--endpoint-url", endpoint, "status"))
    assert f"cannot reach {endpoint}" in line
    assert "--endpoint-url" in line and "shardlog local up" in line


# --- missing stream, table, bucket, stack -------------------------------------------------------
def test_missing_stack(endpoint_url: str) -> None:
    name = fresh("NoSuchStack")
    line = one_line_error(shardlog("smoke", "--endpoint-url", endpoint_url, "--stack-name", name))
    assert f"no stack {name!r} in us-east-1 at {endpoint_url}" in line
    assert "--stack-name" in line and C.ENV_STACK_NAME in line


def test_missing_stream(aws: AwsEnv) -> None:
    stream = fresh("no-such-stream")
    line = one_line_error(shardlog(*on(aws, stream=stream), "sync", env=tables(aws)))
    assert f"stream {stream!r} not found" in line
    assert "--stream" in line and C.ENV_STREAM_NAME in line


@pytest.mark.parametrize("command", [["status"], ["status", "--group", "billing"]])
def test_missing_table(aws: AwsEnv, command: list[str]) -> None:
    consumers = fresh("no-such-table")
    line = one_line_error(shardlog(*on(aws), *command, env=tables(aws, consumers=consumers)))
    assert "table not found" in line and repr(consumers) in line
    assert C.ENV_CONSUMERS_TABLE in line and C.ENV_PARTITIONS_TABLE in line


@pytest.mark.parametrize(
    "command", [["read", "--partition", "shardId-000000000000"], ["spark", "summary"]]
)
def test_missing_bucket(aws: AwsEnv, command: list[str]) -> None:
    writer_for(aws).append("shardId-000000000000", incoming_records(2, start=0))
    bucket = fresh("no-such-bucket")
    line = one_line_error(shardlog(*on(aws, bucket=bucket), *command, env=tables(aws)))
    assert f"bucket {bucket!r} not found" in line
    assert "--bucket" in line and C.ENV_BUCKET_NAME in line


# --- throttling ---------------------------------------------------------------------------------
class ThrottledAws(ThreadingHTTPServer):
    """Answers every request the way a throttled AWS JSON service does (HTTP 400)."""

    def __init__(self, code: str) -> None:
        super().__init__(("127.0.0.1", 0), ThrottlingHandler)
        self.code = code
        self.requests = 0
        self.lock = threading.Lock()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class ThrottlingHandler(BaseHTTPRequestHandler):
    server: ThrottledAws

    def do_POST(self) -> None:  # the http.server hook
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        with self.server.lock:
            self.server.requests += 1
        body = json.dumps({"__type": self.server.code, "message": "Rate exceeded"}).encode()
        self.send_response(400)
        self.send_header("Content-Type", "application/x-amz-json-1.0")
        self.send_header("x-amzn-ErrorType", self.server.code)
        self.send_header("x-amzn-RequestId", str(uuid.uuid4()))
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_args: Any) -> None:
        pass


@pytest.fixture
def throttled(request: pytest.FixtureRequest) -> Iterator[ThrottledAws]:
    server = ThrottledAws(request.param)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


@pytest.fixture
def quick_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    """The SDK backs off about a second, doubling, between its retries of a throttled call
    (botocore's throttling base scale): scaled down to a millisecond, the command still goes
    through every retry (the throttled server counts them) without half a minute of waiting."""
    monkeypatch.setitem(ExponentialBackoff._DEFAULT_BACKOFF_CONFIG, "throttling_base_scale", 0.001)


@pytest.mark.parametrize(
    "throttled",
    ["ProvisionedThroughputExceededException", "ThrottlingException", "RequestLimitExceeded"],
    indirect=True,
)
def test_throttling(throttled: ThrottledAws, quick_backoff: None) -> None:
    line = one_line_error(shardlog("--endpoint-url", throttled.endpoint, "status"))
    assert f"AWS throttled Query ({throttled.code})" in line
    assert "run it again" in line
    assert throttled.requests >= 5, "the SDK retried (5 attempts of the call) before giving up"


@pytest.mark.parametrize(
    ("code", "operation"),
    [
        ("ThrottlingException", "ListShards"),
        ("LimitExceededException", "GetShardIterator"),
        ("SlowDown", "GetObject"),
    ],
)
def test_every_throttling_code_reads_the_same(code: str, operation: str) -> None:
    error = ClientError({"Error": {"Code": code, "Message": "Rate exceeded"}}, operation)
    line = explain(error, ShardlogConfig(endpoint_url="http://127.0.0.1:1"))
    assert line is not None and line.startswith(f"AWS throttled {operation} ({code})")


# --- --debug ------------------------------------------------------------------------------------
def test_debug_shows_the_traceback(aws: AwsEnv) -> None:
    args = [*on(aws, stream=fresh("no-such-stream")), "sync"]
    result = shardlog("--debug", *args, env=tables(aws))
    assert isinstance(result.exception, ClientError), result.output
    assert result.exit_code == 1
    via_env = shardlog(*args, env={**tables(aws), C.ENV_DEBUG: "1"})
    assert isinstance(via_env.exception, ClientError)


def test_a_bug_keeps_its_traceback() -> None:
    """Only errors of the environment become one line; anything else is not hidden."""
    assert explain(KeyError("partitionId"), None) is None
    assert explain(ZeroDivisionError(), None) is None
