"""Analytics: EMR Serverless on the pinned Spark minor, auto-stop, capped; scripts deployed."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
from aws_cdk import App, Aspects, Stack
from aws_cdk import aws_iam as iam
from aws_cdk.assertions import Template
from cdk_nag import AwsSolutionsChecks

from infra import constants as IC
from infra.analytics import Analytics
from infra.settings import StackSettings
from infra.storage import Storage
from tests.infra.cdk_synth import REPO_ROOT, Synthesized, cdk_context, logical_id, synthesize
from tests.infra.test_cdk_nag import unacknowledged_findings

# Spark shipped by each EMR Serverless release we may pin (EMR Serverless release notes).
EMR_SPARK_VERSIONS = {
    "emr-7.1.0": "3.5.0",
    "emr-7.3.0": "3.5.1",
    "emr-7.5.0": "3.5.2",
    "emr-7.7.0": "3.5.3",
    "emr-7.8.0": "3.5.4",
    "emr-7.9.0": "3.5.5",
}


def _application(template: Template) -> dict[str, Any]:
    (app,) = template.find_resources("AWS::EMRServerless::Application").values()
    return app["Properties"]  # type: ignore[no-any-return]


def _pyspark_requirements() -> list[str]:
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    requirements = list(project.get("dependencies", []))
    for extra in project.get("optional-dependencies", {}).values():
        requirements += extra
    return [r for r in requirements if re.match(r"pyspark\b", r)]


def test_release_label_ships_the_pinned_spark_minor(template: Template) -> None:
    props = _application(template)
    assert props["Type"] == "SPARK"
    assert props["ReleaseLabel"] == IC.EMR_RELEASE_LABEL
    assert EMR_SPARK_VERSIONS[IC.EMR_RELEASE_LABEL].startswith(f"{IC.EMR_SPARK_MINOR}.")


def test_local_pyspark_pin_matches_emr_spark_minor() -> None:
    pins = _pyspark_requirements()
    if not pins:
        pytest.skip("pyproject.toml pins no pyspark yet (the Spark jobs bring it)")
    for pin in pins:
        assert re.search(rf"(==|~=|>=)\s*{re.escape(IC.EMR_SPARK_MINOR)}(\.|\b)", pin), pin


def test_application_auto_stops_and_is_capped(template: Template) -> None:
    props = _application(template)
    assert props["AutoStartConfiguration"] == {"Enabled": True}
    assert props["AutoStopConfiguration"] == {
        "Enabled": True,
        "IdleTimeoutMinutes": IC.EMR_IDLE_TIMEOUT_MINUTES,
    }
    assert props["MaximumCapacity"] == {
        "Cpu": IC.EMR_MAX_CPU,
        "Memory": IC.EMR_MAX_MEMORY,
        "Disk": IC.EMR_MAX_DISK,
    }


def test_job_logs_are_encrypted(synth: Synthesized) -> None:
    logs = _application(synth.template)["MonitoringConfiguration"]["S3MonitoringConfiguration"]
    key = synth.stack.analytics.artifacts_key
    key_id = synth.logical_id(key)
    assert logs["EncryptionKeyArn"] == {"Fn::GetAtt": [key_id, "Arn"]}


def test_no_deployment_without_scripts(synth: Synthesized, tmp_path: Path) -> None:
    has_scripts = any((REPO_ROOT / "spark_jobs").rglob("*.py"))
    deployments = synth.resources("Custom::CDKBucketDeployment")
    assert bool(deployments) == has_scripts


@pytest.fixture(scope="module")
def with_scripts(tmp_path_factory: pytest.TempPathFactory) -> Synthesized:
    jobs = tmp_path_factory.mktemp("spark_jobs")
    (jobs / "compact.py").write_text("def main(argv):\n    return 0\n")
    return synthesize(tmp_path_factory.mktemp("cdk.out"), job_scripts_dir=jobs)


def test_scripts_deploy_to_the_artifacts_prefix(with_scripts: Synthesized) -> None:
    (deployment,) = with_scripts.resources("Custom::CDKBucketDeployment").values()
    artifacts = with_scripts.stack.analytics.artifacts_bucket
    bucket_id = with_scripts.logical_id(artifacts)
    props = deployment["Properties"]
    assert props["DestinationBucketName"] == {"Ref": bucket_id}
    assert props["DestinationBucketKeyPrefix"] == IC.JOB_SCRIPTS_PREFIX
    assert props["Prune"] is True


def test_scripts_deployment_keeps_nag_clean(with_scripts: Synthesized) -> None:
    assert unacknowledged_findings(with_scripts.stack) == []


def test_scheduler_grant_is_scoped_and_acknowledged() -> None:
    # A stack of its own: the session stack must not change under the other tests.
    app = App(context=cdk_context())
    stack = Stack(app, "GrantProbe")
    analytics = Analytics(
        stack, "Analytics", storage=Storage(stack, "Storage", settings=StackSettings())
    )
    scheduler = iam.Role(
        stack, "Scheduler", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com")
    )
    analytics.grant_start_job_run(scheduler)
    Aspects.of(app).add(AwsSolutionsChecks())
    template = Template.from_stack(stack)
    (policy,) = [
        p["Properties"]
        for p in template.find_resources("AWS::IAM::Policy").values()
        if {"Ref": logical_id(scheduler)} in p["Properties"]["Roles"]
    ]
    statements = policy["PolicyDocument"]["Statement"]
    (pass_role,) = [s for s in statements if s["Action"] == "iam:PassRole"]
    assert pass_role["Condition"] == {
        "StringEquals": {"iam:PassedToService": "emr-serverless.amazonaws.com"}
    }
    for statement in statements:
        assert "*" not in statement["Resource"]
    scheduler_findings = [f for f in unacknowledged_findings(stack) if "/Scheduler/" in f]
    assert scheduler_findings == []
