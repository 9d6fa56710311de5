"""The Spark jobs as shipped: each job run the way its StartJobRun asks (entry point,
arguments, spark.archives, the archive's path and a Python of its own), from the archive of
`make spark-archive` alone, on the embedded AWS's EMR Serverless, started and waited for by
`shardlog spark run` as a user runs it against a deployed stack; then what the run's Python
sees (EMR's version, nothing but the archive the run unpacked), the lake table and the
summary the runs left.

One set of runs serves the whole path (`shardlog spark run` -> StartJobRun -> a local
spark-submit of compaction, analytics and maintenance -> the lake table and the summary):
each spark-submit costs tens of seconds, and running the jobs once from the venv and once
from the archive proved nothing the archive's runs do not."""

from __future__ import annotations

import json
import subprocess
import venv
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from shardlog import constants as C
from shardlog.cli.main import cli
from shardlog.local import emr_serverless
from shardlog.local.spark import provision_spark
from shardlog.spark.archive import REPO_ROOT, build
from shardlog.spark.jobs import ARCHIVE_NAME, DEPS_ALIAS, DEPS_PREFIX, EMR_PYTHON, JobArgs
from shardlog.spark.trigger import SparkTarget, SparkTrigger
from tests.spark.helpers import lake_rows, log_rows
from tests.support.aws import AwsEnv
from tests.support.factories import incoming_records, writer_for

ARCHIVE = REPO_ROOT / "build" / "spark" / ARCHIVE_NAME
P0, P1 = "shardId-000000000000", "shardId-000000000001"


@pytest.fixture(scope="module")
def archive() -> Path:
    """`make spark-archive`'s output (built here if missing: pip downloads the wheels)."""
    return build(ARCHIVE)


