"""Synthesize the stack once per session, in-process, with cdk.json's context; deploy it once
per session into the session's embedded AWS.

Synthesis is slow (a few seconds: it bundles the Lambda asset), so every test module shares
one template. Nothing here needs an AWS account: the stack is environment-agnostic. The
deployment is shared too: it takes half a minute (the Spark archive is uploaded as
cdk-assets would), and the template names its Glue database and Athena workgroup, so one
copy of the stack fits in an account and region: it gets an embedded AWS and a region of its
own. Tests that write to it look only at what they wrote (heads read before, their own keys
and ids).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from aws_cdk.assertions import Template

from shardlog.config import ShardlogConfig
from shardlog.local.deploy import Deployment, deploy
from shardlog.local.embedded import EmbeddedAWS
from shardlog.stack import DeployedStack
from tests.infra.cdk_synth import Synthesized, synthesize

DEPLOYED_STACK = "Shipped"
# moto's state is one per process (a second embedded AWS shares it), and the template names
# account-wide resources (the Glue database, the Athena workgroup) that other tests create
# in the default region (the demo, the lake tests, the IAM replay's workload): the deployed
# stack gets a region of its own, as a second region of an account keeps them apart.
DEPLOYED_REGION = "eu-west-1"


@pytest.fixture(scope="session")
def synth(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Synthesized]:
    yield synthesize(tmp_path_factory.mktemp("cdk.out"))


@pytest.fixture(scope="session")
def template(synth: Synthesized) -> Template:
    return synth.template


@pytest.fixture(scope="session")
def deployed_endpoint() -> Iterator[str]:
    """An embedded AWS of its own for the deployed stack: the template names account-wide
    resources (the Glue database, the Athena workgroup) that another test of the session
    may have created in the session's."""
    embedded = EmbeddedAWS()
    yield embedded.start()
    embedded.stop()


@pytest.fixture(scope="session")
def deployment(synth: Synthesized, deployed_endpoint: str) -> Deployment:
    clients = ShardlogConfig(endpoint_url=deployed_endpoint, region=DEPLOYED_REGION).clients()
    name = f"{DEPLOYED_STACK}{uuid.uuid4().hex[:6]}"
    return deploy(clients, synth.outdir, synth.stack.stack_name, as_name=name)


@pytest.fixture(scope="session")
def stack(deployment: Deployment, deployed_endpoint: str) -> DeployedStack:
    """The deployed stack, found by its outputs (``DescribeStacks``), as a tool finds it."""
    config = ShardlogConfig(endpoint_url=deployed_endpoint, region=DEPLOYED_REGION)
    cfn = config.clients().client("cloudformation")
    return DeployedStack.describe(cfn, deployment.stack_name)
