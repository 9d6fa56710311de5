"""Listening on a local port: a port someone else holds is the user's to fix, not a bug.

Binding raises ``OSError(EADDRINUSE)`` deep inside the server's constructor; ``listening``
turns that one case into ``PortInUseError`` naming what wanted the port, so the CLI can name
the option that chooses it. Any other OSError keeps its traceback.
"""

from __future__ import annotations

import errno
from collections.abc import Iterator
from contextlib import contextmanager

from shardlog.exceptions import PortInUseError

# What listens, as PortInUseError.what says it (the CLI maps each to its option).
EMBEDDED_AWS = "embedded AWS"
PRODUCER_API = "producer HTTP API"


@contextmanager
def listening(what: str, host: str, port: int) -> Iterator[None]:
    """Around the bind of ``what`` on ``host:port``: EADDRINUSE becomes PortInUseError."""
    try:
        yield
    except OSError as exc:
        if exc.errno != errno.EADDRINUSE:
            raise
        raise PortInUseError(what, host, port) from exc
