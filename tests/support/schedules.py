"""What the model tests need to reach the dangerous schedules, and to prove they did.

- ``Pause``: a re-armable stall between two AWS calls of one client set (one writer, one
  worker, one runner: one "process"). Armed, it runs an action (the clock moves past the
  lease, a successor acts) just before the n-th call, or before the first write of a kind;
  the paused call then goes out, as after a GC pause or a frozen Lambda.
- ``CallFault``: one injected fault on the next call of an operation: its answer lost after
  the request was applied (an ambiguous response, as after a timeout), or the request
  refused as throttled (retries exhausted) without being sent.
- ``FenceCounter``: counts the conditional lease writes DynamoDB refused, by kind (take,
  checkpoint, renew, release, acquire), read from the real requests and answers.
- ``Tally``: the counts of one model across its schedules: schedules, steps, faults by
  kind and violations. The model tests assert the dangerous kinds are non-zero; the soak
  (scripts/soak.py) prints them.
- ``run_model``: how the test suite runs a model: one fixed (derandomized) set of schedules,
  then every dangerous kind must have been reached.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

from botocore.awsrequest import AWSResponse
from botocore.exceptions import ReadTimeoutError
from hypothesis import HealthCheck, settings
from hypothesis.stateful import RuleBasedStateMachine, run_state_machine_as_test

from shardlog.aws import Clients

_PARAMS = "shardlog.model.params"
CONDITION_REFUSED = "ConditionalCheckFailedException"


def lease_write_kind(params: dict[str, Any]) -> str:
    """Which lease write an UpdateItem of the consumers table is (shardlog/lease.py)."""
    expression = params.get("UpdateExpression", "")
    condition = params.get("ConditionExpression", "")
    if "#owner = :me" in expression and ":seen" in condition:
        return "take"
    if "#owner = :me" in expression:
        return "acquire"
    if "#cp = :cp" in expression:
        return "checkpoint"
    if "REMOVE" in expression and "#owner" in expression.split("REMOVE", 1)[1]:
        return "release"
    if "#expires = :expires" in expression:
        return "renew"
    return "other"


def _remember_params(params: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
    context[_PARAMS] = params


class Pause:
    """A stall of one client set between two of its AWS calls, armed once at a time."""

    def __init__(self, clients: Clients) -> None:
        self._lock = threading.Lock()
        self._action: Callable[[], object] | None = None
        self._calls_left = 0
        self._kind: str | None = None
        self._operation: str | None = None
        self.preceded: str | None = None  # the operation (or write kind) the last stall preceded
        clients.add_hook("before-parameter-build", _remember_params)
        clients.add_hook("before-call", self._before_call)

    def before_call(
        self, nth: int, action: Callable[[], object], operation: str | None = None
    ) -> None:
        """Stall just before the ``nth`` AWS call from now (1: the next one); with
        ``operation``, the ``nth`` call of that operation (e.g. "PutObject")."""
        with self._lock:
            self._action, self._calls_left, self._kind, self.preceded = action, nth, None, None
            self._operation = operation

    def before_write(self, kind: str, action: Callable[[], object]) -> None:
        """Stall just before the next lease write of ``kind`` (see ``lease_write_kind``)."""
        with self._lock:
            self._action, self._calls_left, self._kind, self.preceded = action, 1, kind, None
            self._operation = None

    def disarm(self) -> str | None:
        """Disarm; what the stall preceded, or None when it did not happen."""
        with self._lock:
            self._action = None
            return self.preceded

    def _before_call(self, model: Any = None, context: Any = None, **_: Any) -> None:
        name = getattr(model, "name", "?")
        with self._lock:
            action = self._action
            if action is None:
                return
            if self._kind is not None:
                params = (context or {}).get(_PARAMS, {})
                if name != "UpdateItem" or lease_write_kind(params) != self._kind:
                    return
                label = f"{self._kind} write"
            else:
                if self._operation is not None and name != self._operation:
                    return
                self._calls_left -= 1
                if self._calls_left > 0:
                    return
                label = name
            self._action, self.preceded = None, label  # one stall per arming, never nested
        action()


ANSWER_LOST = "answer lost"
THROTTLED = "throttled"
# What each service answers a throttled request with.
_THROTTLE_ANSWERS = {"s3": ("SlowDown", 503), "dynamodb": ("ThrottlingException", 400)}


class CallFault:
    """A fault on the next call of one operation from one client set, armed once at a time."""

    def __init__(self, clients: Clients) -> None:
        self._lock = threading.Lock()
        self._armed: tuple[str, str] | None = None  # (fault, operation)
        self.injected: str | None = None  # "<fault> on <operation>" once it happened
        clients.add_hook("before-call", self._before_call)
        clients.add_hook("after-call", self._after_call)

    def arm(self, fault: str, operation: str) -> None:
        if fault not in (ANSWER_LOST, THROTTLED):
            raise ValueError(f"unknown fault {fault!r}")
        with self._lock:
            self._armed, self.injected = (fault, operation), None

    def disarm(self) -> str | None:
        """Disarm; what was injected, or None when the call never came."""
        with self._lock:
            self._armed = None
            return self.injected

    def _take(self, fault: str, model: Any) -> bool:
        name = getattr(model, "name", "?")
        with self._lock:
            if self._armed != (fault, name):
                return False
            self._armed, self.injected = None, f"{fault} on {name}"
            return True

    def _before_call(self, model: Any = None, **_: Any) -> Any:
        if not self._take(THROTTLED, model):
            return None
        service = model.service_model.endpoint_prefix
        code, status = _THROTTLE_ANSWERS.get(service, ("ThrottlingException", 400))
        answer = {
            "Error": {"Code": code, "Message": "Rate exceeded (injected)"},
            "ResponseMetadata": {"HTTPStatusCode": status},
        }
        return AWSResponse("http://127.0.0.1/throttled", status, {}, None), answer

    def _after_call(self, model: Any = None, **_: Any) -> None:
        if self._take(ANSWER_LOST, model):
            raise ReadTimeoutError(endpoint_url="http://127.0.0.1 (answer lost, injected)")


class FenceCounter:
    """Counts refused conditional lease writes (UpdateItem on the consumers table) by kind."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.refused: Counter[str] = Counter()
        self.written: Counter[str] = Counter()

    def attach(self, clients: Clients) -> FenceCounter:
        clients.add_hook("before-parameter-build.dynamodb.UpdateItem", _remember_params)
        clients.add_hook("after-call.dynamodb.UpdateItem", self._after_call)
        return self

    def _after_call(self, parsed: Any = None, context: Any = None, **_: Any) -> None:
        kind = lease_write_kind((context or {}).get(_PARAMS, {}))
        code = (parsed or {}).get("Error", {}).get("Code")
        with self._lock:
            if code == CONDITION_REFUSED:
                self.refused[kind] += 1
            elif code is None:
                self.written[kind] += 1


