"""The console's security and cost: loopback only, a token for every state-changing request,
no credential in a page or the log, the environment's errors explained, and each page view
within the AWS request bound docs/CONSOLE.md states."""

from __future__ import annotations

import logging
import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from shardlog.config import ShardlogConfig, principal_of_key
from shardlog.console import queries
from shardlog.console.server import Console, ConsoleHostError, ConsoleServer
from shardlog.console.source import CONSOLE_PRINCIPAL, Deployment
from shardlog.local import request_log
from tests.support.aws import AwsEnv
from tests.support.cli import run_cli
from tests.support.console import GROUP, ConsoleUnderTest, console_under_test, http

# One module fixture (the runtime with its data) and, for the browser, one Chromium: under
# pytest-xdist the module stays on one worker.
pytestmark = pytest.mark.xdist_group("console-security")


@pytest.fixture(scope="module")
def console() -> Iterator[ConsoleUnderTest]:
    with console_under_test(allow_actions=True) as running:
        yield running


def test_the_console_listens_on_loopback_only() -> None:
    console = Console(Deployment(ShardlogConfig()))
    for host in ("0.0.0.0", "192.168.1.10", "::"):
        with pytest.raises(ConsoleHostError, match=r"listens on 127\.0\.0\.1 only"):
            ConsoleServer(console, host=host)
    result = run_cli(None, "console", "--host", "0.0.0.0", "--port", "0")
    assert result.exit_code == 2
    assert "listens on 127.0.0.1 only" in result.output
    assert "Traceback" not in result.output


def test_a_request_for_another_host_is_refused(console: ConsoleUnderTest) -> None:
    status, page = console.get("/", headers={"Host": "evil.example:80"})
    assert status == 421
    assert "partitions" not in page


def test_a_busy_port_is_one_line() -> None:
    with ConsoleServer(Console(Deployment(ShardlogConfig()))) as taken:
        result = run_cli(None, "console", "--port", str(taken.port))
    assert result.exit_code == 2
    assert f"cannot listen on 127.0.0.1:{taken.port}" in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_a_post_without_the_token_is_refused(console: ConsoleUnderTest) -> None:
    with request_log.recording() as recording:
        for form in ({}, {"token": "guess"}, {"token": console.server.console.token[:-1]}):
            status, page = console.post("/actions/sync", form)
            assert status == 403
            assert "token is missing or wrong" in page
    # Refused before anything was read or written: the console sent no request at all.
    assert [r for r in recording.records if r.get("principal") == CONSOLE_PRINCIPAL] == []


def test_the_confirmed_action_with_the_token_runs(console: ConsoleUnderTest) -> None:
    status, page = console.get("/actions/sync")
    assert status == 200
    token = re.search(r'name="token" value="([^"]+)"', page)
    assert token is not None and token.group(1) == console.server.console.token
    status, page = console.post("/actions/sync", {"token": token.group(1)})
    assert status == 200, page
    assert "shards; created" in page


def test_a_read_only_console_offers_and_takes_no_action(aws: AwsEnv) -> None:
    console = Console(Deployment(aws.config))
    with ConsoleServer(console) as server:
        status, _ = http(server.url + "/actions/sync")
        assert status == 403
        status, page = http(server.url + "/actions/sync", data=f"token={console.token}".encode())
        assert status == 403
        assert "read-only" in page
        _, overview = http(server.url + "/")
        assert "/actions/sync" not in overview


