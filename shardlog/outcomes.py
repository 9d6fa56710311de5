"""What became of one record put into the stream: the outcome types, leaf of the package.

Every record ends as exactly one of:

- ``PutResult``: in the stream, at this shard and sequence number;
- ``PutFailure``: no sequence number; its error code's ``kind`` says what is known:
  - ``throttled``, ``unavailable``: provably not put; sending again may work;
  - ``invalid``: provably not put, and sending again will not help;
  - ``unknown`` (code ``OutcomeUnknown``): the request went out and its answer was lost
    or was a 5xx: the record may or may not be in the stream;
  - ``not-sent`` (code ``NotSent``): never sent, held back to keep its key's order.

The SDK producer (shardlog/producer.py), the HTTP API's client and handler and the errors
(shardlog/exceptions.py) all speak these types; this module imports nothing of shardlog but
its constants, so each of them can import it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

from shardlog.constants import THROTTLING_CODES

OUTCOME_UNKNOWN = "OutcomeUnknown"
NOT_SENT = "NotSent"
# "Too much, slow down" (shardlog.constants.THROTTLING_CODES): provably not put.
# The service failed an entry, or could not be reached: provably not put.
UNAVAILABLE_CODES = frozenset(
    {
        "InternalFailure",
        "InternalFailureException",
        "ServiceUnavailable",
        "ServiceUnavailableException",
        "EndpointConnectionError",
        "ConnectTimeoutError",
    }
)


class FailureKind(StrEnum):
    THROTTLED = "throttled"
    UNAVAILABLE = "unavailable"
    INVALID = "invalid"
    UNKNOWN = "unknown"
    NOT_SENT = "not-sent"


def failure_kind(error_code: str) -> FailureKind:
    """What an error code says about a record: the one classification, SDK and API alike."""
    if error_code == OUTCOME_UNKNOWN:
        return FailureKind.UNKNOWN
    if error_code == NOT_SENT:
        return FailureKind.NOT_SENT
    if error_code in THROTTLING_CODES:
        return FailureKind.THROTTLED
    if error_code in UNAVAILABLE_CODES:
        return FailureKind.UNAVAILABLE
    return FailureKind.INVALID


@dataclass(frozen=True)
class PutResult:
    """The record is in the stream at this shard and sequence number."""

    shard_id: str
    sequence_number: str


@dataclass(frozen=True)
class PutFailure:
    """The record has no PutResult; ``kind`` (from the code) says what is known of it."""

    error_code: str
    error_message: str

    @property
    def kind(self) -> FailureKind:
        return failure_kind(self.error_code)

    @property
    def may_be_in_the_stream(self) -> bool:
        return self.kind is FailureKind.UNKNOWN

    @property
    def retryable(self) -> bool:
        """Provably not put, and sending it again may work."""
        return self.kind in (FailureKind.THROTTLED, FailureKind.UNAVAILABLE, FailureKind.NOT_SENT)


Outcome = PutResult | PutFailure


def held_back(stop: PutFailure) -> PutFailure:
    """The outcome of a record not sent because an earlier one ended with ``stop``."""
    return PutFailure(
        NOT_SENT,
        f"not sent: an earlier record was not put ({stop.error_code}); send every record "
        "without a PutResult again, in order",
    )


def first_failure(outcomes: Iterable[Outcome]) -> PutFailure | None:
    """The failure that stopped a put: the first that is not NotSent (records held back can
    come before it in input order), else the first; None when every record was put."""
    failures = [o for o in outcomes if isinstance(o, PutFailure)]
    return next((f for f in failures if f.kind is not FailureKind.NOT_SENT), None) or next(
        iter(failures), None
    )
