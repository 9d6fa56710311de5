"""ApiClient, `shardlog produce --via api`, and the API in LocalRuntime and `shardlog local up`,
against the embedded AWS over real HTTP."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from shardlog.api_client import NOT_SENT, ApiClient, ApiError, ApiRecordError
from shardlog.cli.main import cli
from shardlog.clock import ManualClock
from shardlog.config import ShardlogConfig
from shardlog.local.runtime import LocalRuntime
from shardlog.producer import Producer, PutResult
from tests.support.api import ApiUnderTest, serve
from tests.support.aws import stream_env, unique_config
from tests.support.readback import read_stream


class FailsKey(Producer):
    """Kinesis keeps failing the records of key "bad" (they are never sent)."""

    def _send(self, batch: list[Any], results: list[PutResult | None]) -> list[Any]:
        bad = [item for item in batch if item.record.partition_key == "bad"]
        good = [item for item in batch if item not in bad]
        failed = super()._send(good, results) if good else []
        for item in bad:
            item.attempts += 1
            item.error_code = "ProvisionedThroughputExceededException"
            item.error_message = "injected"
        return [*failed, *bad]


@pytest.fixture
def failing_api(endpoint_url: str, clock: ManualClock) -> Iterator[ApiUnderTest]:
    yield from serve(stream_env(endpoint_url), clock, FailsKey)


# --- ApiClient -----------------------------------------------------------------------------


def test_client_puts_more_than_one_request_of_records_in_order(api: ApiUnderTest) -> None:
    client = ApiClient(api.url)
    records = [(f"k{i % 7}", f"v{i}".encode()) for i in range(1203)]

    results = client.put_records(records)

    assert client.requests == 3  # 500 + 500 + 203
    assert all(isinstance(r, PutResult) for r in results)
    stream = {
        (r.shard_id, r.sequence_number): (r.partition_key, r.data) for r in read_stream(api.aws)
    }
    assert len(stream) == len(records)
    assert [
        stream[(r.shard_id, r.sequence_number)] for r in results if isinstance(r, PutResult)
    ] == (records)


def test_client_stops_after_a_request_with_failed_records(failing_api: ApiUnderTest) -> None:
    client = ApiClient(failing_api.url, clock=failing_api.clock)
    records = [("good", b"1"), ("bad", b"2"), ("good", b"3")] + [("later", b"x")] * 600

    results = client.put_records(records)

    # The first request's first round (good#1, bad#2, later#0) went out; bad failed, so
    # the rest of the request and the second request (records 500..) were never sent.
    put = [i for i, r in enumerate(results) if isinstance(r, PutResult)]
    assert put == [0, 3]
    failed = results[1]
    assert isinstance(failed, ApiRecordError)
    assert failed.error_code == "ProvisionedThroughputExceededException"
    assert all(isinstance(r, ApiRecordError) for r in results[4:])
    assert isinstance(results[-1], ApiRecordError) and results[-1].error_code == NOT_SENT
    assert client.requests == 1
    assert sorted(r.data for r in read_stream(failing_api.aws)) == [b"1", b"x"]


def test_client_retries_a_throttled_request_after_retry_after_then_raises(
    failing_api: ApiUnderTest,
) -> None:
    clock = ManualClock()
    client = ApiClient(failing_api.url, clock=clock, max_attempts=3)

    with pytest.raises(ApiError) as caught:
        client.put_records([("bad", b"1"), ("bad", b"2")])

    assert caught.value.status == 429
    assert caught.value.retry_after_s == 1.0
    assert clock.slept == [1.0, 1.0]
    assert client.requests == 3
    assert read_stream(failing_api.aws) == []


def test_client_raises_the_apis_error_with_field_and_limit(api: ApiUnderTest) -> None:
    with pytest.raises(ApiError) as caught:
        ApiClient(api.url).put_records([("k" * 257, b"x")])
    error = caught.value
    assert (error.status, error.field, error.limit) == (400, "records[0].partitionKey", 256)
    assert ApiClient(api.url).health() == {"status": "ok", "version": "0.1.0"}


# --- the CLI ---------------------------------------------------------------------------------


def run_cli(api: ApiUnderTest, *args: str, input: str | None = None) -> Any:
    state = ["--state-file", "/nonexistent/local.json"]
    return CliRunner().invoke(cli, [*state, *args], input=input, catch_exceptions=False)


def test_produce_via_api_prints_shard_and_sequence_number(api: ApiUnderTest) -> None:
    lines = "".join(json.dumps({"partitionKey": f"k{i}", "data": f"v{i}"}) + "\n" for i in range(3))
    result = run_cli(
        api, "produce", "--via", "api", "--api-url", api.url, "--file", "-", "--json", input=lines
    )
    assert result.exit_code == 0, result.output
    printed = [json.loads(line) for line in result.output.splitlines() if line.startswith("{")]
    assert [p["partitionKey"] for p in printed] == ["k0", "k1", "k2"]
    stream = {(r.shard_id, r.sequence_number): r.data for r in read_stream(api.aws)}
    assert [stream[(p["shardId"], p["sequenceNumber"])] for p in printed] == [b"v0", b"v1", b"v2"]


def test_produce_via_api_reports_failed_records_and_exits_1(failing_api: ApiUnderTest) -> None:
    lines = "".join(json.dumps({"partitionKey": k, "data": k}) + "\n" for k in ("good", "bad"))
    result = run_cli(
        failing_api, "produce", "--via", "api", "--api-url", failing_api.url, "--file", "-",
        "--json", input=lines,
    )  # fmt: skip
    assert result.exit_code == 1
    printed = [json.loads(line) for line in result.output.splitlines() if line.startswith("{")]
    assert "sequenceNumber" in printed[0]
    assert printed[1] == {
        "partitionKey": "bad",
        "errorCode": "ProvisionedThroughputExceededException",
        "errorMessage": printed[1]["errorMessage"],
    }


def test_produce_via_api_raises_the_apis_refusal(endpoint_url: str, clock: ManualClock) -> None:
    # Retry-After: 0, so the CLI's client retries without waiting.
    env = stream_env(endpoint_url)
    for failing_api in serve(env, clock, FailsKey, settings={"retry_after_s": 0}):
        args = ["--state-file", "/nonexistent/local.json", "produce", "--via", "api",
                "--api-url", failing_api.url, "--key", "bad", "--data", "x"]  # fmt: skip
        debugged = CliRunner().invoke(cli, ["--debug", *args])
        assert isinstance(debugged.exception, ApiError) and debugged.exception.status == 429
        assert failing_api.server.requests == 3  # the client's attempts
        # A ShardlogError: without --debug the CLI prints it as one line and exits 2.
        result = CliRunner().invoke(cli, args)
        assert result.exit_code == 2, result.output
        assert result.stderr.strip().splitlines() == [f"error: {debugged.exception}"]
    assert read_stream(env) == []


def test_produce_via_api_needs_a_url(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        cli,
        ["--state-file", str(tmp_path / "none.json"), "produce", "--via", "api", "--key", "k",
         "--data", "x"],
    )  # fmt: skip
    assert result.exit_code == 2
    assert "--api-url" in result.output


def test_produce_via_api_reads_the_url_from_the_state_file(
    api: ApiUnderTest, tmp_path: Path
) -> None:
    state = tmp_path / "local.json"
    ShardlogConfig(endpoint_url="http://127.0.0.1:1", extra={"apiUrl": api.url}).write(state)
    result = CliRunner().invoke(
        cli,
        ["--state-file", str(state), "produce", "--via", "api", "--key", "k", "--data", "hello"],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    assert [r.data for r in read_stream(api.aws)] == [b"hello"]


# --- LocalRuntime and `shardlog local up` ------------------------------------------------------


def test_local_runtime_serves_the_api_and_records_its_url(tmp_path: Path) -> None:
    state = tmp_path / "local.json"
    runtime = LocalRuntime(unique_config(), shard_count=1, api_port=0, state_file=state)
    with runtime:
        url = runtime.config.extra["apiUrl"]
        assert url.startswith("http://127.0.0.1:")
        assert json.loads(state.read_text())["apiUrl"] == url
        assert ShardlogConfig.resolve(state).extra["apiUrl"] == url
        result = ApiClient(url).put_records([("k", b"via the api")])
        assert isinstance(result[0], PutResult)
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(url + "/v1/health", timeout=5)


def test_local_runtime_without_the_api(tmp_path: Path) -> None:
    with LocalRuntime(unique_config(), shard_count=1, api_port=None) as runtime:
        assert runtime.api is None
        assert "apiUrl" not in runtime.config.extra


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_for(condition: Callable[[], bool], timeout_s: float = 60) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.1)  # polling a subprocess, bounded by the deadline
    return condition()


def test_local_up_serves_the_api_on_the_requested_port(tmp_path: Path) -> None:
    state = tmp_path / "local.json"
    api_port = _free_port()
    env = {k: v for k, v in os.environ.items() if k != "AWS_ENDPOINT_URL"}
    process = subprocess.Popen(
        [sys.executable, "-m", "shardlog", "--state-file", str(state), "local", "up",
         "--port", str(_free_port()), "--api-port", str(api_port), "--shards", "1",
         "--max-seconds", "120"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
    )  # fmt: skip
    try:
        assert _wait_for(lambda: state.exists() or process.poll() is not None)
        assert process.poll() is None
        url = json.loads(state.read_text())["apiUrl"]
        assert url == f"http://127.0.0.1:{api_port}"
        request = urllib.request.Request(
            url + "/v1/records",
            data=b'{"records": [{"partitionKey": "curl", "data": "aGVsbG8="}]}',
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            body = json.loads(response.read())
        assert body["failedRecordCount"] == 0 and body["records"][0]["sequenceNumber"]

        def committed() -> bool:
            out = subprocess.run(
                [sys.executable, "-m", "shardlog", "--state-file", str(state), "status", "--json"],
                capture_output=True, text=True, timeout=60, env=env, check=True,
            ).stdout  # fmt: skip
            return sum(row["nextSeq"] for row in json.loads(out)) == 1

        assert _wait_for(committed)
        with urllib.request.urlopen(url + "/docs", timeout=30) as page:
            assert page.status == 200 and b"SwaggerUIBundle" in page.read()
    finally:
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=60)
    assert f"producer API at http://127.0.0.1:{api_port}" in output