def test_no_credential_in_any_page_or_the_log(
    aws: AwsEnv, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Against an endpoint that is not the embedded AWS's, the console signs with the
    caller's credentials: none of them appears in a page or a log line."""
    key, secret = "AKIACONSOLETESTKEY42", "c0nsoleSecretThatMustNotLeak/xyz+42"
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)
    monkeypatch.setenv("AWS_SESSION_TOKEN", "sessionTokenThatMustNotLeak")
    endpoint = (aws.config.endpoint_url or "").replace("127.0.0.1", "localhost")
    config = ShardlogConfig(
        stream_name=aws.config.stream_name,
        bucket=aws.config.bucket,
        partitions_table=aws.config.partitions_table,
        consumers_table=aws.config.consumers_table,
        endpoint_url=endpoint,
    )
    caplog.set_level(logging.INFO)  # what a log keeps; botocore's DEBUG prints its headers
    caplog.set_level(logging.DEBUG, logger="shardlog.console")
    pages = []
    with ConsoleServer(Console(Deployment(config), allow_actions=True)) as server:
        for path in ("/", "/?lag=1", "/messages", "/groups", "/group?name=x", "/lake",
                     "/search?key=k", "/actions/sync", "/nowhere"):  # fmt: skip
            pages.append(http(server.url + path)[1])
    text = "\n".join(pages) + "\n".join(r.getMessage() for r in caplog.records) + caplog.text
    for secretish in (key, secret, "sessionTokenThatMustNotLeak"):
        assert secretish not in text
    assert "GET /messages 200" in caplog.text  # the access log is there, without them


def test_missing_credentials_say_what_to_do(
    aws: AwsEnv, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    endpoint = (aws.config.endpoint_url or "").replace("127.0.0.1", "localhost")
    config = ShardlogConfig(stream_name=aws.config.stream_name, endpoint_url=endpoint)
    with ConsoleServer(Console(Deployment(config))) as server:
        status, page = http(server.url + "/")
    assert status == 503
    assert "no AWS credentials" in page and "AWS_PROFILE" in page
    assert "Traceback" not in page


def test_missing_tables_say_what_to_do(aws: AwsEnv) -> None:
    config = ShardlogConfig(
        stream_name=aws.config.stream_name,
        partitions_table="no-such-table",
        endpoint_url=aws.config.endpoint_url,
    )
    with ConsoleServer(Console(Deployment(config))) as server:
        status, page = http(server.url + "/")
    assert status == 503
    assert "table not found" in page and "SHARDLOG_PARTITIONS_TABLE" in page


def test_a_missing_stack_is_one_line(aws: AwsEnv) -> None:
    result = run_cli(aws, "console", "--stack-name", "no-such-stack", "--port", "0")
    assert result.exit_code == 2
    assert "no-such-stack" in result.output and "Traceback" not in result.output


# --- cost ---------------------------------------------------------------------------------
def _console_requests(console: ConsoleUnderTest, path: str) -> Counter[str]:
    with request_log.recording() as recording:
        status, page = console.get(path)
    assert status == 200, page
    return Counter(
        f"{r['service']} {r['headers'].get('x-amz-target') or r['method'] + ' ' + r['path']}"
        for r in recording.records
        if r.get("principal") == CONSOLE_PRINCIPAL
    )


def test_each_page_view_stays_within_its_request_bound(console: ConsoleUnderTest) -> None:
    rows = console.runtime.clients.dynamodb.scan(TableName=console.config.partitions_table)
    partitions = len(rows["Items"])
    first = _partition(console)
    views = {
        "/": "overview",
        "/?lag=1": "overview-lag",
        f"/messages?partition={first}": "messages",
        f"/messages?partition={first}&time=2020-01-01T00:00:00Z": "messages-time",
        f"/record?partition={first}&seq=5": "record",
        "/search?key=nobody": "search",
        "/groups": "groups",
        f"/group?name={GROUP}": "group",
        "/lake": "lake",
    }
    counts = {}
    for path, page in views.items():
        used = _console_requests(console, path)
        bound = queries.request_bound(page, partitions, seq=5 if page == "record" else 0)
        counts[page] = (sum(used.values()), bound)
        assert 0 < sum(used.values()) <= bound, (page, used)
    print(counts)  # the figures docs/CONSOLE.md states


def test_the_console_signs_as_itself_against_the_embedded_aws(console: ConsoleUnderTest) -> None:
    assert principal_of_key(Deployment(console.config).clients().session.get_credentials()
                            .access_key) == CONSOLE_PRINCIPAL  # fmt: skip


def _partition(console: ConsoleUnderTest) -> str:
    items = console.runtime.clients.dynamodb.scan(TableName=console.config.partitions_table)
    return sorted(item["partitionId"]["S"] for item in items["Items"])[0]