class Tally:
    """A model's counts across schedules (one per test run, or per soak)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.counts: Counter[str] = Counter()

    def add(self, kind: str, count: int = 1) -> None:
        with self._lock:
            self.counts[kind] += count

    def merge(self, counts: Counter[str] | dict[str, int], prefix: str = "") -> None:
        with self._lock:
            for kind, count in counts.items():
                if count:
                    self.counts[f"{prefix}{kind}"] += count

    def reset(self) -> None:
        with self._lock:
            self.counts.clear()

    def __repr__(self) -> str:
        with self._lock:
            return f"Tally({dict(sorted(self.counts.items()))})"

    def missing(self, kinds: list[str] | tuple[str, ...]) -> list[str]:
        """The kinds of ``kinds`` this tally never counted."""
        with self._lock:
            return [kind for kind in kinds if self.counts[kind] <= 0]


def run_model(
    machine: type[RuleBasedStateMachine],
    endpoint_url: str,
    tally: Tally,
    must_reach: list[str] | tuple[str, ...],
    *,
    examples: int,
    steps: int,
) -> None:
    """Run ``machine`` (its class attribute ``endpoint_url`` set) on ``examples`` schedules
    of up to ``steps`` steps, derandomized: one fixed schedule set in the test suite (the
    counts are then stable; the soak explores fresh random ones). Then assert the model
    reached every kind of ``must_reach`` in ``tally``, not only the happy path, and print
    the counts."""
    machine.endpoint_url = endpoint_url  # type: ignore[attr-defined]
    tally.reset()
    reach = _ReachPoint(machine, tally, must_reach)
    run_state_machine_as_test(
        reach.machine,
        settings=settings(
            max_examples=examples,
            stateful_step_count=steps,
            deadline=None,
            derandomize=True,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        ),
    )
    assert not tally.missing(must_reach), f"never reached {tally.missing(must_reach)}: {tally}"
    print(f"{machine.__name__}: {dict(sorted(tally.counts.items()))}")
    print(
        f"{machine.__name__}: every kind reached by schedule {reach.reached_at} of "
        f"{reach.schedules} (examples={examples})"
    )


class _ReachPoint:
    """Which schedule first had every kind of ``must_reach`` counted (the fixed schedule set
    of ``make test`` needs that many; the test prints it beside its count)."""

    def __init__(
        self,
        machine: type[RuleBasedStateMachine],
        tally: Tally,
        must_reach: list[str] | tuple[str, ...],
    ) -> None:
        self.schedules = 0
        self.reached_at: int | None = None
        point = self

        class Counted(machine):  # type: ignore[valid-type,misc]
            def teardown(self) -> None:
                try:
                    super().teardown()
                finally:
                    point.schedules += 1
                    if point.reached_at is None and not tally.missing(must_reach):
                        point.reached_at = point.schedules

        # Named as the machine, so Hypothesis finds its source: the derandomized schedule set
        # is seeded by a digest of it, and stays the one the counts were chosen for.
        Counted.__name__ = machine.__name__
        Counted.__qualname__ = machine.__qualname__
        Counted.__module__ = machine.__module__
        self.machine = Counted
