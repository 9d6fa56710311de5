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

from shardlog import constants as C
from shardlog.api_client import MAX_DATA_PER_REQUEST_BYTES, ApiClient, ApiError
from shardlog.cli.main import cli
from shardlog.clock import ManualClock
from shardlog.config import ShardlogConfig
from shardlog.exceptions import ValidationError
from shardlog.idempotence import RECORD_ID_PATTERN, unwrap
from shardlog.local.runtime import LocalRuntime
from shardlog.outcomes import FailureKind, PutFailure, PutResult
from shardlog.records import ProducerRecord
from tests.support.api import ApiUnderTest, serve
from tests.support.aws import stream_env, unique_config
from tests.support.faults import THROTTLED, FaultyProducer, entries_where
from tests.support.readback import read_stream


def fails_key_bad() -> dict[str, Any]:
    """Kinesis keeps failing the records of key "bad" (they are never sent)."""
    return {"fail": entries_where(lambda entry: entry.partition_key == "bad")}


@pytest.fixture
def failing_api(endpoint_url: str, clock: ManualClock) -> Iterator[ApiUnderTest]:
    yield from serve(stream_env(endpoint_url), clock, FaultyProducer, **fails_key_bad())


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

    # In the first request "bad" failed after its retries; "good" and "later" kept going
    # meanwhile, in order, until it did; the rest and the second request were never sent.
    assert isinstance(results[1], PutFailure) and results[1].error_code == THROTTLED
    assert client.requests == 1
    kinds = [r.kind if isinstance(r, PutFailure) else "put" for r in results]
    assert kinds[:3] == ["put", FailureKind.THROTTLED, "put"]
    later = kinds[3:]
    first_held = later.index(FailureKind.NOT_SENT)
    assert set(later[:first_held]) == {"put"} and set(later[first_held:]) == {FailureKind.NOT_SENT}
    assert len(later[first_held:]) > 100  # the second request's records among them
    stream = {(r.shard_id, r.sequence_number): r.data for r in read_stream(failing_api.aws)}
    put = [r for r in results if isinstance(r, PutResult)]
    assert sorted(stream.values()) == sorted(
        records[i][1] for i, k in enumerate(kinds) if k == "put"
    )
    assert [stream[(r.shard_id, r.sequence_number)] for r in put][:2] == [b"1", b"3"]


def test_client_resends_a_throttled_request_after_retry_after_then_answers_throttled(
    failing_api: ApiUnderTest,
) -> None:
    clock = ManualClock()
    client = ApiClient(failing_api.url, clock=clock, max_attempts=3)

    results = client.put_records([("bad", b"1"), ("bad", b"2")])

    assert all(isinstance(r, PutFailure) for r in results)
    assert [(r.error_code, r.kind) for r in results] == [  # type: ignore[union-attr]
        ("ThrottlingException", FailureKind.THROTTLED)
    ] * 2
    assert "nothing was put" in results[0].error_message  # type: ignore[union-attr]
    assert clock.slept == [1.0, 1.0]
    assert client.requests == 3
    assert read_stream(failing_api.aws) == []


def test_client_checks_records_before_sending_with_the_sdks_validation(
    api: ApiUnderTest,
) -> None:
    client = ApiClient(api.url)
    with pytest.raises(ValidationError) as caught:
        client.put_records([("ok", b"x"), ("k" * 257, b"x")])
    assert (caught.value.field, caught.value.limit) == ("records[1].partitionKey", 256)
    assert client.requests == 0
    with pytest.raises(ValidationError) as caught:
        client.put_records([("k", b"x", None, "bad id!")])
    assert (caught.value.field, caught.value.limit) == (
        "records[0].recordId",
        RECORD_ID_PATTERN,
    )
    assert client.requests == 0 and read_stream(api.aws) == []


def test_client_raises_the_apis_error_with_status_and_field(api: ApiUnderTest) -> None:
    with pytest.raises(ApiError) as caught:
        ApiClient(api.url + "/v2").put_records([("k", b"x")])
    error = caught.value
    assert (error.status, error.field, error.limit) == (404, "path", None)
    assert ApiClient(api.url).health() == {"status": "ok", "version": "0.1.0"}


