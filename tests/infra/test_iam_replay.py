"""The IAM replay: every request the deployed code makes, checked against the template.

The embedded AWS enforces no IAM, key or bucket policy. Here the workload of
``tests/support/iam/workload.py`` (ingest, shard sync, the producer API, the waker, two Lambda
consumer runners, a consumer group's workers, the Spark trigger and the Spark jobs' driver and
executors, the scheduler's invocation) runs with each function signing as itself; the
embedded AWS records every request with its principal; each is then evaluated with IAM's logic
against that principal's identity policies in the synthesized template and the resource
policies that apply (``tests/support/iam``), implicit authorizations included (per-item
transaction actions, ListBucket for a 404, KMS for encrypted resources, PassRole).

A denied call fails ``test_no_recorded_call_is_denied`` with the call, the role and the
reason. The other direction: every allowed action of a role is used by some recorded call,
or ``NEEDED_BY_AWS`` says why AWS needs it. The report (per principal, every action used
and the statement that allowed it) is in the failure message and at ``$SHARDLOG_IAM_REPORT``
when set.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from shardlog.local import request_log
from tests.infra.cdk_synth import (
    TEST_CONSUMER_GROUP,
    TEST_LAMBDA_CONSUMERS,
    Synthesized,
)
from tests.support.iam.binding import bind
from tests.support.iam.deployment import Deployment
from tests.support.iam.replay import ReplayResult, replay
from tests.support.iam.workload import run_workload

# Functions of the template that run no shardlog code: CDK's own handlers.
NOT_SHARDLOG_CODE = {"index.handler": "aws-cdk-lib's BucketDeployment custom resource"}


@pytest.fixture(scope="module")
def replayed(synth: Synthesized) -> ReplayResult:
    unbound = Deployment(synth.json)
    trigger = unbound.get_att(synth.logical_id(synth.stack.analytics.trigger.function), "Arn")
    with request_log.recording() as recording:
        names = run_workload(TEST_LAMBDA_CONSUMERS, TEST_CONSUMER_GROUP, trigger)
    # Only the workload's own embedded AWS: not what another test of this process left running.
    records = [r for r in recording.records if r.get("host") == names.endpoint]
    result = replay(records, bind(synth, names))
    target = os.environ.get("SHARDLOG_IAM_REPORT")
    if target:
        Path(target).write_text(result.report() + "\n")
    return result


def test_no_recorded_call_is_denied(replayed: ReplayResult) -> None:
    assert not replayed.denied, (
        "requests AWS would refuse (call, role, reason):\n"
        + replayed.denied_report()
        + "\n\nwhat each principal used:\n"
        + replayed.report()
    )


def test_every_function_of_the_template_was_driven(replayed: ReplayResult) -> None:
    """Each function running shardlog code made requests under its own name, so the replay
    covers them all (a new function must be driven by the workload)."""
    deployment = replayed.deployment
    driven = {p for p in replayed.principals}
    missing = []
    for function, handler in deployment.functions().items():
        if handler in NOT_SHARDLOG_CODE:
            continue
        role = deployment.resources[function]["Properties"]["Role"]["Fn::GetAtt"][0]
        arn = deployment.get_att(role, "Arn")
        if not any(deployment.identity(p).arn == arn for p in driven if p.startswith("function:")):
            missing.append(f"{function} ({handler})")
    assert not missing, f"functions the workload never drove: {missing}"
    assert {"emr-serverless-job", "scheduler", f"consumer-group:{TEST_CONSUMER_GROUP}"} <= driven


def test_every_allowed_action_is_used_or_needed_by_aws(replayed: ReplayResult) -> None:
    unused = replayed.unused_grants(replayed.principals)
    assert not unused, "allowed, never used, no reason listed (remove or explain):\n" + "\n".join(
        unused
    )
