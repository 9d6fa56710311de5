"""`npx cdk synth` through the CLI pinned in package.json, offline, as a user would run it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from infra import constants as IC
from tests.infra.cdk_synth import (
    REPO_ROOT,
    TEST_ALARM_EMAIL,
    TEST_COMPACT_AFTER_RECORDS,
    TEST_CONSUMER_GROUP,
    TEST_LAMBDA_CONSUMERS,
    Synthesized,
)

CDK_BIN = REPO_ROOT / "node_modules" / ".bin" / "cdk"
VENV_BIN = REPO_ROOT / ".venv" / "bin"
SYNTH_TIMEOUT_S = 240


def _cdk_synth(outdir: Path, *context: str) -> subprocess.CompletedProcess[str]:
    """`npx cdk synth` as a user runs it, with these `--context key=value` pairs."""
    if not CDK_BIN.exists():
        message = "the pinned CDK CLI is not installed: run `make cdk-cli` (npm ci)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message)
        pytest.skip(message)
    if shutil.which("npx") is None:
        pytest.fail("npx (Node.js) is required to run the CDK CLI")
    env = {
        **os.environ,
        # cdk.json runs `python3 app.py`: it must be the project's interpreter.
        "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        "CDK_DISABLE_VERSION_CHECK": "1",
        "CDK_DISABLE_CLI_TELEMETRY": "true",
        "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "18,20",
        "JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION": "1",
    }
    # Synth must never need an account: drop anything that could point at one.
    for name in ("AWS_PROFILE", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        env.pop(name, None)
    command = [
        "npx",
        "--no-install",
        "cdk",
        "synth",
        "--quiet",
        "--no-notices",
        "--no-version-reporting",
        *(arg for pair in context for arg in ("--context", pair)),
        "--output",
        str(outdir),
    ]
    return subprocess.run(
        command,
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=SYNTH_TIMEOUT_S,
        check=False,
    )


@pytest.fixture(scope="module")
def cli_outdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    outdir = tmp_path_factory.mktemp("cli.cdk.out")
    # cdk.json names no alarm subscriber on purpose: synth must be told who hears alarms.
    result = _cdk_synth(
        outdir,
        f"{IC.CTX_ALARM_EMAIL}={TEST_ALARM_EMAIL}",
        f"{IC.CTX_LAMBDA_CONSUMERS}={json.dumps(TEST_LAMBDA_CONSUMERS)}",
        f"{IC.CTX_CONSUMER_GROUPS}={json.dumps([TEST_CONSUMER_GROUP])}",
        f"{IC.CTX_COMPACT_AFTER_RECORDS}={TEST_COMPACT_AFTER_RECORDS}",
    )
    assert result.returncode == 0, f"cdk synth failed:\n{result.stdout}\n{result.stderr}"
    return outdir


def test_cli_synth_without_an_alarm_subscriber_says_what_to_set(tmp_path: Path) -> None:
    result = _cdk_synth(tmp_path)
    assert result.returncode != 0
    output = result.stdout + result.stderr
    assert IC.CTX_ALARM_EMAIL in output and IC.CTX_NO_ALARM_SUBSCRIBER in output, output
    assert "Traceback" not in output


def test_pinned_cli_is_major_2() -> None:
    package = json.loads((REPO_ROOT / "package.json").read_text())
    assert package["devDependencies"]["aws-cdk"].startswith("^2")
    lock = json.loads((REPO_ROOT / "package-lock.json").read_text())
    assert lock["packages"]["node_modules/aws-cdk"]["version"].startswith("2.")


def _stable_ids(resources: dict[str, Any]) -> set[str]:
    # An API Gateway Deployment's logical id is a hash CDK computes over the whole API,
    # including synthesis metadata, so it is compared by type only.
    return {k for k, r in resources.items() if r["Type"] != "AWS::ApiGateway::Deployment"}


def test_cli_synth_matches_in_process_synth(cli_outdir: Path, synth: Synthesized) -> None:
    template = json.loads((cli_outdir / synth.stack.template_file).read_text())
    assert _stable_ids(template["Resources"]) == _stable_ids(synth.json["Resources"])
    assert sorted(r["Type"] for r in template["Resources"].values()) == sorted(
        r["Type"] for r in synth.json["Resources"].values()
    )
    assert set(template["Outputs"]) == set(synth.json["Outputs"])


def test_cli_synth_enforces_nag(cli_outdir: Path) -> None:
    # With cdk.json's strict validation flag, reaching here means no finding was left.
    (report,) = cli_outdir.glob("AwsSolutions-*NagReport.csv")
    assert "Non-Compliant" not in report.read_text()
