"""Start a Spark job run on EMR Serverless: never two of one job at once, never twice for
one schedule time.

- **No overlap**: ListJobRuns of the application in the active states; a run of the same
  job (by run name) still active means this trigger starts nothing.
- **Idempotent**: the ``clientToken`` is a hash of the job and the schedule time, so an
  at-least-once scheduler that invokes twice for one time starts one run: EMR Serverless
  answers the second StartJobRun with the first run.

Two triggers of different schedule times racing past the check could both start a run;
the jobs stay correct anyway (every watermark write is fenced), this only saves the cost.
The trigger Lambda (lambdas/spark_trigger) and ``shardlog spark run`` both use this module;
compaction by volume (shardlog/spark/volume.py) starts its runs with ``start`` under a
token of its own, one per threshold crossing.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from shardlog.clock import Clock, SystemClock
from shardlog.spark.exceptions import JobRunError
from shardlog.spark.jobs import (
    RUN_TIMEOUT_MINUTES,
    JobArgs,
    entry_point,
    run_name,
    spark_submit_parameters,
)

# JobRunState values of a run that is not finished (botocore's emr-serverless model).
ACTIVE_STATES = ("SUBMITTED", "PENDING", "SCHEDULED", "RUNNING", "QUEUED", "CANCELLING")
TERMINAL_STATES = ("SUCCESS", "FAILED", "CANCELLED")


def parse_time(value: str | datetime) -> datetime:
    """An ISO 8601 time (``2022-03-22T18:59:43Z``, as the scheduler sends), in UTC."""
    moment = value if isinstance(value, datetime) else datetime.fromisoformat(value)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC)


def client_token(job: str, scheduled_time: str | datetime) -> str:
    """64 hex characters (the API's limit) from the job and the schedule time, to the second."""
    moment = parse_time(scheduled_time).replace(microsecond=0)
    return hashlib.sha256(f"{run_name(job)}|{moment.isoformat()}".encode()).hexdigest()


@dataclass(frozen=True)
class SparkTarget:
    """Where runs go: the application, the role they run as, the scripts and the archive."""

    application_id: str
    execution_role_arn: str
    scripts_uri: str
    deps_uri: str | None = None


@dataclass(frozen=True)
class TriggerResult:
    job: str
    client_token: str
    started: bool
    job_run_id: str | None = None
    active_run_ids: tuple[str, ...] = field(default_factory=tuple)

    def as_dict(self) -> dict[str, Any]:
        return {
            "job": self.job,
            "clientToken": self.client_token,
            "started": self.started,
            "jobRunId": self.job_run_id,
            "activeRunIds": list(self.active_run_ids),
        }


class SparkTrigger:
    def __init__(
        self,
        emr: Any,
        target: SparkTarget,
        job_args: JobArgs,
        *,
        clock: Clock | None = None,
    ) -> None:
        self.emr = emr  # a boto3 emr-serverless client
        self.target = target
        self.job_args = job_args
        self.clock = clock or SystemClock()

    def start_request(self, job: str, scheduled_time: str | datetime) -> dict[str, Any]:
        """The StartJobRun request of a job for a schedule time (deterministic)."""
        return self.request_with_token(job, client_token(job, scheduled_time))

    def request_with_token(self, job: str, token: str) -> dict[str, Any]:
        """The StartJobRun request of a job under ``token`` (its idempotency key)."""
        return {
            "applicationId": self.target.application_id,
            "clientToken": token,
            "executionRoleArn": self.target.execution_role_arn,
            "name": run_name(job),
            "executionTimeoutMinutes": RUN_TIMEOUT_MINUTES[job],
            "jobDriver": {
                "sparkSubmit": {
                    "entryPoint": entry_point(self.target.scripts_uri, job),
                    "entryPointArguments": self.job_args.to_argv(),
                    "sparkSubmitParameters": spark_submit_parameters(self.target.deps_uri),
                }
            },
        }

    def active_runs(self, job: str) -> list[dict[str, Any]]:
        pages = self.emr.get_paginator("list_job_runs").paginate(
            applicationId=self.target.application_id, states=list(ACTIVE_STATES)
        )
        name = run_name(job)
        return [run for page in pages for run in page["jobRuns"] if run.get("name") == name]

    def trigger(self, job: str, scheduled_time: str | datetime) -> TriggerResult:
        """Start a run of ``job`` unless one is active; same time, same token, same run."""
        token = client_token(job, scheduled_time)
        active = self.active_runs(job)
        if active:
            return TriggerResult(job, token, False, active_run_ids=tuple(r["id"] for r in active))
        response = self.emr.start_job_run(**self.start_request(job, scheduled_time))
        return TriggerResult(job, token, True, job_run_id=response["jobRunId"])

    def start(self, job: str, token: str) -> str:
        """StartJobRun under ``token``, whatever is active; the same token answers the same
        run, so a resend after a lost answer never starts a second one. The run's id."""
        response = self.emr.start_job_run(**self.request_with_token(job, token))
        return str(response["jobRunId"])

    def job_run(self, job_run_id: str) -> dict[str, Any]:
        response = self.emr.get_job_run(
            applicationId=self.target.application_id, jobRunId=job_run_id
        )
        return dict(response["jobRun"])

    def wait(
        self,
        job_run_id: str,
        timeout_s: float,
        poll_s: float = 1.0,
        expect: Sequence[str] = ("SUCCESS",),
    ) -> dict[str, Any]:
        """Poll (bounded) until the run ends; raises JobRunError unless it ends in ``expect``."""
        deadline = self.clock.now_ms() + int(timeout_s * 1000)
        while True:
            run = self.job_run(job_run_id)
            if run["state"] in TERMINAL_STATES:
                if run["state"] not in expect:
                    raise JobRunError(
                        f"job run {job_run_id} ended {run['state']}: {run.get('stateDetails')}",
                        run["state"],
                    )
                return run
            if self.clock.now_ms() >= deadline:
                raise JobRunError(
                    f"job run {job_run_id} still {run['state']} after {timeout_s}s", run["state"]
                )
            self.clock.sleep(poll_s)
