"""The scheduled trigger: no overlapping runs, one run per schedule time.

The Lambda handler runs in-process against the embedded AWS, whose EMR Serverless starts a
local run; the 'compact' script here blocks until the test releases it, so a run is RUNNING
for exactly as long as the test needs (it does no Spark work: it runs without a JVM,
``emr_serverless.run_without_spark``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from lambdas.spark_trigger.handler import create_handler
from shardlog import constants as C
from shardlog.exceptions import ConfigurationError
from shardlog.function_settings import SparkTriggerSettings
from shardlog.local.emr_serverless import LOG_ROOT
from shardlog.local.lambda_context import LambdaContext
from shardlog.spark.jobs import DEPS_ALIAS, EMR_PYTHON
from shardlog.spark.trigger import TERMINAL_STATES, client_token
from tests.spark.helpers import BLOCKING_JOB, provision_trigger, wait_state
from tests.support.aws import AwsEnv

T1, T2 = "2024-05-01T10:00:00Z", "2024-05-01T11:00:00Z"


def test_same_schedule_time_same_client_token() -> None:
    assert client_token("compact", T1) == client_token("compact", "2024-05-01T10:00:00+00:00")
    assert client_token("compact", T1) == client_token("compact", "2024-05-01T12:00:00+02:00")
    assert client_token("compact", T1) != client_token("compact", T2)
    assert client_token("compact", T1) != client_token("analytics", T1)
    token = client_token("analytics", T2)
    assert len(token) == 64 and all(c in "0123456789abcdef" for c in token)


def test_settings_name_what_is_missing() -> None:
    with pytest.raises(ConfigurationError) as caught:
        SparkTriggerSettings.from_env({C.ENV_BUCKET_NAME: "bucket"})
    for name in (C.ENV_EMR_APPLICATION_ID, C.ENV_SPARK_DEPS_URI, C.ENV_PARTITIONS_TABLE):
        assert name in str(caught.value)


@pytest.fixture
def handler_env(
    aws: AwsEnv, tmp_path: Path, runs_without_spark: None
) -> tuple[Any, Any, SparkTriggerSettings]:
    (tmp_path / "compact.py").write_text(BLOCKING_JOB)
    (tmp_path / "analytics.py").write_text(BLOCKING_JOB)
    settings = provision_trigger(aws, "trigger", tmp_path, compaction_max_records=5000)
    handle = create_handler(settings, aws.clients)
    return handle, aws.clients.client("emr-serverless"), settings


def invoke(handle: Any, job: str, scheduled_time: str) -> dict[str, Any]:
    event = {"job": job, "scheduledTime": scheduled_time}
    return dict(handle(event, LambdaContext("shardlog-spark-trigger")))


def release(run_id: str) -> None:
    # The run's thread creates its work directory; it may not have done so yet.
    workdir = LOG_ROOT / run_id
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "release").write_text("")


def test_no_overlapping_runs_and_one_run_per_schedule_time(handler_env: Any) -> None:
    handle, emr, settings = handler_env
    app = settings.application_id
    first = invoke(handle, "compact", T1)
    assert first["started"] and first["clientToken"] == client_token("compact", T1)
    run_id = first["jobRunId"]
    wait_state(emr, app, run_id, ("RUNNING",))

    # The next schedule fires while the run is still going: nothing starts.
    second = invoke(handle, "compact", T2)
    assert (second["started"], second["jobRunId"], second["activeRunIds"]) == (
        False,
        None,
        [run_id],
    )
    # Another job is not blocked by it.
    other = invoke(handle, "analytics", T2)
    assert other["started"]

    release(run_id)
    release(other["jobRunId"])
    for rid in (run_id, other["jobRunId"]):
        assert wait_state(emr, app, rid, TERMINAL_STATES)["state"] == "SUCCESS"

    # The scheduler retries T1 (at-least-once): the same token gets the same run back.
    retry = invoke(handle, "compact", T1)
    assert retry["jobRunId"] == run_id
    runs = emr.list_job_runs(applicationId=app)["jobRuns"]
    assert sorted(r["name"] for r in runs) == ["shardlog-analytics", "shardlog-compact"]


def test_a_run_carries_the_job_arguments(handler_env: Any) -> None:
    handle, emr, settings = handler_env
    run_id = invoke(handle, "compact", T1)["jobRunId"]
    run = wait_state(emr, settings.application_id, run_id, ("RUNNING", *TERMINAL_STATES))
    driver = run["jobDriver"]["sparkSubmit"]
    assert driver["entryPoint"] == f"{settings.spark_jobs_uri}compact.py"
    args = driver["entryPointArguments"]
    pairs = dict(zip(args[::2], args[1::2], strict=True))
    assert pairs["--bucket"] == settings.bucket
    assert pairs["--partitions-table"] == settings.tables.partitions
    assert pairs["--consumers-table"] == settings.tables.consumers
    assert pairs["--max-records"] == "5000"
    params = driver["sparkSubmitParameters"]
    assert f"spark.archives={settings.spark_deps_uri}#{DEPS_ALIAS}" in params
    assert f"spark.executorEnv.PYSPARK_PYTHON={EMR_PYTHON}" in params
    assert run["executionRole"] == settings.execution_role_arn
    release(run_id)
    wait_state(emr, settings.application_id, run_id, TERMINAL_STATES)


def test_every_job_can_be_scheduled() -> None:
    """The trigger's event schema names exactly the jobs the stack schedules."""
    from typing import get_args

    from lambdas.spark_trigger.handler import ScheduledJob
    from shardlog.spark.jobs import JOBS

    assert get_args(ScheduledJob.model_fields["job"].annotation) == JOBS


def test_a_bad_event_is_rejected(handler_env: Any) -> None:
    handle, _, _ = handler_env
    with pytest.raises(Exception, match="job"):
        invoke(handle, "vacuum", T1)