@pytest.fixture(scope="module")
def bare_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Python with no package of its own: it stands for the EMR image's interpreter the
    run names, so whatever the job imports must come from the archive (or Spark's zip)."""
    home = tmp_path_factory.mktemp("emr-python")
    venv.EnvBuilder(with_pip=False, system_site_packages=False).create(home)
    return home / "bin" / "python"


@pytest.fixture
def shipped(bare_python: Path) -> Iterator[Path]:
    emr_serverless.run_as_shipped(bare_python)
    yield bare_python
    emr_serverless.run_as_shipped(None)


@pytest.fixture
def shardlog(aws: AwsEnv, tmp_path: Path) -> Any:
    """The CLI on the test's embedded AWS; ``target`` adds a deployed stack's Spark outputs
    (the environment variables `shardlog spark run` reads them from)."""
    runner = CliRunner()
    env = {
        C.ENV_ENDPOINT_URL: aws.config.endpoint_url,
        C.ENV_BUCKET_NAME: aws.config.bucket,
        C.ENV_PARTITIONS_TABLE: aws.config.partitions_table,
        C.ENV_CONSUMERS_TABLE: aws.config.consumers_table,
    }

    def run(*args: str, target: SparkTarget | None = None) -> Any:
        outputs = {}
        if target is not None:
            outputs = {
                C.ENV_EMR_APPLICATION_ID: target.application_id,
                C.ENV_EMR_EXECUTION_ROLE_ARN: target.execution_role_arn,
                C.ENV_SPARK_JOBS_URI: target.scripts_uri,
                C.ENV_SPARK_DEPS_URI: target.deps_uri,
            }
        return runner.invoke(
            cli,
            ["--state-file", str(tmp_path / "none.json"), *args],
            env=env | outputs,
            catch_exceptions=False,
        )

    return run


def _probe_the_runs_python(bare_python: Path, workdir: Path) -> None:
    """The run's Python is EMR's version and sees nothing but the archive the run unpacked
    (in its working directory, under its alias), as the job's own imports do."""
    probe = (
        "import sys, importlib.util as u; print(sys.version_info[:2]); "
        "print(u.find_spec('pyspark') is None, u.find_spec('moto') is None); "
        "import shardlog.lake.catalog, shardlog.spark.io, pyiceberg.catalog.glue, pandas; "
        "print(pyiceberg.catalog.glue.__file__)"
    )
    out = subprocess.run(
        [str(bare_python), "-c", probe],
        env={"PYTHONPATH": f"./{DEPS_ALIAS}", "PATH": "/usr/bin:/bin"},
        cwd=workdir,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    emr_version = EMR_PYTHON.rsplit("python", 1)[1]
    assert out[0] == str(tuple(int(p) for p in emr_version.split(".")))
    assert out[1] == "True True"  # neither Spark nor the development venv leaks in
    unpacked = (workdir / DEPS_ALIAS).resolve()
    assert Path(out[2]).resolve().is_relative_to(unpacked / "pyiceberg")


def _deploy_archive(aws: AwsEnv, target: SparkTarget, archive: Path) -> SparkTarget:
    bucket = target.scripts_uri.removeprefix("s3://").split("/", 1)[0]
    key = f"{DEPS_PREFIX}{ARCHIVE_NAME}"
    aws.clients.s3.upload_file(str(archive), bucket, key)
    return SparkTarget(
        target.application_id, target.execution_role_arn, target.scripts_uri, f"s3://{bucket}/{key}"
    )


def test_every_job_runs_from_the_archive_through_shardlog_spark_run(
    aws: AwsEnv, clock: Any, archive: Path, shipped: Path, shardlog: Any, tmp_path: Path
) -> None:
    writer = writer_for(aws, clock, segment_max_records=40)
    writer.append(P0, incoming_records(150, start=0))
    writer.append(P1, incoming_records(90, start=500, keys=("q0", "q1", "q2", "q3", "q4")))
    target = _deploy_archive(aws, provision_spark(aws.clients), archive)
    # The stack's trigger, with its request: scripts_uri + job.py, JobArgs as arguments, the
    # archive as spark.archives and PYTHONPATH, Python 3.11 on both sides.
    emr = aws.clients.client("emr-serverless")
    trigger = SparkTrigger(emr, target, JobArgs.from_config(aws.config))
    request = trigger.start_request("compact", datetime.now(UTC))
    assert (
        f"spark.archives={target.deps_uri}#{DEPS_ALIAS}"
        in request["jobDriver"]["sparkSubmit"]["sparkSubmitParameters"]
    )

    # In the order the schedules start them: compaction, analytics, maintenance.
    compacted = shardlog("spark", "run", "compact", "--wait", "--json", target=target)
    assert compacted.exit_code == 0, compacted.output
    result = json.loads(compacted.output)
    assert (result["started"], result["state"]) == (True, "SUCCESS")
    _probe_the_runs_python(shipped, emr_serverless.LOG_ROOT / result["jobRunId"])
    assert lake_rows(JobArgs.from_config(aws.config).lake()) == log_rows(aws)

    analysing = json.loads(shardlog("spark", "run", "analytics", "--json", target=target).output)
    # Without the stack's outputs, on the embedded AWS, the CLI provisions the local
    # application: the same one, whose active run keeps a second one from starting.
    again = json.loads(shardlog("spark", "run", "analytics", "--json").output)
    assert (again["started"], again["activeRunIds"]) == (False, [analysing["jobRunId"]])
    run = trigger.wait(analysing["jobRunId"], 300, poll_s=0.5, expect=("SUCCESS", "FAILED"))
    assert run["state"] == "SUCCESS", run.get("stateDetails")
    summary = json.loads(shardlog("spark", "summary", "--json").output)
    assert (summary["records"], summary["duplicateRows"], summary["keys"]) == (240, 0, 10)
    assert [
        (p["partitionId"], p["rows"], p["minSeq"], p["maxSeq"]) for p in summary["partitions"]
    ] == [(P0, 150, 0, 149), (P1, 90, 0, 89)]
    assert sum(h["records"] for h in summary["hourly"]) == 240
    assert summary["ingestDelayMs"]["count"] == 240

    # The daily maintenance: nothing is old enough to go yet.
    maintained = shardlog("spark", "run", "maintain", "--wait", "--json", target=target)
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
