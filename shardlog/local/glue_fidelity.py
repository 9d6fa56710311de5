"""Make moto's Glue ``UpdateTable`` honour ``VersionId``, as Glue does.

Glue's table API is an optimistic lock: ``GetTable`` returns the table's ``VersionId``, and
an ``UpdateTable`` that names a ``VersionId`` is applied only while that version is still the
table's current one; otherwise Glue refuses it with ``ConcurrentModificationException`` and
changes nothing. Iceberg's Glue catalogs (pyiceberg's included) commit exactly so: read the
table, write the new metadata file, ``UpdateTable`` conditioned on the version read.

moto 5.2 returns a ``VersionId`` from ``GetTable`` that changes on each ``UpdateTable`` (its
``FakeTable`` counts versions), but it ignores the ``VersionId`` an ``UpdateTable`` names and
always applies it. Two things Glue does can then never happen on the embedded AWS:

- **a refused commit**: two commits read the same version; Glue applies the first and refuses
  the second. moto applies both, and the second silently replaces the first's metadata (the
  first's snapshot vanishes from the table while its writer believes it committed);
- **a refused resend**: Glue applies an ``UpdateTable``, its answer is lost, botocore resends
  the same request, and Glue refuses the resend (its ``VersionId`` is no longer current), so
  the caller sees a refusal for a commit that landed. moto applies the resend again.

``apply()`` checks the named ``VersionId`` against the table's current version and applies
the update under one lock, so check and update are one atomic step under moto's threaded
server (as ``conditional_writes`` does for DynamoDB and S3). An ``UpdateTable`` without a
``VersionId`` is applied unconditionally, as Glue does.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any

from moto.core.responses import ActionResult
from moto.glue.exceptions import GlueClientError
from moto.glue.responses import GlueResponse

from shardlog.local.conditional_writes import serialized

# Glue's own words for a stale VersionId.
REFUSED_MESSAGE = "Update table failed due to concurrent modifications."

_lock = threading.Lock()
_applied = False
_apply_lock = threading.Lock()


class ConcurrentModificationException(GlueClientError):
    def __init__(self, message: str) -> None:
        super().__init__("ConcurrentModificationException", message)


def current_version(response: GlueResponse, database: str, table: str) -> str:
    """The table's current ``VersionId``, as ``GetTable`` returns it."""
    return str(response.glue_backend.get_table(database, table).as_dict()["VersionId"])


def _versioned(update_table: Callable[[GlueResponse], ActionResult]) -> Callable[..., Any]:
    @functools.wraps(update_table)
    def wrapper(self: GlueResponse) -> ActionResult:
        parameters = self.parameters
        wanted = parameters.get("VersionId")
        with _lock:
            if wanted is not None:
                database = parameters.get("DatabaseName", "")
                table = (parameters.get("TableInput") or {}).get("Name", "")
                current = current_version(self, database, table)  # a missing table: moto's error
                if str(wanted) != current:
                    raise ConcurrentModificationException(
                        f"{REFUSED_MESSAGE} (table {database}.{table} is at version "
                        f"{current}, not {wanted})"
                    )
            return update_table(self)

    return wrapper


def apply() -> None:
    """Install the version check (idempotent). Call before the moto server takes requests."""
    global _applied
    with _apply_lock:
        if _applied:
            return
        GlueResponse.update_table = _versioned(GlueResponse.update_table)  # type: ignore[method-assign]
        # A GetTable never reads a table half updated.
        GlueResponse.get_table = serialized(GlueResponse.get_table, _lock)  # type: ignore[method-assign]
        _applied = True
