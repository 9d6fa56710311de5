"""`shardlog smoke` where it fails, and its Athena count, against the stack deployed into the
embedded AWS (tests/infra/conftest.py). Its passing run is in test_deployed_system.py.

Here nothing drives the deployed functions (the runtime only serves the producer API), so
the records produced are never committed: the ``committed`` step runs out of time.
"""

from __future__ import annotations

import json
import re
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from click.testing import CliRunner

from shardlog.cli.main import cli
from shardlog.clock import ManualClock
from shardlog.local.deployed import DeployedRuntime
from shardlog.smoke import AthenaCount, SmokeTest, StepFailed
from shardlog.smoke.counts import count_query
from shardlog.smoke.steps import API, smoke_records
from shardlog.stack import DeployedStack
from tests.infra.shipped import put_foreign_records


def ignore(_event: dict[str, Any], _context: Any) -> dict[str, Any]:
    return {"batchItemFailures": []}


@pytest.fixture(scope="module")
def idle(stack: DeployedStack) -> Iterator[DeployedRuntime]:
    """The deployed API behind a local server; nothing ingests once every open shard has an
    ingest checkpoint (of another producer's record), so that a check that only looked for
    a checkpoint would pass."""
    groups = dict.fromkeys(stack.lambda_consumer_groups, ignore)
    with DeployedRuntime(stack, group_functions=groups) as runtime:
        put_foreign_records(stack)
        assert runtime.settle(timeout_s=30)
        yield runtime


def smoke(stack: DeployedStack, api_url: str, *options: str) -> Any:
    args = ["--state-file", "/nonexistent/local.json", "smoke", "--stack-name", stack.name]
    args += ["--endpoint-url", str(stack.endpoint_url), "--region", stack.region]
    args += ["--api-url", api_url, *options]
    return CliRunner().invoke(cli, args, catch_exceptions=False)


def test_a_step_out_of_time_is_named_and_exits_1(
    stack: DeployedStack, idle: DeployedRuntime
) -> None:
    result = smoke(stack, idle.api_url, "--timeout-s", "0")
    assert result.exit_code == 1, result.output
    lines = result.stdout.splitlines()
    assert [line.split()[:2] for line in lines[:4]] == [
        ["ok", "stack"],
        ["ok", "produce-api"],
        ["ok", "produce-sdk"],
        ["FAIL", "committed"],
    ]
    assert re.search(r"timed out after 0 s: ingest checkpoint of 0 of \d+ shards past", lines[3])
    assert lines[4].startswith("smoke test FAILED at step committed (2 of 7 steps passed")
    assert len(lines) == 5


def test_json_lines_name_the_failed_step(stack: DeployedStack, idle: DeployedRuntime) -> None:
    result = smoke(stack, idle.api_url, "--timeout-s", "0", "--json")
    assert result.exit_code == 1
    objects = [json.loads(line) for line in result.stdout.splitlines()]
    assert [o.get("step") for o in objects[:-1]] == [
        "stack",
        "produce-api",
        "produce-sdk",
        "committed",
    ]
    assert [o["ok"] for o in objects[:-1]] == [True, True, True, False]
    assert objects[-1]["failedStep"] == "committed" and objects[-1]["ok"] is False


def test_waiting_is_bounded_by_the_clock(stack: DeployedStack, idle: DeployedRuntime) -> None:
    """The poll loop waits through the injected ``wait``, never past ``timeout_s`` of the
    injected clock: here a manual clock, so no time passes."""
    clock = ManualClock()
    clients = stack.config().clients()
    counter = AthenaCount(clients.client("athena"), stack.athena_workgroup)
    test = SmokeTest(
        stack, clients, counter, api_url=idle.api_url, clock=clock, timeout_s=30, poll_s=5
    )
    report = test.run()
    assert [s.step for s in report.steps] == ["produce-api", "produce-sdk", "committed"]
    failed = report.failed
    assert failed is not None and failed.step == "committed"
    assert re.match(r"timed out after 30 s: ingest checkpoint of 0 of \d+ shards", failed.line)
    assert clock.slept == [5.0] * 6  # checks at 0, 5, ..., 30 s of the clock


def queue_athena_result(stack: DeployedStack, rows: int, ids: int) -> None:
    """moto's Athena runs no query: it answers the next one with a result queued through
    its own HTTP API (moto-api/static/athena/query-results)."""
    body = {
        "region": stack.region,
        "results": [
            {
                "rows": [
                    {"Data": [{"VarCharValue": "row_count"}, {"VarCharValue": "record_ids"}]},
                    {"Data": [{"VarCharValue": str(rows)}, {"VarCharValue": str(ids)}]},
                ]
            }
        ],
    }
    request = urllib.request.Request(
        f"{stack.endpoint_url}/moto-api/static/athena/query-results",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        assert answer.status == 201


def test_the_count_runs_in_the_stacks_workgroup(stack: DeployedStack) -> None:
    """What this shows: the query goes to the stack's workgroup and names the stack's lake
    table and the smoke's keys, and the answer is read as Athena gives it. What it cannot:
    that Athena's SQL engine counts those rows (moto runs no query); the same filter is
    counted for real by pyiceberg in test_deployed_system.py."""
    athena = stack.config().clients().client("athena")
    counter = AthenaCount(athena, stack.athena_workgroup)
    since = datetime(2026, 1, 1, tzinfo=UTC)
    queue_athena_result(stack, 20, 20)
    handle = counter.start(stack.lake_table, ["k-0", "k'1"], since)
    count = counter.result(handle)
    assert count is not None and (count.rows, count.record_ids) == (20, 20)
    execution = athena.get_query_execution(QueryExecutionId=handle)["QueryExecution"]
    assert execution["WorkGroup"] == stack.athena_workgroup
    assert execution["Query"] == count_query(stack.lake_table, ["k-0", "k'1"], since)
    assert '"shardlog"."events"' in execution["Query"] and "'k''1'" in execution["Query"]
    listed = athena.list_query_executions(WorkGroup=stack.athena_workgroup)
    assert handle in listed["QueryExecutionIds"]


def test_a_count_other_than_the_records_fails_the_athena_step(stack: DeployedStack) -> None:
    clients = stack.config().clients()
    test = SmokeTest(stack, clients, AthenaCount(clients.client("athena"), stack.athena_workgroup))
    test.produced = smoke_records(test.run_id, API)  # ten records, as if produced
    queue_athena_result(stack, 11, 10)  # one of them twice in the lake
    with pytest.raises(StepFailed, match=r"11 rows, 10 record ids .*; expected 10 of each"):
        test.athena()
