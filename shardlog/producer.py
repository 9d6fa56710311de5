"""The SDK producer: validated, batched PutRecords, one outcome per record in input order.

Outcomes. Every record ends as exactly one of:

- ``PutResult``: in the stream, at this shard and sequence number;
- ``PutFailure``: no sequence number; its error code's ``kind`` says what is known:
  - ``throttled``, ``unavailable``: provably not put (Kinesis answered the entry with an
    ErrorCode, refused the whole call, or could not be reached); sending again may work;
  - ``invalid``: provably not put, and sending again will not help (bad arguments, no
    such stream, no access);
  - ``unknown`` (code ``OutcomeUnknown``): the request went out and its answer was lost
    or was a 5xx: the record may or may not be in the stream;
  - ``not-sent`` (code ``NotSent``): never sent, held back to keep its key's order.

No blind resends. The Kinesis client for puts never resends by itself
(``Clients.kinesis_puts``): a resend after a lost answer would put the records twice. The
Producer alone decides what to send again, with exponential backoff and full jitter, up
to ``max_attempts`` per record: entries Kinesis failed with an ErrorCode and calls refused
before anything was put (provably not put); a record whose outcome is unknown only when it
carries a record id (idempotent produce, shardlog/idempotence.py), as the same bytes with
the same id, so ingest drops the copy. Without a record id an unknown outcome is reported,
never retried.

Order. Kinesis keeps the order of successful records of one shard, but a call can fail
some entries and not others. So a call never holds two records of one key, and a key with
a record awaiting a retry sends nothing newer. The first record that ends without a
PutResult stops the put: the records not yet sent are answered ``NotSent`` (records in
flight keep their own failure). Each key's records therefore reach Kinesis in the order
given, and sending every record without a PutResult again, in order, keeps that order.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectTimeoutError,
    EndpointConnectionError,
    NoCredentialsError,
    NoRegionError,
    ParamValidationError,
)

from shardlog import constants as C
from shardlog import idempotence
from shardlog.aws import Clients
from shardlog.clock import Clock, SystemClock
from shardlog.exceptions import ProducerError, ValidationError, aws_error_code
from shardlog.outcomes import (
    OUTCOME_UNKNOWN,
    FailureKind,
    Outcome,
    PutFailure,
    PutResult,
    first_failure,
    held_back,
)
from shardlog.records import ProducerRecord, RecordInput, prepare_records

# Raised before a byte of the request went out: the connection could not be made, or the
# call could not even be built (no credentials, no region, bad parameters).
_RAISED_BEFORE_SENDING = (
    EndpointConnectionError,
    ConnectTimeoutError,
    NoCredentialsError,
    NoRegionError,
    ParamValidationError,
)


def call_failure(exc: ClientError | BotoCoreError) -> PutFailure:
    """What a PutRecords call that raised says about its records.

    Kinesis answered 4xx: provably not put (throttled or refused). Raised before sending
    (no connection, no credentials): provably not put. Anything after the request went out
    (a 5xx answer, a read timeout, the connection closed or reset while awaiting the
    answer): unknown.
    """
    if isinstance(exc, ClientError):
        code = aws_error_code(exc) or "InternalFailure"
        status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)
        if status >= 500:
            return PutFailure(
                OUTCOME_UNKNOWN,
                f"Kinesis answered {status} {code} to a request that went out: the records "
                f"may or may not be in the stream ({exc})",
            )
        return PutFailure(code, str(exc))
    if isinstance(exc, _RAISED_BEFORE_SENDING):
        return PutFailure(type(exc).__name__, str(exc))
    return PutFailure(
        OUTCOME_UNKNOWN,
        f"{type(exc).__name__} after the request went out: the records may or may not be "
        f"in the stream ({exc})",
    )


Item = TypeVar("Item")


def take_batch(
    queue: deque[Item],
    *,
    max_records: int,
    max_bytes: int,
    size: Callable[[Item], int],
    key: Callable[[Item], str] | None = None,
) -> list[Item]:
    """The next batch from the front of ``queue``, in order: at most ``max_records`` items
    and ``max_bytes`` bytes (an item larger than that goes alone). With ``key``, at most
    one item per key, and a key once skipped stays skipped, so no item overtakes an
    earlier one of its key. The items left stay in the queue, in order."""
    batch: list[Item] = []
    kept: list[Item] = []
    keys: set[str] = set()
    blocked: set[str] = set()
    used = 0
    while queue and len(batch) < max_records:
        item = queue.popleft()
        item_key = key(item) if key is not None else None
        if item_key is not None and (item_key in keys or item_key in blocked):
            blocked.add(item_key)
            kept.append(item)
            continue
        item_size = size(item)
        if batch and used + item_size > max_bytes:
            kept.append(item)
            break
        batch.append(item)
        used += item_size
        if item_key is not None:
            keys.add(item_key)
    queue.extendleft(reversed(kept))
    return batch


@dataclass
class _Pending:
    index: int
    record: ProducerRecord
    attempts: int = 0
    failure: PutFailure | None = None
    cause: BaseException | None = None  # the exception behind a whole-call failure


def _attempts(count: int) -> str:
    return f"{count} attempt" + ("" if count == 1 else "s")


class Producer:
    """Puts records into the stream (the module doc gives the outcomes, retries and order).

    ``try_put_records`` answers one outcome per record and raises only for bad input;
    ``put_records`` answers the PutResults or raises ProducerError with the outcomes.
    ``idempotent=True`` gives every record without a record id a new one (``record_ids``),
    so an unknown outcome is retried without duplicates in the log.
    """

    def __init__(
        self,
        stream_name: str = C.DEFAULT_STREAM_NAME,
        clients: Clients | None = None,
        *,
        max_batch_records: int = C.KINESIS_MAX_RECORDS_PER_PUT,
        max_batch_bytes: int = C.KINESIS_MAX_BYTES_PER_PUT,
        max_attempts: int = 8,
        base_backoff_s: float = 0.05,
        max_backoff_s: float = 2.0,
        idempotent: bool = False,
        clock: Clock | None = None,
        rng: random.Random | None = None,
    ) -> None:
        if not 1 <= max_batch_records <= C.KINESIS_MAX_RECORDS_PER_PUT:
            raise ValidationError(
                "max_batch_records",
                f"must be 1 to {C.KINESIS_MAX_RECORDS_PER_PUT}",
                limit=C.KINESIS_MAX_RECORDS_PER_PUT,
            )
        if not 1 <= max_batch_bytes <= C.KINESIS_MAX_BYTES_PER_PUT:
            raise ValidationError(
                "max_batch_bytes",
                f"must be 1 to {C.KINESIS_MAX_BYTES_PER_PUT}",
                limit=C.KINESIS_MAX_BYTES_PER_PUT,
            )
        self.stream_name = stream_name
        self.clients = clients or Clients()
        self.max_batch_records = max_batch_records
        self.max_batch_bytes = max_batch_bytes
        self.max_attempts = max(1, max_attempts)
        self.base_backoff_s = base_backoff_s
        self.max_backoff_s = max_backoff_s
        self.record_ids = idempotence.RecordIds() if idempotent else None
        self.clock = clock or SystemClock()
        self.rng = rng or random.Random()
        self.calls = 0

    def put(
        self, partition_key: str, data: bytes | str, explicit_hash_key: str | None = None
    ) -> PutResult:
        return self.put_records([(partition_key, data, explicit_hash_key)])[0]

    def put_records(
        self,
        records: Iterable[RecordInput],
        *,
        on_progress: Callable[[int], None] | None = None,
    ) -> list[PutResult]:
        """One PutResult per record, in order; ProducerError if any record has none."""
        prepared = self.prepare_records(records)
        outcomes, cause = self._put(prepared, on_progress)
        stop = first_failure(outcomes)
        if stop is None:
            return [o for o in outcomes if isinstance(o, PutResult)]
        failed = sum(isinstance(o, PutFailure) for o in outcomes)
        key = prepared[next(i for i, o in enumerate(outcomes) if o is stop)].partition_key
        raise ProducerError(
            f"{failed} of {len(prepared)} record(s) not put: key {key!r} ended with "
            f"{stop.error_code}: {stop.error_message}",
            prepared,
            outcomes,
            aws_error_code=stop.error_code,
        ) from cause

    def try_put_records(
        self,
        records: Iterable[RecordInput],
        *,
        on_progress: Callable[[int], None] | None = None,
    ) -> list[Outcome]:
        """One outcome per record, in order; raises only ValidationError (nothing sent)."""
        return self._put(self.prepare_records(records), on_progress)[0]

    def prepare_records(self, records: Iterable[RecordInput]) -> list[ProducerRecord]:
        """The records validated (nothing is sent if one is bad) and, when idempotent, each
        given a record id: to retry later without duplicates, send these again."""
        prepared = prepare_records(records, self.record_ids)
        for index, record in enumerate(prepared):
            if record.size > self.max_batch_bytes:
                raise ValidationError(
                    f"records[{index}].data",
                    f"record is {record.size} bytes, more than this producer's "
                    f"max_batch_bytes ({self.max_batch_bytes})",
                    limit=self.max_batch_bytes,
                )
        return prepared

    # --- internals ----------------------------------------------------------------------
    def _put(
        self, records: list[ProducerRecord], on_progress: Callable[[int], None] | None
    ) -> tuple[list[Outcome], BaseException | None]:
        outcomes: list[Outcome | None] = [None] * len(records)
        queue = deque(_Pending(i, r) for i, r in enumerate(records))
        while queue:
            batch = take_batch(
                queue,
                max_records=self.max_batch_records,
                max_bytes=self.max_batch_bytes,
                size=lambda p: p.record.size,
                key=lambda p: p.record.partition_key,
            )
            failed = self._send(batch, outcomes)
            if on_progress:
                on_progress(len(batch) - len(failed))
            retrying = [p for p in failed if self._may_retry(p)]
            if len(retrying) < len(failed):  # a record ended without a PutResult: stop
                for item in failed:
                    outcomes[item.index] = self._final(item)
                stop = min((p for p in failed if p not in retrying), key=lambda p: p.index)
                for item in queue:
                    outcomes[item.index] = held_back(self._final(stop))
                return [o for o in outcomes if o is not None], stop.cause
            for item in retrying:
                assert item.failure is not None
                if item.failure.may_be_in_the_stream:  # it may be in: ingest must look it up
                    item.record = replace(item.record, resent=True)
            if retrying:
                # Back to the front, in their original order.
                queue.extendleft(sorted(retrying, key=lambda p: p.index, reverse=True))
                attempt = max(p.attempts for p in retrying)
                cap = min(self.max_backoff_s, self.base_backoff_s * 2 ** (attempt - 1))
                self.clock.sleep(self.rng.uniform(0, cap))
        return [o for o in outcomes if o is not None], None

    def _may_retry(self, item: _Pending) -> bool:
        assert item.failure is not None
        if item.attempts >= self.max_attempts:
            return False
        if item.failure.kind is FailureKind.UNKNOWN:
            return item.record.record_id is not None  # the same id: ingest drops a copy
        return item.failure.retryable

    @staticmethod
    def _final(item: _Pending) -> PutFailure:
        assert item.failure is not None
        code, message, tried = item.failure.error_code, item.failure.error_message, item.attempts
        if item.failure.may_be_in_the_stream:
            return PutFailure(code, f"{message} (after {_attempts(tried)})")
        return PutFailure(code, f"not put after {_attempts(tried)}: {message}")

    def _send(self, batch: list[_Pending], outcomes: list[Outcome | None]) -> list[_Pending]:
        """One PutRecords call: fills the outcomes of the records put; returns the others."""
        for item in batch:
            item.attempts += 1
        try:
            answers = self._call([item.record.entry() for item in batch])
        except (ClientError, BotoCoreError) as exc:
            failure = call_failure(exc)
            for item in batch:
                item.failure, item.cause = failure, exc
            return batch
        failed = []
        for item, answer in zip(batch, answers, strict=True):
            if "ErrorCode" in answer:
                item.failure = PutFailure(answer["ErrorCode"], answer.get("ErrorMessage", ""))
                item.cause = None
                failed.append(item)
            else:
                outcomes[item.index] = PutResult(answer["ShardId"], answer["SequenceNumber"])
        return failed

    def _call(self, entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """PutRecords with these entries: Kinesis' answer per entry, in order."""
        self.calls += 1
        response = self.clients.kinesis_puts.put_records(
            StreamName=self.stream_name, Records=entries
        )
        return list(response["Records"])
