"""A quiet Powertools for handlers that run in this process rather than in Lambda.

The local runtime, the tests, the benchmarks and the scripts that build a handler to read
something from it call ``quiet_powertools()`` before the first handler module is imported:
no EMF metric lines on stdout, no X-Ray segments, warnings and errors only. A variable the
user set wins, so ``POWERTOOLS_LOG_LEVEL=DEBUG shardlog local up`` still shows everything.
No Powertools import here: Logger and Tracer read these variables when they are built.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, MutableMapping
from typing import Final

from shardlog import constants as C

QUIET_POWERTOOLS_ENV: Final[Mapping[str, str]] = {
    C.ENV_POWERTOOLS_METRICS_DISABLED: "true",
    C.ENV_POWERTOOLS_TRACE_DISABLED: "true",
    C.ENV_POWERTOOLS_LOG_LEVEL: "WARNING",
}


def quiet_powertools(environ: MutableMapping[str, str] | None = None) -> None:
    """Set the quiet Powertools variables in ``environ`` (the process's), keeping any set."""
    env = os.environ if environ is None else environ
    for name, value in QUIET_POWERTOOLS_ENV.items():
        env.setdefault(name, value)
