"""`shardlog local up --lambda-consumer GROUP=MODULE:FUNCTION`: a user's function, in a
module of the current directory, gets every record as a Kinesis event; `status --group`
shows the group; a bad GROUP=MODULE:FUNCTION is refused before anything starts."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.cli import (
    kinesis_for,
    local_up_process,
    run_cli,
    shardlog_subprocess,
    wait_for,
)

FUNCTION = """\
import base64, json, os

def handle(event, context):
    with open(os.environ["SEEN_FILE"], "a") as out:
        for record in event["Records"]:
            out.write(json.dumps({
                "eventID": record["eventID"],
                "seq": int(record["kinesis"]["sequenceNumber"]),
                "data": base64.b64decode(record["kinesis"]["data"]).decode(),
            }) + "\\n")
    return {"batchItemFailures": []}
"""


@pytest.fixture
def up_with_a_group(tmp_path: Path) -> Iterator[tuple[Path, dict[str, Any], Path]]:
    (tmp_path / "my_consumer.py").write_text(FUNCTION)
    seen = tmp_path / "seen.jsonl"
    state = tmp_path / "local.json"
    env = {"SEEN_FILE": str(seen), "PYTHONPATH": os.pathsep.join([*sys.path, str(tmp_path)])}
    args = ("--shards", "2", "--lambda-consumer", "mine=my_consumer:handle")
    with local_up_process(state, *args, cwd=tmp_path, env=env) as running:
        yield state, running, seen


def test_a_local_lambda_consumer_gets_every_record_once(up_with_a_group: Any) -> None:
    state_file, state, seen = up_with_a_group
    group = state["lambdaConsumers"]["mine"]
    assert group["function"] == "my_consumer:handle" and group["onFailureQueueUrl"]
    kinesis = kinesis_for(state)
    records = [{"PartitionKey": f"k{i % 7}", "Data": f"r{i}".encode()} for i in range(60)]
    for start in range(0, 60, 7):  # at most one record per key per call: order kept
        kinesis.put_records(StreamName=state["streamName"], Records=records[start : start + 7])

    def delivered() -> list[dict[str, Any]]:
        if not seen.exists():
            return []
        return [json.loads(line) for line in seen.read_text().splitlines()]

    wait_for(lambda: len(delivered()) >= 60, "the Lambda consumer to get every record")
    got = delivered()
    assert sorted(r["data"] for r in got) == sorted(f"r{i}" for i in range(60))
    assert len({r["eventID"] for r in got}) == 60  # each record once

    def caught_up() -> bool:
        rows = json.loads(shardlog_subprocess(state_file, "status", "--group", "mine", "--json"))
        return sum(r["lagRecords"] for r in rows) == 0 and all(r["lagMs"] == 0 for r in rows)

    wait_for(caught_up, "the group's checkpoints to reach the heads")
    rows = json.loads(shardlog_subprocess(state_file, "status", "--group", "mine", "--json"))
    assert {r["groupKind"] for r in rows} == {"lambda"}


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("no-equals-sign", "expected GROUP=MODULE:FUNCTION"),
        ("g=no_colon", "expected MODULE:FUNCTION"),
        ("$ingest=os:getcwd", "reserved"),
        ("g=a_module_that_does_not_exist:f", "cannot import"),
        ("g=os:no_such_function", "has no function 'no_such_function'"),
        ("g=os:getcwd?batchSize=10001", "group 'g': batchSize: Input should be less than"),
        (
            'g=os:getcwd?filterCriteria=[{"pattern":{"data":{"amount":[{"numeric":[">","ten"]}]}}}]',
            "group 'g': filterCriteria[0].pattern.data.amount[0].numeric: must be a number",
        ),
    ],
)
def test_a_bad_lambda_consumer_is_refused_before_anything_starts(spec: str, message: str) -> None:
    result = run_cli(None, "local", "up", "--lambda-consumer", spec, "--max-seconds", "0")
    assert result.exit_code == 2
    assert message in result.output
    assert "embedded AWS at" not in result.output
