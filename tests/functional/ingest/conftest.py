"""The ingest tests' fixture: writers on the test's resources and clock."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import pytest

from shardlog.clock import ManualClock
from shardlog.writer import LogWriter
from tests.support.aws import AwsEnv
from tests.support.factories import writer_for


@pytest.fixture
def new_writer(aws: AwsEnv, clock: ManualClock) -> Callable[..., LogWriter]:
    """``new_writer(**settings)``: another writer process on the test's resources and clock."""
    factory: Callable[..., Any] = functools.partial(writer_for, aws, clock)
    return factory
