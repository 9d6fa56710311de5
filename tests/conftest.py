"""Session fixtures: one embedded AWS (moto server on 127.0.0.1) per test session, fresh
uniquely named resources per test, an injectable clock. Helpers live in tests/support."""

from __future__ import annotations

import gc
import os
import sys
from collections.abc import Iterator

import pytest

from shardlog.clock import ManualClock
from shardlog.local.embedded import EmbeddedAWS
from shardlog.local.quiet import quiet_powertools
from tests import cpu_costs
from tests.support.aws import AwsEnv, make_env

# Never reach real AWS from a test, whatever the developer's environment holds.
for _name in ("AWS_PROFILE", "AWS_SESSION_TOKEN"):
    os.environ.pop(_name, None)
os.environ["AWS_ACCESS_KEY_ID"] = "testing"
os.environ["AWS_SECRET_ACCESS_KEY"] = "testing"
quiet_powertools()


# A costly session fixture -> the xdist group of the modules that use it.
SHARED_SESSION_FIXTURES = {"synth": "infra", "spark": "spark"}


# A test process holds a large heap that grows for the whole session (the embedded AWS's
# state, the SDK's models, Spark's and Hypothesis's objects). Python's default thresholds
# (700, 10, 10) walk all of it about every hundred thousand allocations: garbage collection
# took 11.4 s of tests/functional/consumer's 104 s of CPU; collected ten times less often,
# 5.3 s. Cycles are still collected, later; no test depends on when.
GC_THRESHOLDS = (50_000, 20, 100)


def pytest_configure(config: pytest.Config) -> None:
    cpu_costs.register(config)  # SHARDLOG_TEST_CPU=<file>: each test's CPU seconds
    gc.set_threshold(*GC_THRESHOLDS)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """With pytest-xdist (`make test` runs two workers, `--dist loadgroup`), keep the modules
    that share a costly session fixture on one worker: the synthesized stack (and the stack
    deployed from it) and the local SparkSession are built once, not once per worker. The
    other modules of tests/infra and tests/spark (real spark-submit runs, the lake on the
    embedded AWS) go to either worker, a module at a time: their module fixtures run once."""
    modules: dict[str, list[pytest.Item]] = {}
    for item in items:
        if "tests/infra/" in item.nodeid or "tests/spark/" in item.nodeid:
            modules.setdefault(item.nodeid.split("::", 1)[0], []).append(item)
    for module, tests in modules.items():
        used = {name for test in tests for name in getattr(test, "fixturenames", ())}
        shared = [group for name, group in SHARED_SESSION_FIXTURES.items() if name in used]
        if not shared and _synthesizes(tests[0]):
            shared = [SHARED_SESSION_FIXTURES["synth"]]
        group = shared[0] if shared else module
        for test in tests:
            test.add_marker(pytest.mark.xdist_group(group))
    if getattr(config.option, "loadgroup", False):  # an xdist worker of `--dist loadgroup`
        for item in items:
            _suffix_groups(item)


def _synthesizes(item: pytest.Item) -> bool:
    """A module that synthesizes a stack of its own in-process (``tests/infra/cdk_synth.py``)
    joins the synthesized stack's group: the jsii runtime it drives (a node process that
    loads aws-cdk-lib) is one per worker and costs about 15 s of CPU to start, a second
    stack on a started one about 4 s (the retention replay's module: 22 s of CPU alone)."""
    cdk_synth = sys.modules.get("tests.infra.cdk_synth")
    module = getattr(item, "module", None)
    if cdk_synth is None or module is None:
        return False
    return any(v is cdk_synth or v is cdk_synth.synthesize for v in vars(module).values())


def _suffix_groups(item: pytest.Item) -> None:
    """Name a grouped item ``<nodeid>@<groups>``, the name xdist's scheduler groups by (any
    ``xdist_group`` mark: these, a module's ``pytestmark``). xdist 3.8 writes it to
    ``item._nodeid``, which pytest 9.2 no longer reads (its node ids live in ``_id``): without
    this every test was scheduled alone, and each worker built the synthesized stack, the
    deployment and a SparkSession of its own."""
    try:
        from _pytest.nodeid import NodeId
    except ImportError:  # an older pytest: xdist's own suffix holds
        return
    names = {
        str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))
        for mark in item.iter_markers("xdist_group")
    }
    suffix = "@" + "_".join(sorted(names))
    if names and not item.nodeid.endswith(suffix):
        item._id = NodeId.parse(item.nodeid + suffix)  # type: ignore[attr-defined]


@pytest.fixture(scope="session")
def endpoint_url() -> Iterator[str]:
    aws = EmbeddedAWS()
    url = aws.start()
    yield url
    aws.stop()


@pytest.fixture
def aws(endpoint_url: str) -> AwsEnv:
    return make_env(endpoint_url)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()
