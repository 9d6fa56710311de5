"""The embedded AWS's EMR Serverless runs job runs with a real local spark-submit."""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import Any

import pytest

from shardlog import constants as C
from shardlog.local import principals
from shardlog.local.emr_serverless import LOG_ROOT, local_spark_conf, prune_unpacked
from shardlog.local.spark import provision_spark
from shardlog.spark.session import local_conf
from shardlog.spark.trigger import TERMINAL_STATES, SparkTarget
from tests.spark.helpers import BLOCKING_JOB, FAILING_JOB, OK_JOB, wait_state
from tests.support.aws import AwsEnv


@pytest.fixture
def scripts(tmp_path: Path) -> Path:
    (tmp_path / "ok.py").write_text(OK_JOB)
    (tmp_path / "failing.py").write_text(FAILING_JOB)
    (tmp_path / "blocking.py").write_text(BLOCKING_JOB)
    (tmp_path / "parent.py").write_text(PARENT_JOB)
    return tmp_path


# Writes who started it, and with what, to its working directory (the run's).
PARENT_JOB = f"""\
import json, os, pathlib, sys
principal = os.environ.get("{C.ENV_LOCAL_PRINCIPAL}")
facts = {{"parent": os.getppid(), "args": sys.argv[1:], "principal": principal}}
pathlib.Path("facts.json").write_text(json.dumps(facts))
"""


@pytest.fixture
def target(aws: AwsEnv, scripts: Path) -> SparkTarget:
    suffix = uuid.uuid4().hex[:8]
    return provision_spark(
        aws.clients,
        application_name=f"test-{suffix}",
        artifacts_bucket=f"artifacts-{suffix}",
        scripts_dir=scripts,
    )


def start(aws: AwsEnv, target: SparkTarget, script: str, token: str | None = None) -> str:
    response = aws.clients.client("emr-serverless").start_job_run(
        applicationId=target.application_id,
        clientToken=token or uuid.uuid4().hex,
        executionRoleArn=target.execution_role_arn,
        name=script,
        jobDriver={
            "sparkSubmit": {
                "entryPoint": f"{target.scripts_uri}{script}.py",
                "entryPointArguments": ["--answer", "42"],
                "sparkSubmitParameters": "--conf spark.archives=s3://x/deps.tar.gz#deps "
                "--conf spark.sql.shuffle.partitions=3",
            }
        },
    )
    return str(response["jobRunId"])


def job_run(aws: AwsEnv, target: SparkTarget, run_id: str) -> dict[str, Any]:
    emr = aws.clients.client("emr-serverless")
    return dict(emr.get_job_run(applicationId=target.application_id, jobRunId=run_id)["jobRun"])


def wait_terminal(aws: AwsEnv, target: SparkTarget, run_id: str) -> Any:
    emr = aws.clients.client("emr-serverless")
    return wait_state(emr, target.application_id, run_id, TERMINAL_STATES)


def test_a_job_that_succeeds_reports_success(aws: AwsEnv, target: SparkTarget) -> None:
    run_id = start(aws, target, "ok")
    assert job_run(aws, target, run_id)["state"] in ("SUBMITTED", "RUNNING")
    run = wait_terminal(aws, target, run_id)
    assert run["state"] == "SUCCESS", run.get("stateDetails")
    assert run["startedAt"] <= run["endedAt"]


def test_a_job_that_fails_reports_failed_with_its_output(aws: AwsEnv, target: SparkTarget) -> None:
    run = wait_terminal(aws, target, start(aws, target, "failing"))
    assert run["state"] == "FAILED"
    assert "this job fails on purpose" in run["stateDetails"]


def test_running_while_the_process_lives_and_idempotent_client_token(
    aws: AwsEnv, target: SparkTarget
) -> None:
    run_id = start(aws, target, "blocking", token="same-token")
    assert start(aws, target, "blocking", token="same-token") == run_id  # no second run
    emr = aws.clients.client("emr-serverless")
    wait_state(emr, target.application_id, run_id, ("RUNNING",))
    listed = emr.list_job_runs(applicationId=target.application_id, states=["RUNNING"])
    assert [r["id"] for r in listed["jobRuns"]] == [run_id]
    (LOG_ROOT / run_id / "release").write_text("")
    assert wait_terminal(aws, target, run_id)["state"] == "SUCCESS"
    assert (
        emr.list_job_runs(applicationId=target.application_id, states=["RUNNING"])["jobRuns"] == []
    )


def test_without_spark_a_run_is_its_script_on_this_python(
    aws: AwsEnv, target: SparkTarget, runs_without_spark: None
) -> None:
    run_id = start(aws, target, "parent")
    run = wait_terminal(aws, target, run_id)
    assert run["state"] == "SUCCESS", run.get("stateDetails")
    facts = json.loads((LOG_ROOT / run_id / "facts.json").read_text())
    # Started by the embedded AWS's process itself: no spark-submit, no JVM in between.
    assert facts == {
        "parent": os.getpid(),
        "args": ["--answer", "42"],
        "principal": principals.SPARK_JOBS,
    }
    failed = wait_terminal(aws, target, start(aws, target, "failing"))
    assert failed["state"] == "FAILED"
    assert "this job fails on purpose" in failed["stateDetails"]


def test_an_application_without_runs_lists_none(aws: AwsEnv, target: SparkTarget) -> None:
    emr = aws.clients.client("emr-serverless")
    assert emr.list_job_runs(applicationId=target.application_id)["jobRuns"] == []


def test_only_local_settings_reach_the_local_spark_submit() -> None:
    conf = local_spark_conf(
        "--conf spark.archives=s3://b/deps.tar.gz#shardlog_deps "
        "--conf spark.emr-serverless.driverEnv.PYSPARK_PYTHON=/usr/bin/python3.11 "
        "--conf spark.executorEnv.PYSPARK_PYTHON=/usr/bin/python3.11 "
        "--conf spark.sql.session.timeZone=UTC"
    )
    pairs = dict(c.split("=", 1) for c in conf[1::2])
    assert pairs["spark.sql.session.timeZone"] == "UTC"
    assert pairs["spark.ui.enabled"] == "false"
    assert local_conf().items() <= pairs.items()  # the tests' session runs the same way
    assert not any(k.startswith(("spark.archives", "spark.emr-serverless")) for k in pairs)
    assert "spark.executorEnv.PYSPARK_PYTHON" not in pairs


def test_unpacked_archives_beyond_the_newest_go_unless_a_running_job_links_them(
    tmp_path: Path,
) -> None:
    root = tmp_path / "archives"
    dirs = [root / f"etag-{n}" for n in range(6)]
    for age, unpacked in enumerate(dirs):
        (unpacked / "pkg").mkdir(parents=True)
        os.utime(unpacked, (1_000_000 + age, 1_000_000 + age))
    (root / "etag-9.partial").mkdir()  # another run unpacking now
    removed = prune_unpacked(root, in_use={dirs[0].resolve()}, kept=3)
    assert sorted(removed) == dirs[1:3]  # the oldest, but not the one a job runs from
    assert sorted(p.name for p in root.iterdir()) == [
        "etag-0",
        "etag-3",
        "etag-4",
        "etag-5",
        "etag-9.partial",
    ]
