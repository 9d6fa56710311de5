"""cdk-nag AwsSolutions: zero unacknowledged findings; every acknowledgement has a reason."""

from __future__ import annotations

import csv
from typing import Any

from aws_cdk import Stack
from aws_cdk.assertions import Annotations, Match

from tests.infra.cdk_synth import Synthesized

MIN_REASON_CHARS = 40


def unacknowledged_findings(stack: Stack) -> list[str]:
    annotations = Annotations.from_stack(stack)
    found = []
    for message in annotations.find_error("*", Match.string_like_regexp("AwsSolutions-")):
        found.append(f"{message.id}: {str(message.entry.data)[:200]}")
    for message in annotations.find_warning("*", Match.string_like_regexp("AwsSolutions-")):
        found.append(f"{message.id}: {str(message.entry.data)[:200]}")
    return found


def _report(synth: Synthesized) -> list[dict[str, Any]]:
    (path,) = synth.outdir.glob(f"AwsSolutions-*{synth.stack.stack_name}-NagReport.csv")
    with path.open(newline="") as report:
        return list(csv.DictReader(report))


def test_no_unacknowledged_findings(synth: Synthesized) -> None:
    assert unacknowledged_findings(synth.stack) == []


def test_the_report_shows_rules_ran(synth: Synthesized) -> None:
    rows = _report(synth)
    compliance = {row["Compliance"] for row in rows}
    assert "Compliant" in compliance  # the pack really evaluated the stack
    assert "Non-Compliant" not in compliance


def test_every_acknowledgement_carries_its_reason(synth: Synthesized) -> None:
    suppressed = [row for row in _report(synth) if row["Compliance"] == "Suppressed"]
    assert suppressed
    for row in suppressed:
        reason = row["Exception Reason"]
        assert len(reason) >= MIN_REASON_CHARS, f"{row['Rule ID']} on {row['Resource ID']}"
