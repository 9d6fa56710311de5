"""Synthesis helpers shared by the infra tests (the fixtures live in conftest.py)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aws_cdk import App, CfnElement, Stack
from aws_cdk.assertions import Template
from constructs import IConstruct

from infra import constants as IC
from infra.stack import ShardlogStack, build_app

REPO_ROOT = Path(__file__).resolve().parents[2]
# cdk.json turns unacknowledged cdk-nag findings into a failed synth. Here they become
# annotations instead, so test_cdk_nag.py can list them rather than every test erroring out;
# tests/infra/test_cdk_cli.py synthesizes with cdk.json as is.
STRICT_VALIDATION_FLAG = "@aws-cdk/core:annotationsInValidationReport"
# Synth requires an alarm subscriber (or an explicit opt-out); the tests' stacks have one.
TEST_ALARM_EMAIL = "alarms@example.com"
# Two Lambda consumer groups: one function by ARN with the default on-failure queue, one by
# name with an SNS destination, so the template holds every kind of resource they make.
TEST_LAMBDA_CONSUMERS = [
    {
        "group": "invoices",
        "functionArn": "arn:aws:lambda:us-east-1:123456789012:function:invoices",
        "batchSize": 50,
    },
    {
        "group": "audit",
        "functionName": "audit-consumer",
        "onFailureDestination": "arn:aws:sns:us-east-1:123456789012:audit-failures",
        "maximumRetryAttempts": -1,
    },
]


# A consumer group of workers, so the template holds a group's managed policy.
TEST_CONSUMER_GROUP = "analytics"


# Compaction by volume's threshold in the test stack (the IAM workload stays below it).
TEST_COMPACT_AFTER_RECORDS = 1_000


def cdk_context(**overrides: Any) -> dict[str, Any]:
    context: dict[str, Any] = json.loads((REPO_ROOT / "cdk.json").read_text())["context"]
    context[STRICT_VALIDATION_FLAG] = False
    context[IC.CTX_ALARM_EMAIL] = TEST_ALARM_EMAIL
    context[IC.CTX_LAMBDA_CONSUMERS] = TEST_LAMBDA_CONSUMERS
    context[IC.CTX_CONSUMER_GROUPS] = [TEST_CONSUMER_GROUP]
    # Off by default; on in the test stack, so the IAM replay holds its calls to the template.
    context[IC.CTX_COMPACT_AFTER_RECORDS] = TEST_COMPACT_AFTER_RECORDS
    context.update(overrides)
    return context


@dataclass(frozen=True)
class Synthesized:
    stack: ShardlogStack
    template: Template
    outdir: Path

    @property
    def json(self) -> dict[str, Any]:
        return dict(self.template.to_json())

    def resources(self, resource_type: str) -> dict[str, dict[str, Any]]:
        return {k: dict(v) for k, v in self.template.find_resources(resource_type).items()}

    def ingest_mapping(self) -> dict[str, Any]:
        """The event source mapping of the ingest Lambda (Kinesis), among all the stack's."""
        target = self.logical_id(self.stack.ingest.function)
        (mapping,) = [
            m
            for m in self.resources("AWS::Lambda::EventSourceMapping").values()
            if m["Properties"]["FunctionName"] == {"Ref": target}
        ]
        return mapping

    def logical_id(self, construct: IConstruct) -> str:
        """The logical id of a construct's CloudFormation resource (its default child)."""
        return logical_id(construct)


def logical_id(construct: IConstruct) -> str:
    resource = construct.node.default_child
    assert isinstance(resource, CfnElement), f"{construct.node.path} has no resource"
    return str(Stack.of(resource).resolve(resource.logical_id))


def synthesize(outdir: Path, **kwargs: Any) -> Synthesized:
    context = kwargs.pop("context", None) or cdk_context()
    app = App(context=context, outdir=str(outdir))
    stack = build_app(app, **kwargs)
    app.synth()
    return Synthesized(stack, Template.from_stack(stack), outdir)
