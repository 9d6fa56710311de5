"""Turn a validated request into records, put them, and answer per record like PutRecords.

The checks use ``validate_record`` and the limits in shardlog/constants.py; this module
adds only what is particular to one HTTP request: base64, the batch count and the batch
size. Records go in with the SDK ``Producer`` (retries with backoff, per-key order) in
*rounds*: round r holds the r-th record of every key, so a round has each key at most
once and, within the batch limits, is one PutRecords call. The first round that fails
after the Producer's retries ends the request: what went in before is answered with its
shard and sequence number, the rest with an error code, so a client that resends the
failed entries in order keeps each key's order. And when nothing went in, the answer is
a 429 or 503 instead of a 200 full of errors.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from lambdas.producer_api.models import PutRecordsRequest
from shardlog import constants as C
from shardlog.exceptions import ProducerError, ValidationError, aws_error_code
from shardlog.producer import Producer, ProducerRecord, PutResult, validate_record

# Kinesis and KMS codes that mean "too much, slow down": a request that put nothing -> 429.
THROTTLING_CODES = frozenset(
    {
        "ProvisionedThroughputExceededException",
        "ThrottlingException",
        "LimitExceededException",
        "KMSThrottlingException",
        "RequestLimitExceeded",
    }
)
# The service failed, the request may succeed later: a request that put nothing -> 503.
UNAVAILABLE_CODES = frozenset(
    {
        "InternalFailure",
        "InternalFailureException",
        "ServiceUnavailable",
        "ServiceUnavailableException",
    }
)
# Kinesis refused the batch itself: bad input the checks above let through -> 400.
INVALID_CODES = frozenset({"InvalidArgumentException", "ValidationException"})
CONNECTION_ERROR = "ServiceUnavailable"  # no AWS code: Kinesis could not be reached


class ApiError(Exception):
    """An answer other than 200, in the API's error shape."""

    def __init__(
        self,
        status: int,
        error: str,
        *,
        field: str | None = None,
        limit: int | str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(error)
        self.status = status
        self.error = error
        self.field = field
        self.limit = limit
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        return {"error": self.error, "field": self.field, "limit": json_safe_limit(self.limit)}


def json_safe_limit(limit: Any) -> int | str | None:
    """Limits as JSON numbers a JavaScript client reads exactly, else as strings."""
    if limit is None or isinstance(limit, str):
        return limit
    if isinstance(limit, int) and not isinstance(limit, bool) and abs(limit) < 2**53:
        return limit
    return str(limit)


@dataclass(frozen=True)
class RecordFailure:
    error_code: str
    error_message: str


Outcome = PutResult | RecordFailure


def to_producer_records(request: PutRecordsRequest) -> list[ProducerRecord]:
    """The request's records, checked against the Kinesis limits; ApiError on the first bad one."""
    count = len(request.records)
    if not 1 <= count <= C.KINESIS_MAX_RECORDS_PER_PUT:
        raise ApiError(
            400,
            f"records: must hold 1 to {C.KINESIS_MAX_RECORDS_PER_PUT} records, got {count}",
            field="records",
            limit=C.KINESIS_MAX_RECORDS_PER_PUT,
        )
    records = []
    total = 0
    for index, entry in enumerate(request.records):
        where = f"records[{index}]"
        try:
            data = base64.b64decode(entry.data, validate=True)
        except (binascii.Error, ValueError):
            raise ApiError(400, f"{where}.data: invalid base64", field=f"{where}.data") from None
        if not _is_unicode(entry.partitionKey):
            raise ApiError(
                400,
                f"{where}.partitionKey: must be valid Unicode (no lone surrogates)",
                field=f"{where}.partitionKey",
                limit=C.PARTITION_KEY_MAX_CHARS,
            )
        try:
            record = validate_record(entry.partitionKey, data, entry.explicitHashKey, index=index)
        except ValidationError as exc:
            raise ApiError(_status_of(exc), str(exc), field=exc.field, limit=exc.limit) from None
        records.append(record)
        total += record.size
    if total > C.KINESIS_MAX_BYTES_PER_PUT:
        raise ApiError(
            413,
            f"records: data plus partition keys is {total} bytes, at most "
            f"{C.KINESIS_MAX_BYTES_PER_PUT} (5 MiB) per request",
            field="records",
            limit=C.KINESIS_MAX_BYTES_PER_PUT,
        )
    return records


def _is_unicode(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _status_of(exc: ValidationError) -> int:
    # validate_record gets bytes here, so a `data` error can only be the record size.
    return 413 if exc.field.endswith(".data") else 400


def rounds(records: Sequence[ProducerRecord]) -> list[list[int]]:
    """Indices by round: round r holds the r-th record of each key, in request order."""
    seen: dict[str, int] = {}
    out: list[list[int]] = []
    for index, record in enumerate(records):
        depth = seen.get(record.partition_key, 0)
        seen[record.partition_key] = depth + 1
        if depth == len(out):
            out.append([])
        out[depth].append(index)
    return out


def put_records(producer: Producer, records: Sequence[ProducerRecord]) -> list[Outcome]:
    """One outcome per record, in order. Stops at the first round that does not all go in."""
    outcomes: list[Outcome | None] = [None] * len(records)
    for indices in rounds(records):
        stopped = _put_round(producer, records, indices, outcomes)
        if stopped is not None:
            held_back = RecordFailure(
                stopped.error_code,
                f"not sent: an earlier record of this request failed ({stopped.error_code}); "
                "send the failed records again, in order",
            )
            return [o if o is not None else held_back for o in outcomes]
    return [o for o in outcomes if o is not None]


def _put_round(
    producer: Producer,
    records: Sequence[ProducerRecord],
    indices: list[int],
    outcomes: list[Outcome | None],
) -> RecordFailure | None:
    """Put one round; fill ``outcomes`` for it and return the failure if not all went in."""
    try:
        results = producer.put_records([records[i] for i in indices])
    except ProducerError as exc:
        code, message = _producer_failure(exc, producer.max_attempts)
        failure = RecordFailure(code, message)
        for position, index in enumerate(indices):
            put = exc.results[position] if position < len(exc.results) else None
            outcomes[index] = put if isinstance(put, PutResult) else failure
        return failure
    except ClientError as exc:
        code = aws_error_code(exc) or "InternalFailure"
        if code in INVALID_CODES:
            raise ApiError(400, f"Kinesis refused the records: {exc}", field="records") from exc
        failure = RecordFailure(code, str(exc))
    except BotoCoreError as exc:  # Kinesis not reachable (connection, timeout)
        failure = RecordFailure(CONNECTION_ERROR, str(exc))
    else:
        for index, result in zip(indices, results, strict=True):
            outcomes[index] = result
        return None
    for index in indices:
        outcomes[index] = failure
    return failure


def _producer_failure(exc: ProducerError, attempts: int) -> tuple[str, str]:
    """The AWS code and message of the entry that failed last."""
    code = exc.aws_error_code or "InternalFailure"
    return code, f"not put after {attempts} attempts: {exc}"


def nothing_put_error(outcomes: Sequence[Outcome], retry_after_s: int) -> ApiError | None:
    """429 or 503 when no record went in, so the caller retries the whole request later."""
    if any(isinstance(o, PutResult) for o in outcomes):
        return None
    failure = next(o for o in outcomes if isinstance(o, RecordFailure))
    code = failure.error_code
    headers = {"Retry-After": str(retry_after_s)}
    if code in THROTTLING_CODES:
        return ApiError(429, f"throttled by Kinesis ({code}); nothing was put", headers=headers)
    if code in UNAVAILABLE_CODES or code == CONNECTION_ERROR:
        return ApiError(503, f"Kinesis is unavailable ({code}); nothing was put", headers=headers)
    return ApiError(500, f"the stream refused the records ({code}); nothing was put")
