"""`shardlog spark`: start the Spark jobs (EMR Serverless, or the embedded AWS) and show
the analytics summary."""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime
from typing import Any

import click

from shardlog import constants as C
from shardlog.config import ShardlogConfig
from shardlog.exceptions import ShardlogError
from shardlog.spark.exceptions import JobRunError
from shardlog.spark.jobs import JOBS, JobArgs
from shardlog.spark.trigger import SparkTarget, SparkTrigger


def _config(ctx: click.Context) -> ShardlogConfig:
    return ctx.find_object(ShardlogConfig) or ShardlogConfig.resolve()


def _target(config: ShardlogConfig, options: dict[str, Any]) -> SparkTarget:
    if options["application_id"]:
        missing = [
            f"--{n.replace('_', '-')}"
            for n in ("execution_role_arn", "scripts_uri")
            if not options[n]
        ]
        if missing:
            raise click.UsageError(f"with --application-id, give {' and '.join(missing)} too")
        return SparkTarget(
            options["application_id"],
            options["execution_role_arn"],
            options["scripts_uri"],
            options["deps_uri"],
        )
    if config.is_local:
        from shardlog.local.spark import provision_spark

        return provision_spark(config.clients())
    raise click.UsageError(
        "on AWS give --application-id, --execution-role-arn and --scripts-uri (stack outputs "
        "EmrApplicationId, EmrExecutionRoleArn, SparkJobScriptsUri) and --deps-uri"
    )


@click.group("spark")
def spark() -> None:
    """Spark jobs on EMR Serverless; against the embedded AWS they run a local spark-submit."""


@spark.command("run")
@click.argument("job", type=click.Choice(JOBS))
@click.option("--wait", is_flag=True, help="Wait for the run to end; exit 1 unless SUCCESS.")
@click.option("--timeout", default=1800.0, show_default=True, type=click.FloatRange(min=1))
@click.option(
    "--scheduled-time",
    help="The ISO 8601 time this run stands for (default: now). The same time gives the "
    "same clientToken, so a repeat starts nothing new.",
)
@click.option(
    "--max-records",
    default=C.DEFAULT_COMPACTION_MAX_RECORDS,
    show_default=True,
    type=click.IntRange(min=1),
    help="Compaction: records per partition per run at most.",
)
@click.option("--application-id", envvar=C.ENV_EMR_APPLICATION_ID, help="EMR Serverless app.")
@click.option("--execution-role-arn", envvar=C.ENV_EMR_EXECUTION_ROLE_ARN)
@click.option("--scripts-uri", envvar=C.ENV_SPARK_JOBS_URI, help="s3://<artifacts>/spark_jobs/")
@click.option("--deps-uri", envvar=C.ENV_SPARK_DEPS_URI, help="The archive of make spark-archive.")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def run(
    ctx: click.Context,
    job: str,
    wait: bool,
    timeout: float,
    scheduled_time: str | None,
    max_records: int,
    as_json: bool,
    **options: Any,
) -> None:
    """Start a run of JOB (compact or analytics) unless one is active."""
    config = _config(ctx)
    clients = config.clients()
    trigger = SparkTrigger(
        clients.client("emr-serverless"),
        _target(config, options),
        JobArgs.from_config(config, max_records=max_records),
    )
    result = trigger.trigger(job, scheduled_time or datetime.now(UTC).isoformat())
    payload = result.as_dict()
    text = (
        f"{job}: started job run {result.job_run_id}"
        if result.started
        else f"{job}: not started, active run(s) {', '.join(result.active_run_ids)}"
    )
    failed = False
    if wait and result.job_run_id:
        try:
            state = trigger.wait(result.job_run_id, timeout)["state"]
        except JobRunError as exc:
            state, failed = exc.state or "UNKNOWN", True
            text += f"\n{exc}"
        payload["state"] = state
        text += f"\n{job}: {state}"
    click.echo(json.dumps(payload, sort_keys=True) if as_json else text)
    if failed:
        sys.exit(1)


@spark.command("summary")
@click.option("--json", "as_json", is_flag=True, help="Print the summary JSON as is.")
@click.option(
    "--png", type=click.Path(dir_okay=False, writable=True), help="Also write a chart here."
)
@click.pass_context
def summary(ctx: click.Context, as_json: bool, png: str | None) -> None:
    """The analytics summary (analytics/summary.json): volume, partitions, top keys, delay."""
    from shardlog.spark.summary import load_summary, render_table, write_chart

    config = _config(ctx)
    try:
        data = load_summary(config.clients(), config.bucket)
    except ShardlogError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(json.dumps(data, indent=2, sort_keys=True) if as_json else render_table(data))
    if png:
        click.echo(f"chart written to {write_chart(data, png)}", err=True)
