"""The CLI: help, errors with field and limit, produce/status/read/sync against the embedded AWS."""

from __future__ import annotations

import base64
import json

import pytest
from click.testing import CliRunner

from shardlog.cli.main import cli
from tests.conftest import AwsEnv


def run(aws: AwsEnv | None, *args: str, input: str | None = None) -> object:
    runner = CliRunner()
    prefix: list[str] = ["--state-file", "/nonexistent/local.json"]
    if aws is not None:
        prefix += [
            "--endpoint-url",
            aws.config.endpoint_url or "",
            "--stream",
            aws.config.stream_name,
            "--bucket",
            aws.config.bucket,
        ]
    env = {}
    if aws is not None:
        env = {
            "SHARDLOG_PARTITIONS_TABLE": aws.config.partitions_table,
            "SHARDLOG_CONSUMERS_TABLE": aws.config.consumers_table,
        }
    return runner.invoke(cli, [*prefix, *args], input=input, env=env, catch_exceptions=False)


@pytest.mark.parametrize(
    "command", [[], ["demo"], ["local", "up"], ["produce"], ["status"], ["read"], ["sync"]]
)
def test_every_command_has_help(command: list[str]) -> None:
    result = run(None, *command, "--help")
    assert result.exit_code == 0, result.output  # type: ignore[attr-defined]
    assert "Usage:" in result.output  # type: ignore[attr-defined]


def test_produce_rejects_a_key_past_the_limit_naming_field_and_limit(aws: AwsEnv) -> None:
    result = run(aws, "produce", "--key", "k" * 257, "--data", "x")
    assert result.exit_code == 2  # type: ignore[attr-defined]
    assert "partitionKey" in result.output and "256" in result.output  # type: ignore[attr-defined]
    ok = run(aws, "produce", "--key", "k" * 256, "--data", "x", "--json")
    assert ok.exit_code == 0, ok.output  # type: ignore[attr-defined]


def test_produce_file_error_names_the_line(aws: AwsEnv) -> None:
    lines = '{"partitionKey": "a", "data": "1"}\n{"partitionKey": "", "data": "2"}\n'
    result = run(aws, "produce", "--file", "-", input=lines)
    assert result.exit_code == 2  # type: ignore[attr-defined]
    assert "line 2" in result.output  # type: ignore[attr-defined]


def test_produce_sync_status_and_read(aws: AwsEnv) -> None:
    from shardlog.writer import LogWriter, WriterSettings
    from tests.functional.helpers import kinesis_records

    lines = "".join(json.dumps({"partitionKey": f"k{i}", "data": f"v{i}"}) + "\n" for i in range(5))
    produced = run(aws, "produce", "--file", "-", "--json", input=lines)
    assert produced.exit_code == 0, produced.output  # type: ignore[attr-defined]
    results = [json.loads(line) for line in produced.output.splitlines() if line.startswith("{")]  # type: ignore[attr-defined]
    assert len(results) == 5 and all(r["sequenceNumber"] for r in results)

    synced = run(aws, "sync", "--json")
    assert json.loads(synced.output)["shards"] == 2  # type: ignore[attr-defined]
    LogWriter(aws.clients, WriterSettings(aws.config.bucket, aws.config.tables)).append(
        "shardId-000000000000", kinesis_records(0, 3)
    )
    status = json.loads(run(aws, "status", "--json").output)  # type: ignore[attr-defined]
    row = next(r for r in status if r["partitionId"] == "shardId-000000000000")
    assert row["nextSeq"] == 3 and row["state"] == "OPEN"

    read = run(aws, "read", "--partition", "shardId-000000000000", "--from-seq", "1")
    records = [json.loads(line) for line in read.output.splitlines()]  # type: ignore[attr-defined]
    assert [r["seq"] for r in records] == [1, 2]
    assert base64.b64decode(records[0]["data"]) == b"record-1"
    assert records[0]["arrivalTime"].endswith("Z")
    assert set(records[0]) == {
        "partitionId",
        "seq",
        "partitionKey",
        "data",
        "kinesisSequenceNumber",
        "arrivalTime",
    }


def test_demo_small_run_verifies(monkeypatch: pytest.MonkeyPatch) -> None:
    result = run(None, "demo", "--records", "600", "--keys", "30", "--json")
    assert result.exit_code == 0, result.output  # type: ignore[attr-defined]
    summary = json.loads(result.output.splitlines()[-1])  # type: ignore[attr-defined]
    assert summary["ok"] is True and summary["records"] == 600
    assert summary["partitions"] == 7, "4 shards + 2 split children + 1 merge child"
    assert summary["awsRequestsPer1000Records"] > 0