def test_client_splits_requests_by_body_size_below_the_apis_limit(api: ApiUnderTest) -> None:
    client = ApiClient(api.url)
    records = [(f"k{i}", bytes([i]) * (C.MIB - 8)) for i in range(5)]  # 5 MiB of data

    results = client.put_records(records)

    assert all(isinstance(r, PutResult) for r in results)
    assert client.requests == 2  # 5 MiB of data is 6.7 MB of base64: it takes two bodies
    assert sorted(r.data for r in read_stream(api.aws)) == [data for _, data in records]


@pytest.mark.parametrize(("extra_bytes", "requests"), [(0, 1), (1, 2)])
def test_client_fills_a_body_up_to_the_limit_and_not_past_it(
    api: ApiUnderTest, extra_bytes: int, requests: int
) -> None:
    groups = MAX_DATA_PER_REQUEST_BYTES // 3  # in whole base64 groups: no padding
    sizes = [3 * (groups // 5 + (1 if i < groups % 5 else 0)) for i in range(5)]
    sizes[-1] += extra_bytes
    client = ApiClient(api.url)

    results = client.put_records([(str(i), b"\x01" * size) for i, size in enumerate(sizes)])

    assert all(isinstance(r, PutResult) for r in results)
    assert client.requests == requests
    assert sorted(len(r.data) for r in read_stream(api.aws)) == sorted(sizes)


def test_idempotent_client_sends_each_record_with_its_own_record_id(api: ApiUnderTest) -> None:
    client = ApiClient(api.url, idempotent=True)
    given = ProducerRecord("k", b"mine", record_id="given-id")

    results = client.put_records([("k", b"a"), given, ("k", b"b")])

    assert all(isinstance(r, PutResult) for r in results)
    stored = [unwrap(r.data) for r in read_stream(api.aws)]
    assert [payload for _, payload in stored] == [b"a", b"mine", b"b"]
    ids = [record_id for record_id, _ in stored]
    assert ids[1] == "given-id" and len(set(ids)) == 3
    assert ids[0] == f"{client.record_ids.producer_id}:0"  # type: ignore[union-attr]


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
        "errorCode": THROTTLED,
        "errorMessage": printed[1]["errorMessage"],
    }


def test_produce_via_api_reports_a_refused_request_per_record(
    endpoint_url: str, clock: ManualClock
) -> None:
    # Retry-After: 0, so the CLI's client retries without waiting.
    env = stream_env(endpoint_url)
    for failing_api in serve(env, clock, FaultyProducer, settings={"retry_after_s": 0},
                             **fails_key_bad()):  # fmt: skip
        result = CliRunner().invoke(
            cli,
            ["--state-file", "/nonexistent/local.json", "produce", "--via", "api", "--api-url",
             failing_api.url, "--key", "bad", "--data", "x"],
        )  # fmt: skip
        assert result.exit_code == 1
        assert result.output.startswith("bad\tFAILED\tThrottlingException: throttled by Kinesis")
        assert failing_api.server.requests == 3  # the client's attempts
    assert read_stream(env) == []


def test_produce_idempotent_sends_record_ids(api: ApiUnderTest) -> None:
    for via in ("sdk", "api"):
        result = run_cli(
            api, "--endpoint-url", api.aws.config.endpoint_url or "", "--stream",
            api.aws.config.stream_name, "produce", "--via", via, "--api-url", api.url,
            "--key", "k", "--data", via, "--idempotent",
        )  # fmt: skip
        assert result.exit_code == 0, result.output
    stored = [unwrap(r.data) for r in read_stream(api.aws)]
    assert [payload for _, payload in stored] == [b"sdk", b"api"]
    assert all(record_id is not None for record_id, _ in stored)


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


def _free_ports(count: int) -> list[int]:
    """Distinct free ports: every socket stays bound until all are chosen."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [int(sock.getsockname()[1]) for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def _wait_for(condition: Callable[[], bool], timeout_s: float = 60) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.1)  # polling a subprocess, bounded by the deadline
    return condition()


def test_local_up_serves_the_api_on_the_requested_port(tmp_path: Path) -> None:
    state = tmp_path / "local.json"
    aws_port, api_port = _free_ports(2)
    env = {k: v for k, v in os.environ.items() if k != "AWS_ENDPOINT_URL"}
    process = subprocess.Popen(
        [sys.executable, "-m", "shardlog", "--state-file", str(state), "local", "up",
         "--port", str(aws_port), "--api-port", str(api_port), "--shards", "1",
         "--console-port", "0", "--max-seconds", "120"],
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
