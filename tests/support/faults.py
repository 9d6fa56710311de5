"""Faults the embedded AWS cannot produce by itself, injected with real mechanisms.

- ``StallBefore``: a botocore hook on a client set that runs an action (the clock moves,
  other writers act) just before the n-th matching AWS call: the request is still real.
- ``FaultyProducer`` / ``RaisingProducer``: Kinesis failures at the SDK's one call seam
  (``Producer._call``: a PutRecords call with its entries, Kinesis' answer per entry).
  ``FaultyProducer`` answers the entries its ``fail`` picks with an ErrorCode, as Kinesis
  does for throttled entries, *without sending them*, and really sends the rest to the
  embedded Kinesis: what is in the stream is exactly what was acknowledged.
  ``RaisingProducer`` fails calls as a whole with the error botocore would raise.
- Transport faults (lost answers, refused connections) are real: tests/support/proxy.py.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import ClientError

from shardlog.aws import Clients
from shardlog.producer import Producer

THROTTLED = "ProvisionedThroughputExceededException"


@dataclass(frozen=True)
class Entry:
    partition_key: str
    data: bytes  # as stored: in its envelope when the record has an id
    attempt: int  # 1 for the first time these bytes are sent


Picker = Callable[[Sequence[Entry]], Collection[int]]


def entries_where(predicate: Callable[[Entry], bool]) -> Picker:
    """Pick the entries for which ``predicate`` holds."""
    return lambda entries: [i for i, entry in enumerate(entries) if predicate(entry)]


class FaultyProducer(Producer):
    """Kinesis fails the entries ``fail(entries)`` picks (positions) with ``code``."""

    def __init__(self, *args: Any, fail: Picker, code: str = THROTTLED, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fail = fail
        self.code = code
        self.attempts: Counter[bytes] = Counter()
        self.injected: list[Entry] = []

    def _call(self, entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
        seen = []
        for entry in entries:
            self.attempts[entry["Data"]] += 1
            seen.append(Entry(entry["PartitionKey"], entry["Data"], self.attempts[entry["Data"]]))
        failing = set(self.fail(seen))
        sent = [entry for i, entry in enumerate(entries) if i not in failing]
        answers = iter(super()._call(sent) if sent else [])
        out = []
        for i in range(len(entries)):
            if i in failing:
                self.injected.append(seen[i])
                out.append({"ErrorCode": self.code, "ErrorMessage": "Rate exceeded (injected)"})
            else:
                out.append(next(answers))
        return out


class RaisingProducer(FaultyProducer):
    """After ``passing_calls`` calls (which go through, with the entry faults ``fail``
    picks), every PutRecords call fails as a whole with ``error``, as botocore raises it."""

    def __init__(
        self,
        *args: Any,
        error: Exception,
        passing_calls: int = 0,
        fail: Picker = lambda _entries: (),
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, fail=fail, **kwargs)
        self.error = error
        self.passing_calls = passing_calls

    def _call(self, entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
        if self.calls < self.passing_calls:
            return super()._call(entries)
        self.calls += 1
        raise self.error


def client_error(code: str, status: int = 400) -> ClientError:
    """The ClientError botocore raises for Kinesis' answer ``status`` with ``code``."""
    return ClientError(
        {
            "Error": {"Code": code, "Message": f"{code} (injected)"},
            "ResponseMetadata": {"HTTPStatusCode": status},
        },
        "PutRecords",
    )


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
