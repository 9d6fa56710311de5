"""The CLI and retention: `read` below the horizon is one line and exit 2, `status` shows the
horizon, `retention run --dry-run` says what it would do and does nothing."""

from __future__ import annotations

import json

from tests.functional.retention.test_trim import later, set_checkpoint, trimmer, write_log
from tests.support.aws import AwsEnv
from tests.support.cli import run_cli

P = "shardId-000000000000"


def test_read_below_the_horizon_is_one_line_and_exit_2(aws: AwsEnv) -> None:
    write_log(aws, [2, 2, 2])
    set_checkpoint(aws, "$compaction", "4")
    trimmer(aws, later(8)).run()

    result = run_cli(aws, "read", "--partition", P, "--from-seq", "1")
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        f"error: partition {P} is trimmed below seq 4 (record retention expired them); "
        "seq 1 was asked for: read from seq 4 on"
    ]
    ok = run_cli(aws, "read", "--partition", P, "--from-seq", "4")
    assert ok.exit_code == 0, ok.output
    assert [json.loads(line)["seq"] for line in ok.output.splitlines()] == [4, 5]

    status = run_cli(aws, "status", "--json")
    rows = {row["partitionId"]: row for row in json.loads(status.output)}
    assert rows[P]["trimHorizonSeq"] == 4
    text = run_cli(aws, "status").output.splitlines()
    assert "horizon" in text[0]
    assert [line.split()[3] for line in text[1:] if line.startswith(P)] == ["4"]


def test_retention_run_dry_run_changes_nothing(aws: AwsEnv) -> None:
    write_log(aws, [2, 2])
    set_checkpoint(aws, "$compaction", "SHARD_END")
    result = run_cli(aws, "retention", "run", "--days", "1", "--dry-run")
    assert result.exit_code == 0, result.output
    assert f"(dry run) {P}: horizon stays 0 (segment 0: younger than 1 days)" in result.output
    as_json = run_cli(aws, "retention", "run", "--days", "1", "--json")
    assert json.loads(as_json.output)[0]["trimHorizonSeq"] == 0


def test_retention_days_limits_on_the_command_line(aws: AwsEnv) -> None:
    for days in ("0", "36501"):
        result = run_cli(aws, "retention", "run", "--days", days)
        assert result.exit_code == 2 and "--days" in result.output
