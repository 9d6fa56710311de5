"""The Lambda entry point every handler module exposes as ``handler``."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

Handler = Callable[[dict[str, Any], Any], dict[str, Any]]


class LazyHandler:
    """Builds the real handler once, from the environment, and delegates to it.

    In Lambda, module import is the cold start: build (and so validate the
    settings) right away, before the first event. Elsewhere (tests, the local
    runtime) importing a handler module must not need its environment.
    """

    def __init__(self, create: Callable[[], Handler]) -> None:
        self._create = create
        self.built: Handler | None = None
        if "AWS_LAMBDA_RUNTIME_API" in os.environ:  # pragma: no cover - only inside Lambda
            self.built = create()

    def __call__(self, event: dict[str, Any], context: Any) -> dict[str, Any]:
        if self.built is None:
            self.built = self._create()
        return self.built(event, context)

    def reset(self) -> None:
        self.built = None
