"""Synthesize the stack once per session, in-process, with cdk.json's context; deploy it once
per session into the session's embedded AWS.

Synthesis is slow (a few seconds: it bundles the Lambda asset), so every test module shares
one template. Nothing here needs an AWS account: the stack is environment-agnostic. The
deployment is shared too: it takes half a minute (the Spark archive is uploaded as
cdk-assets would), and the template names its Glue database and Athena workgroup, so one
copy of the stack fits in an account and region, hence in one embedded AWS. Tests that
write to it look only at what they wrote (heads read before, their own keys and ids).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from aws_cdk.assertions import Template

from shardlog.config import ShardlogConfig
from shardlog.local.deploy import Deployment, deploy
from shardlog.stack import DeployedStack
from tests.infra.cdk_synth import Synthesized, synthesize

DEPLOYED_STACK = "Shipped"


@pytest.fixture(scope="session")
def synth(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Synthesized]:
    yield synthesize(tmp_path_factory.mktemp("cdk.out"))


@pytest.fixture(scope="session")
def template(synth: Synthesized) -> Template:
    return synth.template


@pytest.fixture(scope="session")
def deployment(synth: Synthesized, endpoint_url: str) -> Deployment:
    clients = ShardlogConfig(endpoint_url=endpoint_url).clients()
    name = f"{DEPLOYED_STACK}{uuid.uuid4().hex[:6]}"
    return deploy(clients, synth.outdir, synth.stack.stack_name, as_name=name)


@pytest.fixture(scope="session")
def stack(deployment: Deployment, endpoint_url: str) -> DeployedStack:
    """The deployed stack, found by its outputs (``DescribeStacks``), as a tool finds it."""
    cfn = ShardlogConfig(endpoint_url=endpoint_url).clients().client("cloudformation")
    return DeployedStack.describe(cfn, deployment.stack_name)
