"""The CLI: help, errors with field and limit, produce/status/read/sync against the embedded AWS."""

from __future__ import annotations

import base64
import json

import pytest
from click.testing import Result

from tests.support.aws import AwsEnv
from tests.support.cli import run_cli
from tests.support.factories import incoming_records, writer_for


@pytest.mark.parametrize(
    "command",
    [
        [],
        ["demo"],
        ["local", "up"],
        ["console"],
        ["produce"],
        ["status"],
        ["read"],
        ["sync"],
        ["consume"],
        ["spark"],
        ["spark", "run"],
        ["spark", "summary"],
        ["group"],
        ["group", "seek"],
        ["retention"],
        ["retention", "run"],
    ],
)
def test_every_command_has_help(command: list[str]) -> None:
    result = run_cli(None, *command, "--help")
    assert result.exit_code == 0, result.output
    assert "Usage:" in result.output


def test_the_debug_flag_is_global_and_documented() -> None:
    result = run_cli(None, "--help")
    assert "--debug" in result.output and "traceback" in result.output


def test_produce_rejects_a_key_past_the_limit_naming_field_and_limit(aws: AwsEnv) -> None:
    result = run_cli(aws, "produce", "--key", "k" * 257, "--data", "x")
    assert result.exit_code == 2
    assert "partitionKey" in result.output and "256" in result.output
    ok = run_cli(aws, "produce", "--key", "k" * 256, "--data", "x", "--json")
    assert ok.exit_code == 0, ok.output


def test_produce_file_error_names_the_line(aws: AwsEnv) -> None:
    lines = '{"partitionKey": "a", "data": "1"}\n{"partitionKey": "", "data": "2"}\n'
    result = run_cli(aws, "produce", "--file", "-", input=lines)
    assert result.exit_code == 2
    assert "line 2" in result.output


def test_produce_sync_status_and_read(aws: AwsEnv) -> None:
    lines = "".join(json.dumps({"partitionKey": f"k{i}", "data": f"v{i}"}) + "\n" for i in range(5))
    produced = run_cli(aws, "produce", "--file", "-", "--json", input=lines)
    assert produced.exit_code == 0, produced.output
    results = [json.loads(line) for line in produced.output.splitlines() if line.startswith("{")]
    assert len(results) == 5 and all(r["sequenceNumber"] for r in results)

    synced = run_cli(aws, "sync", "--json")
    assert json.loads(synced.output)["shards"] == 2
    writer_for(aws).append("shardId-000000000000", incoming_records(3, start=0))
    status = json.loads(run_cli(aws, "status", "--json").output)
    row = next(r for r in status if r["partitionId"] == "shardId-000000000000")
    assert row["nextSeq"] == 3 and row["state"] == "OPEN"

    read = run_cli(aws, "read", "--partition", "shardId-000000000000", "--from-seq", "1")
    records = [json.loads(line) for line in read.output.splitlines()]
    assert [r["seq"] for r in records] == [1, 2]
    assert base64.b64decode(records[0]["data"]) == b"k1:1"
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
    result = run_cli(None, "demo", "--records", "600", "--keys", "30", "--json")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output.splitlines()[-1])
    assert summary["ok"] is True and summary["records"] == 600
    assert summary["partitions"] == 7, "4 shards + 2 split children + 1 merge child"
    assert summary["awsRequestsPer1000Records"] > 0


def _error_line(result: Result) -> str:
    assert result.exit_code == 2, (result.exit_code, result.output)
    assert "Traceback" not in result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    return lines[0]


PARTITION = "shardId-000000000000"


@pytest.fixture
def three_records(aws: AwsEnv) -> AwsEnv:
    writer_for(aws).append(PARTITION, incoming_records(3, start=0))
    return aws


def _read(aws: AwsEnv, *args: str) -> Result:
    return run_cli(aws, "read", "--partition", PARTITION, *args)


def test_read_refuses_a_range_that_ends_before_it_starts(three_records: AwsEnv) -> None:
    assert _read(three_records, "--from-seq", "2", "--to-seq", "2").output == ""  # empty: edge
    line = _error_line(_read(three_records, "--from-seq", "2", "--to-seq", "1"))
    assert "--to-seq: 1 is below --from-seq 2" in line


def test_read_refuses_a_start_past_the_head(three_records: AwsEnv) -> None:
    assert _read(three_records, "--from-seq", "3").output == ""  # the head: nothing yet, no error
    line = _error_line(_read(three_records, "--from-seq", "4"))
    assert f"--from-seq: 4 is past partition {PARTITION}'s head 3" in line


def test_read_refuses_an_unknown_partition(aws: AwsEnv) -> None:
    line = _error_line(run_cli(aws, "read", "--partition", "shardId-nosuch"))
    assert "no partition 'shardId-nosuch' in table" in line


def test_status_of_an_unknown_group_is_refused(three_records: AwsEnv) -> None:
    line = _error_line(run_cli(three_records, "status", "--group", "nosuch"))
    assert "no consumer group 'nosuch'" in line
    worker = run_cli(three_records, "status", "--group", "nosuch", "--json")
    assert worker.exit_code == 2
