"""Faults injected through botocore's own event hooks on a client set (never a stub):
the request is real and reaches the embedded AWS; the hook only decides *when*."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from shardlog.aws import Clients


class StallBefore:
    """Run ``action`` (a stall: the clock moves, other writers act) just before the
    ``nth`` AWS call whose event name starts with ``prefix`` (e.g. "dynamodb",
    "s3.PutObject") on ``clients``; every call still goes out afterwards.

    ``calls`` records each matching operation name, in order, so a test can show which
    call the stall preceded.
    """

    def __init__(
        self, clients: Clients, prefix: str, nth: int, action: Callable[[], object]
    ) -> None:
        self.prefix = prefix
        self.nth = nth
        self.action = action
        self.calls: list[str] = []
        self.fired = False
        self._lock = threading.Lock()
        clients.add_hook(f"before-call.{prefix}", self._before_call)

    def _before_call(self, model: Any = None, **_: Any) -> None:
        with self._lock:
            self.calls.append(getattr(model, "name", "?"))
            due = len(self.calls) == self.nth and not self.fired
            if due:
                self.fired = True
        if due:
            self.action()
