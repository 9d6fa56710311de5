"""The Spark jobs as shipped: each job run the way its StartJobRun asks (entry point,
arguments, spark.archives, the archive's path and a Python of its own), from the archive of
`make spark-archive` alone, on the embedded AWS's EMR Serverless."""

from __future__ import annotations

import subprocess
import tarfile
import venv
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from shardlog.local import emr_serverless
from shardlog.local.spark import provision_spark
from shardlog.spark.archive import REPO_ROOT, build
from shardlog.spark.jobs import ARCHIVE_NAME, DEPS_ALIAS, DEPS_PREFIX, EMR_PYTHON, JOBS, JobArgs
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


def test_the_runs_python_is_emrs_version_and_sees_nothing_but_the_archive(
    archive: Path, bare_python: Path, tmp_path: Path
) -> None:
    with tarfile.open(archive) as tar:
        tar.extractall(tmp_path / DEPS_ALIAS)
    probe = (
        "import sys, importlib.util as u; print(sys.version_info[:2]); "
        "print(u.find_spec('pyspark') is None, u.find_spec('moto') is None); "
        "import shardlog.lake.catalog, shardlog.spark.io, pyiceberg.catalog.glue, pandas; "
        "print(pyiceberg.catalog.glue.__file__)"
    )
    out = subprocess.run(
        [str(bare_python), "-c", probe],
        env={"PYTHONPATH": f"./{DEPS_ALIAS}", "PATH": "/usr/bin:/bin"},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    emr_version = EMR_PYTHON.rsplit("python", 1)[1]
    assert out[0] == str(tuple(int(p) for p in emr_version.split(".")))
    assert out[1] == "True True"  # neither Spark nor the development venv leaks in
    assert out[2].startswith(str(tmp_path / DEPS_ALIAS / "pyiceberg"))


def _deploy_archive(aws: AwsEnv, target: SparkTarget, archive: Path) -> SparkTarget:
    bucket = target.scripts_uri.removeprefix("s3://").split("/", 1)[0]
    key = f"{DEPS_PREFIX}{ARCHIVE_NAME}"
    aws.clients.s3.upload_file(str(archive), bucket, key)
    return SparkTarget(
        target.application_id, target.execution_role_arn, target.scripts_uri, f"s3://{bucket}/{key}"
    )


def test_every_job_runs_from_the_archive_as_its_start_job_run_asks(
    aws: AwsEnv, archive: Path, shipped: Path
) -> None:
    writer = writer_for(aws, None, segment_max_records=40)
    writer.append(P0, incoming_records(120, start=0))
    writer.append(P1, incoming_records(60, start=500))
    target = _deploy_archive(aws, provision_spark(aws.clients), archive)
    # The stack's trigger, with its request: scripts_uri + job.py, JobArgs as arguments, the
    # archive as spark.archives and PYTHONPATH, Python 3.11 on both sides.
    trigger = SparkTrigger(
        aws.clients.client("emr-serverless"), target, JobArgs.from_config(aws.config)
    )
    request = trigger.start_request("compact", datetime.now(UTC))
    assert (
        f"spark.archives={target.deps_uri}#{DEPS_ALIAS}"
        in request["jobDriver"]["sparkSubmit"]["sparkSubmitParameters"]
    )
    for job in JOBS:  # compact, analytics, maintain: in the order the schedules start them
        result = trigger.trigger(job, datetime.now(UTC))
        assert result.job_run_id is not None
        run = trigger.wait(
            result.job_run_id, timeout_s=300, poll_s=0.5, expect=("SUCCESS", "FAILED")
        )
        assert run["state"] == "SUCCESS", f"{job}: {run.get('stateDetails')}"
    assert lake_rows(JobArgs.from_config(aws.config).lake()) == log_rows(aws)
