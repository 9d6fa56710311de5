"""Tumbling windows of a Lambda consumer group (Lambda's ``TumblingWindowInSeconds`` for
Kinesis): which window a record belongs to, when a window is over, and whether a state the
function returned may be kept. Pure: the delivery session (delivery.py) invokes and the
data-access layer (shardlog/dal/consumers.py, ``WindowState``) stores.

The rules:

- **Windows are aligned to the epoch.** With a window of ``w`` seconds, a record whose
  arrival time (the Kinesis ``approximateArrivalTimestamp`` kept in the log) is ``t`` ms
  belongs to ``[t - t mod w*1000, that + w*1000)``. Lambda sets boundaries by the time
  records were inserted into the stream; shardlog uses the same arrival time, so a replay
  (a seek, a restart) puts every record in the same window again.
- **A batch holds records of one window.** Arrival times never decrease along a
  partition's log, so windows follow one another in log order.
- **A window is over** when a record of a later window is read, when the partition ended
  and every record of it is read (Lambda: "when the shard ends, Lambda considers the
  window closed"), or, caught up, when the clock passed the window's end by
  ``CLOSE_GRACE_MS`` (records reach the log a little after they arrive in Kinesis).
  Then the function is invoked once more, with no records and ``isFinalInvokeForWindow``,
  and the state is dropped.
- **The state** is the JSON object the function returns (``state``); each invocation of
  the window gets the one the previous invocation returned. A state whose JSON text is
  past ``STATE_LIMIT_BYTES`` (1 MB, Lambda's limit per shard) ends the window early: the
  final invocation gets it with ``isWindowTerminatedEarly``, and the window goes on with
  an empty state.
"""

from __future__ import annotations

import json
import zlib
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

MAX_WINDOW_S = 900  # Lambda's TumblingWindowInSeconds: 0 (no window) to 900
STATE_LIMIT_BYTES = 1024 * 1024  # Lambda's: 1 MB of state per shard
# The state is stored compressed on the group's lease item, which DynamoDB bounds at 400 KB
# in all: a state within 1 MB whose compressed form is past this also ends its window early.
STORED_LIMIT_BYTES = 350_000
# Caught up, a window is closed by the clock this long after its end: a record that arrived
# in Kinesis before the end reaches the log within the ingest's latency.
CLOSE_GRACE_MS = 60_000


@dataclass(frozen=True, order=True)
class Window:
    """``[start_ms, end_ms)`` in epoch milliseconds."""

    start_ms: int
    end_ms: int

    def event(self) -> dict[str, str]:
        """The event's ``window``: ISO 8601 in UTC, as Lambda sends it."""
        return {"start": iso8601(self.start_ms), "end": iso8601(self.end_ms)}

    def contains(self, arrival_ms: int) -> bool:
        return self.start_ms <= arrival_ms < self.end_ms


def window_of(arrival_ms: int, window_s: int) -> Window:
    """The window of a record that arrived at ``arrival_ms``."""
    if not 1 <= window_s <= MAX_WINDOW_S:
        raise ValueError(f"tumblingWindowS {window_s} is not 1 to {MAX_WINDOW_S} seconds")
    size_ms = window_s * 1000
    start = arrival_ms - arrival_ms % size_ms
    return Window(start, start + size_ms)


def closed_by_clock(end_ms: int, now_ms: int) -> bool:
    """Caught up: the window ending at ``end_ms`` may be closed now."""
    return now_ms >= end_ms + CLOSE_GRACE_MS


def iso8601(epoch_ms: int) -> str:
    moment = datetime.fromtimestamp(epoch_ms / 1000, tz=UTC)
    if epoch_ms % 1000:
        return moment.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def encode_state(state: dict[str, Any]) -> bytes:
    """The state's JSON text (compact, keys as the function gave them): what is measured
    against the limit and what is stored."""
    return json.dumps(state, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def keepable(encoded: bytes) -> bool:
    """The state may be kept: within Lambda's 1 MB, and storable on the lease item."""
    if len(encoded) > STATE_LIMIT_BYTES:
        return False
    return len(zlib.compress(encoded)) <= STORED_LIMIT_BYTES
