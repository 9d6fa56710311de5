"""Faults the embedded AWS cannot produce by itself, injected with real mechanisms.

- ``StallBefore``: a botocore hook on a client set that runs an action (the clock moves,
  other writers act) just before the n-th matching AWS call: the request is still real.
- ``FaultyProducer`` / ``RaisingProducer``: Kinesis failures at the SDK's one call seam
  (``Producer._call``: a PutRecords call with its entries, Kinesis' answer per entry).
  ``FaultyProducer`` answers the entries its ``fail`` picks with an ErrorCode, as Kinesis
  does for throttled entries, *without sending them*, and really sends the rest to the
  embedded Kinesis: what is in the stream is exactly what was acknowledged.
  ``RaisingProducer`` fails calls as a whole with the error botocore would raise.
- ``LostAnswer``: the answer to a call of one operation of one botocore client is lost after
  the service applied it: the request really goes out, the connection "closes" before the
  answer, and botocore resends the same request as it does after a dropped connection.
- Transport faults (lost answers, refused connections) are real: tests/support/proxy.py.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import ClientError, ConnectionClosedError
from botocore.httpsession import URLLib3Session

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


class LostAnswer:
    """Lose the answers to the next calls of ``operation`` on ``client`` (a botocore client:
    e.g. pyiceberg's Glue catalog's ``glue``), after the service applied them.

    Armed with ``arm(times)``, the next ``times`` requests of the operation are each sent
    for real (on a connection of their own), their answer read and dropped, and botocore
    is told the connection closed first (``ConnectionClosedError``): to botocore a dropped
    connection, so it resends the same request, as it would, at once (its backoff wait is
    skipped: it changes nothing here). ``between``, if given, runs once after the first
    request was applied and before the resend (another process acting meanwhile). With
    ``times`` past botocore's attempts the caller gets the error itself. ``lost`` counts
    the answers lost; ``resent`` the resends that followed one.
    """

    def __init__(self, client: Any, operation: str) -> None:
        self.operation = operation
        self.lost = 0
        self.resent = 0
        self._to_lose = 0
        self._between: Callable[[], object] | None = None
        self._pending_resend = False
        self._lock = threading.Lock()
        self._http = URLLib3Session()
        retries = client.meta.config.retries or {}
        self._attempts = int(retries.get("total_max_attempts") or retries.get("max_attempts") or 3)
        service = client.meta.service_model.service_id.hyphenize()
        client.meta.events.register(f"before-send.{service}.{operation}", self._before_send)
        client.meta.events.register_first(f"needs-retry.{service}.{operation}", self._retry)

    def arm(self, times: int = 1, between: Callable[[], object] | None = None) -> None:
        with self._lock:
            self._to_lose, self._between = times, between

    def disarm(self) -> int:
        """Disarm; the answers lost since the last arm."""
        with self._lock:
            self._to_lose, self._between = 0, None
            return self.lost

    def _before_send(self, request: Any = None, **_: Any) -> None:
        with self._lock:
            if self._pending_resend:
                self._pending_resend = False
                self.resent += 1
            if self._to_lose <= 0:
                return
            self._to_lose -= 1
            between, self._between = self._between, None
        answer = self._http.send(request)  # applied by the service ...
        answer.content  # noqa: B018 (read whole: the service has finished with it)
        with self._lock:
            self.lost += 1  # ... and its answer never reaches the caller
            self._pending_resend = True
        if between is not None:
            between()
        raise ConnectionClosedError(endpoint_url=f"{request.url} (answer lost, injected)")

    def _retry(self, caught_exception: Any = None, attempts: int = 1, **_: Any) -> Any:
        lost_here = isinstance(caught_exception, ConnectionClosedError) and "injected" in str(
            caught_exception
        )
        if lost_here and attempts < self._attempts:
            return 0  # resend now, as botocore would after its wait
        return None  # botocore's own decision (after its last attempt: give up)
