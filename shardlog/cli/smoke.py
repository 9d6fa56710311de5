"""`shardlog smoke`: check a deployed stack end to end (shardlog/smoke), one line per step."""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from typing import Any

import click
from botocore.exceptions import ClientError

from shardlog import constants as C
from shardlog.config import ShardlogConfig
from shardlog.explain import explain
from shardlog.smoke import STEPS, SmokeReport, SmokeTest, StepResult
from shardlog.smoke.counts import row_counter
from shardlog.stack import DeployedStack, StackOutputsError

EXIT_STEP_FAILED = 1


@click.command("smoke")
@click.option(
    "--stack-name",
    envvar=C.ENV_STACK_NAME,
    default=C.DEFAULT_STACK_NAME,
    show_default=True,
    help=f"The deployed stack (context shardlog:stackName; env {C.ENV_STACK_NAME}).",
)
@click.option(
    "--endpoint-url",
    help="An AWS endpoint other than AWS's own (the embedded AWS's URL); default: the global "
    f"--endpoint-url or {C.ENV_ENDPOINT_URL}, else AWS.",
)
@click.option("--region", help="The stack's region; default: the global --region, AWS_REGION.")
@click.option(
    "--api-url",
    help="The producer API to produce through; default: the stack's ProducerApiUrl output.",
)
@click.option(
    "--timeout-s",
    default=900.0,
    show_default=True,
    type=click.FloatRange(min=0),
    help="How long each step may wait (for commits, consumers, the Spark run, the query).",
)
@click.option("--json", "as_json", is_flag=True, help="One JSON object per step, then a summary.")
@click.pass_context
def smoke(
    ctx: click.Context,
    stack_name: str,
    endpoint_url: str | None,
    region: str | None,
    api_url: str | None,
    timeout_s: float,
    as_json: bool,
) -> None:
    """Check a deployed stack end to end; run it after `cdk deploy`.

    Finds the stack by its CloudFormation outputs, then, one line per step: produces 10
    records with ids through the producer API and 10 through the SDK (produce-api,
    produce-sdk), waits until ingest committed them (committed), reads them back from the
    log, each id exactly once, each key in order (read-back), waits for every Lambda
    consumer group to get past them (lambda-consumers), runs a compaction on EMR Serverless
    (compaction) and counts their rows in the lake table through the stack's Athena
    workgroup (athena).

    The records are real: consumers and the lake get them (keys shardlog-smoke-<run id>-*).
    Exit 0 when every step passed; 1 when one failed (the line names it: later steps are
    not run); 2 for no credentials, no such stack or an endpoint nobody answers.
    """
    base = ctx.find_object(ShardlogConfig) or ShardlogConfig.resolve()
    config = replace(
        base,
        endpoint_url=endpoint_url or base.endpoint_url,
        region=region or base.region,
    )
    ctx.find_root().obj = config  # an error's line names this endpoint and region
    clients = config.clients()
    stack = _stack(clients.client("cloudformation"), stack_name, config)
    test = SmokeTest(
        stack, clients, row_counter(stack, clients), api_url=api_url, timeout_s=timeout_s
    )
    _emit(
        as_json,
        {"step": "stack", "ok": True, "detail": _found(stack), "runId": test.run_id},
        _line("stack", True, f"{_found(stack)}; run {test.run_id}"),
    )
    report = test.run(on_step=lambda result: _echo_step(result, config, as_json))
    _summary(report, as_json)
    if not report.ok:
        sys.exit(EXIT_STEP_FAILED)


def _stack(cloudformation: Any, name: str, config: ShardlogConfig) -> DeployedStack:
    """The stack by its outputs; a stack that does not exist is one line (exit 2)."""
    try:
        return DeployedStack.describe(cloudformation, name)
    except StackOutputsError as exc:
        cause = exc.__cause__
        if isinstance(cause, ClientError) and "does not exist" in str(cause):
            where = f" at {config.endpoint_url}" if config.endpoint_url else ""
            raise StackOutputsError(
                f"no stack {name!r} in {config.region}{where}: pass --stack-name (the stack "
                f"`cdk deploy` created, context shardlog:stackName; or {C.ENV_STACK_NAME}) "
                "and the region it is in (--region)"
            ) from None
        raise


def _found(stack: DeployedStack) -> str:
    where = f" at {stack.endpoint_url}" if stack.endpoint_url else ""
    return f"{stack.name} ({stack.status}) in {stack.region}{where}"


def _line(step: str, ok: bool, detail: str, seconds: float | None = None) -> str:
    took = f" ({seconds:.1f} s)" if seconds is not None else ""
    return f"{'ok  ' if ok else 'FAIL'} {step:<17} {detail}{took}"


def _echo_step(result: StepResult, config: ShardlogConfig, as_json: bool) -> None:
    detail = result.line
    if not result.ok and result.cause is not None:
        detail = explain(result.cause, config) or detail  # AWS's refusal, readably
    payload = {**result.as_json(), "detail": detail}
    _emit(as_json, payload, _line(result.step, result.ok, detail, result.seconds))


def _summary(report: SmokeReport, as_json: bool) -> None:
    failed = report.failed
    passed = sum(s.ok for s in report.steps)
    if failed is None:
        text = f"smoke test passed: {passed} of {len(STEPS)} steps, stack {report.stack}"
    else:
        text = (
            f"smoke test FAILED at step {failed.step} ({passed} of {len(STEPS)} steps passed, "
            f"stack {report.stack}, run {report.run_id})"
        )
    payload = {
        "ok": report.ok,
        "stack": report.stack,
        "runId": report.run_id,
        "failedStep": failed.step if failed else None,
        "passed": passed,
        "steps": len(STEPS),
    }
    _emit(as_json, payload, text)


def _emit(as_json: bool, payload: dict[str, object], text: str) -> None:
    click.echo(json.dumps(payload, sort_keys=True) if as_json else text)
