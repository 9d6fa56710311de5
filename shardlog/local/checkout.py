"""The local runtime needs a checkout: the wheel holds the package ``shardlog`` only, while the
local runtime runs the Lambda handlers (``lambdas/``) and the Spark jobs (``spark_jobs/``) of
a shardlog checkout in-process. ``make install`` puts the checkout on the venv's path."""

from __future__ import annotations

import importlib.util

from shardlog.exceptions import ConfigurationError

HANDLERS = "lambdas"


def require_checkout() -> None:
    """Refuse, before anything starts, when the handlers cannot be imported."""
    if importlib.util.find_spec(HANDLERS) is None:
        raise ConfigurationError(
            f"the local runtime runs the Lambda handlers of a shardlog checkout ({HANDLERS}/), "
            "which the installed package does not hold: run it from a clone after `make "
            "install`, or with the clone on PYTHONPATH"
        )
