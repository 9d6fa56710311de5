"""`shardlog consume` and `shardlog status --group`: help, usage errors, the status rows."""

from __future__ import annotations

import pytest

from shardlog.clock import ManualClock
from tests.support.aws import AwsEnv
from tests.support.cli import run_cli
from tests.support.factories import (
    Journal,
    append,
    end_partition,
    incoming_records,
    recording_worker,
    register_partition,
    run_until_idle,
)


def test_consume_help_names_settings_with_units() -> None:
    result = run_cli(None, "consume", "--help")
    assert result.exit_code == 0
    for option in ("--lease-duration-ms", "--renew-interval-ms", "--records-per-call",
                   "--idle-poll-interval-ms", "--active-poll-interval-ms",
                   "--active-period-ms", "--max-leases", "--start-position",
                   "--no-graceful-handoff", "--handoff-timeout-ms"):  # fmt: skip
        assert option in result.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["consume", "--group", "g"], "give --processor module:attr, or a command after --"),
        (["consume", "--group", "g", "--processor", "m:f", "--", "cat"], "give --processor"),
        (["consume", "--group", "$ingest", "--", "cat"], "group: names starting with '$'"),
        (
            ["consume", "--group", "g", "--active-poll-interval-ms", "-1", "--", "cat"],
            "-1 is not in the range x>=0",
        ),
        (
            ["consume", "--group", "g", "--renew-interval-ms", "20000", "--", "cat"],
            "renew_interval_ms: must be shorter than lease_duration_ms",
        ),
        (
            ["consume", "--group", "g", "--handoff-timeout-ms", "10000", "--", "cat"],
            "handoff_timeout_ms: must be shorter than lease_duration_ms (10000)",
        ),
        (
            ["consume", "--group", "g", "--handoff-timeout-ms", "3000", "--", "cat"],
            "handoff_timeout_ms: must be longer than renew_interval_ms (3000)",
        ),
        (
            ["consume", "--group", "g", "--start-position", "AT_TIMESTAMP", "--", "cat"],
            "at_timestamp",
        ),
        (["consume", "--group", "g", "--processor", "no_such_module:f"], "cannot load"),
    ],
)
def test_consume_usage_errors_name_the_problem(args: list[str], message: str) -> None:
    result = run_cli(None, *args)
    assert result.exit_code == 2
    assert message in result.output


def test_status_group_lists_owner_checkpoint_and_lag(aws: AwsEnv, clock: ManualClock) -> None:
    register_partition(aws, "p0")
    append(aws, "p0", incoming_records(4))
    register_partition(aws, "c1", ("p0",))
    append(aws, "c1", incoming_records(3))
    unknown = run_cli(aws, "status", "--group", "billing")  # no worker of it ever ran
    assert unknown.exit_code == 2 and "no consumer group 'billing'" in unknown.output

    worker = recording_worker(aws, Journal(), "w-1", clock, group="billing")
    run_until_idle([worker], clock)
    before = run_cli(aws, "status", "--group", "billing")
    assert before.exit_code == 0, before.output
    rows = {line.split()[0]: line for line in before.output.splitlines()[1:]}
    assert rows["p0"].split()[1:5] == ["OPEN", "4", "4", "0"]
    assert "waiting on parents p0" in rows["c1"]

    end_partition(aws, "p0")
    run_until_idle([worker], clock)
    after = run_cli(aws, "status", "--group", "billing")
    rows = {line.split()[0]: line for line in after.output.splitlines()[1:]}
    assert rows["p0"].split()[1:6] == ["ENDED", "4", "SHARD_END", "0", "0"]
    assert rows["c1"].split()[1:7] == ["OPEN", "3", "3", "0", "0", "w-1"]  # lag ms 0: caught up
    assert run_cli(aws, "status", "--group", "$ingest").exit_code == 2
    worker.shutdown()
