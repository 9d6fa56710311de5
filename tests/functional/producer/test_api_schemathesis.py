"""Schemathesis against docs/openapi.json on the local server (real HTTP, embedded Kinesis):
schema-valid and schema-violating requests alike get no 5xx and no answer outside the
document (status, media type, body schema), and bad input is refused with a 4xx."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_schema_conformance,
    status_code_conformance,
)

from shardlog.clock import ManualClock
from tests.support import DOCS
from tests.support.api import serve
from tests.support.aws import stream_env
from tests.support.readback import read_stream

DOC = DOCS / "openapi.json"
# The local server takes unsigned requests (IAM auth is API Gateway's, on AWS): do not
# generate Authorization headers, nor count their absence as invalid input.
CONFIG = schemathesis.Config.from_dict({"generation": {"with-security-parameters": False}})
# Loaded by a fixture, so the operations' tests (the coverage phase's cases among them, about
# 20 s of CPU) are built when this test runs, on one worker, not by every process collecting.
schema = schemathesis.pytest.from_fixture("api_schema")
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    negative_data_rejection,
]


@pytest.fixture(scope="module")
def api_schema() -> schemathesis.schemas.BaseSchema:
    return schemathesis.openapi.from_path(str(DOC), config=CONFIG)


@pytest.fixture(autouse=True)
def _node_id_for_schemathesis(request: pytest.FixtureRequest) -> None:
    """schemathesis 4.32's lazy tests read ``node._nodeid``, which pytest 9 no longer sets
    (only to label each operation's subtest)."""
    if not hasattr(request.node, "_nodeid"):
        request.node._nodeid = request.node.nodeid


@pytest.fixture(scope="module")
def api_url(endpoint_url: str) -> Iterator[str]:
    env = stream_env(endpoint_url)
    for api in serve(env, ManualClock()):
        yield api.url
    # Whatever the API acknowledged is in the stream (and the stream is readable).
    assert isinstance(read_stream(env), list)


@schema.parametrize()
@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
def test_api_conforms_to_its_openapi_document(case: schemathesis.Case, api_url: str) -> None:
    case.call_and_validate(base_url=api_url, checks=CHECKS)
