"""cfn-lint on the synthesized template: zero errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cfnlint.api import lint
from cfnlint.match import Match

from tests.infra.cdk_synth import Synthesized

# CDK adds DependsOn on a Lambda's role next to the GetAtt of that role (W3005): redundant,
# harmless, and not ours to change.
ACCEPTED_WARNINGS = {"W3005"}
# The stack is region-agnostic; lint against a couple of regions that have every service used.
REGIONS = ["us-east-1", "eu-west-1"]


@pytest.fixture(scope="module")
def findings(synth: Synthesized) -> list[Match]:
    path: Path = synth.outdir / synth.stack.template_file
    return list(lint(path.read_text(), regions=REGIONS))


def test_no_errors(findings: list[Match]) -> None:
    errors = [m for m in findings if m.rule.id.startswith("E")]
    assert errors == [], "\n".join(str(m) for m in errors)


def test_only_known_warnings(findings: list[Match]) -> None:
    warnings = [m for m in findings if m.rule.id.startswith("W")]
    unexpected = [m for m in warnings if m.rule.id not in ACCEPTED_WARNINGS]
    assert unexpected == [], "\n".join(str(m) for m in unexpected)


def test_linter_sees_the_template(synth: Synthesized) -> None:
    # Guard against linting an empty or wrong file and passing vacuously.
    template = json.loads((synth.outdir / synth.stack.template_file).read_text())
    assert "AWS::Lambda::EventSourceMapping" in {r["Type"] for r in template["Resources"].values()}
