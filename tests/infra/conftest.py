"""Synthesize the stack once per session, in-process, with cdk.json's context.

Synthesis is slow (a few seconds: it bundles the Lambda asset), so every test module shares
one template. Nothing here needs an AWS account: the stack is environment-agnostic.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from aws_cdk.assertions import Template

from tests.infra.cdk_synth import Synthesized, synthesize


@pytest.fixture(scope="session")
def synth(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Synthesized]:
    yield synthesize(tmp_path_factory.mktemp("cdk.out"))


@pytest.fixture(scope="session")
def template(synth: Synthesized) -> Template:
    return synth.template
