"""Fixtures of the functional tests (against the embedded AWS). Each concern's folder has
its own conftest for what only it uses; helpers live in tests/support."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest


@pytest.fixture
def preemptive() -> Iterator[None]:
    """Switch threads every 10 us instead of 5 ms while racing, in this process (which also
    runs the embedded AWS's request threads), so an interleaving that real concurrency
    allows shows up within a few rounds instead of by luck."""
    previous = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    try:
        yield
    finally:
        sys.setswitchinterval(previous)
