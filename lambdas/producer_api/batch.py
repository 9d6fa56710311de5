"""A validated request to records, and the Producer's outcomes to the request's status.

The records are checked by the SDK's ``validate_record`` (the one check of keys, data,
hash keys, record ids and sizes) and put by the SDK ``Producer``, which keeps each key's
order, retries, and answers one outcome per record (shardlog/producer.py). What is
particular to HTTP is here: base64, the record count, and the status of the whole request:

- 200, one result per record, when a record went in, or when the outcomes are mixed
  (some unknown, some provably not put);
- 502 when every record's outcome is unknown: the records may or may not be in the stream;
- provably nothing was put: 429 (throttled) or 503 (unavailable), both with Retry-After,
  400 (Kinesis refused the arguments) or 500 (the stream refused: missing, no access).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence
from dataclasses import replace

from lambdas.producer_api.checks import HttpError
from lambdas.producer_api.models import PutRecordsRequest
from shardlog import constants as C
from shardlog.exceptions import ValidationError
from shardlog.outcomes import FailureKind, Outcome, PutFailure, PutResult, first_failure
from shardlog.records import ProducerRecord, validate_record

# Kinesis refused the batch itself: bad input the checks let through -> 400.
INVALID_ARGUMENT_CODES = frozenset({"InvalidArgumentException", "ValidationException"})


def to_producer_records(request: PutRecordsRequest) -> list[ProducerRecord]:
    """The request's records, checked; HttpError naming the first bad field and its limit."""
    count = len(request.records)
    if not 1 <= count <= C.KINESIS_MAX_RECORDS_PER_PUT:
        raise HttpError(
            400,
            f"records: must hold 1 to {C.KINESIS_MAX_RECORDS_PER_PUT} records, got {count}",
            field="records",
            limit=C.KINESIS_MAX_RECORDS_PER_PUT,
        )
    records = []
    for index, entry in enumerate(request.records):
        try:
            data = base64.b64decode(entry.data, validate=True)
        except (binascii.Error, ValueError):
            field = f"records[{index}].data"
            raise HttpError(400, f"{field}: invalid base64", field=field) from None
        try:
            record = validate_record(
                entry.partitionKey, data, entry.explicitHashKey, entry.recordId, index=index
            )
        except ValidationError as exc:
            too_large = exc.limit == C.KINESIS_MAX_RECORD_BYTES and exc.field.endswith(".data")
            status = 413 if too_large else 400
            raise HttpError(status, str(exc), field=exc.field, limit=exc.limit) from None
        if entry.resent:
            if record.record_id is None:
                field = f"records[{index}].resent"
                raise HttpError(
                    400, f"{field}: only a record with a recordId can be resent", field=field
                )
            record = replace(record, resent=True)
        records.append(record)
    return records


def whole_request_error(outcomes: Sequence[Outcome], retry_after_s: int) -> HttpError | None:
    """The error answering the whole request, or None for a 200 with one result per record."""
    if any(isinstance(o, PutResult) for o in outcomes):
        return None
    failures = [o for o in outcomes if isinstance(o, PutFailure)]
    unknown = [f for f in failures if f.kind is FailureKind.UNKNOWN]
    if unknown and len(unknown) < len(failures):
        return None  # mixed: each record's own outcome says more than one status could
    if unknown:
        return HttpError(
            502,
            f"the outcome is unknown: {unknown[0].error_message}; send the records again "
            "only with recordIds (idempotent produce), else duplicates may reach the log",
        )
    stop = first_failure(failures) or failures[0]
    code, retry_after = stop.error_code, {"Retry-After": str(retry_after_s)}
    if stop.kind is FailureKind.THROTTLED:
        return HttpError(
            429, f"throttled by Kinesis ({code}); nothing was put", headers=retry_after
        )
    if stop.kind is FailureKind.UNAVAILABLE:
        return HttpError(
            503, f"Kinesis is unavailable ({code}); nothing was put", headers=retry_after
        )
    if code in INVALID_ARGUMENT_CODES:
        return HttpError(400, f"Kinesis refused the records: {stop.error_message}", field="records")
    return HttpError(500, f"the stream refused the records ({code}); nothing was put")
