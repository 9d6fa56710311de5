"""The whole path on the embedded AWS: `shardlog spark run` -> StartJobRun -> a local
spark-submit of spark_jobs/compact.py and analytics.py -> the lake table and the summary."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from shardlog import constants as C
from shardlog.cli.main import cli
from shardlog.spark.jobs import JobArgs
from tests.spark.helpers import lake_rows, log_rows
from tests.support.aws import AwsEnv
from tests.support.factories import incoming_records, writer_for

P0, P1 = "shardId-000000000000", "shardId-000000000001"


@pytest.fixture
def shardlog(aws: AwsEnv, tmp_path: Path) -> Any:
    runner = CliRunner()
    env = {
        C.ENV_ENDPOINT_URL: aws.config.endpoint_url,
        C.ENV_BUCKET_NAME: aws.config.bucket,
        C.ENV_PARTITIONS_TABLE: aws.config.partitions_table,
        C.ENV_CONSUMERS_TABLE: aws.config.consumers_table,
    }

    def run(*args: str) -> Any:
        return runner.invoke(
            cli,
            ["--state-file", str(tmp_path / "none.json"), *args],
            env=env,
            catch_exceptions=False,
        )

    return run


def test_compaction_analytics_and_maintenance_through_local_emr_serverless(
    aws: AwsEnv, clock: Any, shardlog: Any, tmp_path: Path
) -> None:
    writer = writer_for(aws, clock, segment_max_records=40)
    writer.append(P0, incoming_records(150, start=0))
    writer.append(P1, incoming_records(90, start=500, keys=("q0", "q1", "q2", "q3", "q4")))

    compacted = shardlog("spark", "run", "compact", "--wait", "--json")
    assert compacted.exit_code == 0, compacted.output
    result = json.loads(compacted.output)
    assert (result["started"], result["state"]) == (True, "SUCCESS")
    assert lake_rows(JobArgs.from_config(aws.config).lake()) == log_rows(aws)

    analysed = shardlog("spark", "run", "analytics", "--wait", "--json")
    assert json.loads(analysed.output)["state"] == "SUCCESS", analysed.output

    summary = json.loads(shardlog("spark", "summary", "--json").output)
    assert (summary["records"], summary["duplicateRows"], summary["keys"]) == (240, 0, 10)
    assert [
        (p["partitionId"], p["rows"], p["minSeq"], p["maxSeq"]) for p in summary["partitions"]
    ] == [(P0, 150, 0, 149), (P1, 90, 0, 89)]
    assert sum(h["records"] for h in summary["hourly"]) == 240
    assert summary["ingestDelayMs"]["count"] == 240

    # The daily maintenance, as spark-submit runs it: nothing is old enough to go yet.
    maintained = shardlog("spark", "run", "maintain", "--wait", "--json")
    assert json.loads(maintained.output)["state"] == "SUCCESS", maintained.output
    assert lake_rows(JobArgs.from_config(aws.config).lake()) == log_rows(aws)

    chart = tmp_path / "summary.png"
    table = shardlog("spark", "summary", "--png", str(chart))
    assert table.exit_code == 0 and "duplicate rows 0" in table.output
    assert chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_summary_before_any_analytics_says_what_to_run(shardlog: Any) -> None:
    result = shardlog("spark", "summary")
    assert result.exit_code != 0
    assert "shardlog spark run analytics" in result.output
