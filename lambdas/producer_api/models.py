"""The wire format of the producer API, as pydantic models (they generate docs/openapi.json).

The models check shape only: types, required and unknown fields. The limits appear in
the schema (``json_schema_extra``) so clients and schemathesis see them, but they are
enforced in one place, ``shardlog.records.validate_record`` and the handler's batch
checks, with the values of shardlog/constants.py and shardlog/idempotence.py. Field names
are the JSON names (camelCase), the same the CDK request model uses. ``PutResultEntry``
and ``PutFailureEntry`` are the JSON form of the SDK's outcomes, ``PutResult`` and
``PutFailure``.
"""

from __future__ import annotations

import math
from typing import Any, Final

from pydantic import BaseModel, ConfigDict, Field, StrictBool

from shardlog import constants as C
from shardlog import idempotence
from shardlog.outcomes import NOT_SENT, OUTCOME_UNKNOWN

# Base64 grows data by 4/3: the longest `data` string that can decode to one record.
MAX_DATA_BASE64_CHARS: Final = 4 * math.ceil(C.KINESIS_MAX_RECORD_BYTES / 3)
# Standard base64 with padding, the only form accepted (as by Kinesis' own JSON API).
BASE64_PATTERN: Final = r"^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$"
EXPLICIT_HASH_KEY_PATTERN: Final = C.EXPLICIT_HASH_KEY_PATTERN

# Unknown fields are errors; schema titles are the JSON names.
_FORBID = ConfigDict(extra="forbid", field_title_generator=lambda name, _info: name)


def _documented(**constraints: Any) -> dict[str, Any]:
    """Schema-only constraints: shown in the OpenAPI document, enforced by the handler."""
    return constraints


class RecordIn(BaseModel):
    model_config = _FORBID

    partitionKey: str = Field(
        description=(
            "Routes the record to a shard (MD5 of its UTF-8 bytes) and orders it: records of "
            f"one key keep their order. 1 to {C.PARTITION_KEY_MAX_CHARS} characters."
        ),
        json_schema_extra=_documented(minLength=1, maxLength=C.PARTITION_KEY_MAX_CHARS),
    )
    data: str = Field(
        description=(
            "The record's bytes, standard base64 with padding. Decoded data plus the UTF-8 "
            f"partition key is at most {C.KINESIS_MAX_RECORD_BYTES} bytes (1 MiB, Kinesis' "
            "record limit); a larger record is refused with 413 naming `records[i].data`."
        ),
        json_schema_extra=_documented(
            maxLength=MAX_DATA_BASE64_CHARS, pattern=BASE64_PATTERN, contentEncoding="base64"
        ),
    )
    explicitHashKey: str | None = Field(
        default=None,
        description=(
            "Route by this 128-bit hash key (a decimal string, 0 to 2^128-1) instead of the "
            "MD5 of the partition key."
        ),
        json_schema_extra=_documented(pattern=EXPLICIT_HASH_KEY_PATTERN),
    )
    recordId: str | None = Field(
        default=None,
        description=(
            "Idempotent produce: an id unique to this record, 1 to "
            f"{idempotence.RECORD_ID_MAX_BYTES} characters of A-Z a-z 0-9 . _ : -. The "
            "record travels in an envelope carrying it (11 bytes plus the id, counted in "
            "the 1 MiB), and a copy sent again with `resent` whose id was already committed "
            "is dropped at ingest, so a record whose outcome was unknown can be sent again, "
            "same id, without a duplicate."
        ),
        json_schema_extra=_documented(
            minLength=1,
            maxLength=idempotence.RECORD_ID_MAX_BYTES,
            pattern=idempotence.RECORD_ID_PATTERN,
        ),
    )
    resent: StrictBool = Field(
        default=False,
        description=(
            "With `recordId`: this record is sent again after an unknown outcome (a 502, a "
            "lost answer). Ingest then looks its id up among the records it committed within "
            "its deduplication window and drops it if it is there. Only with `recordId`."
        ),
    )


class PutRecordsRequest(BaseModel):
    model_config = _FORBID

    records: list[RecordIn] = Field(
        description=(f"1 to {C.KINESIS_MAX_RECORDS_PER_PUT} records, within the body limit."),
        json_schema_extra=_documented(minItems=1, maxItems=C.KINESIS_MAX_RECORDS_PER_PUT),
    )


class PutResultEntry(BaseModel):
    """The record is in the stream at this shard and sequence number."""

    model_config = _FORBID

    shardId: str
    sequenceNumber: str = Field(description="Decimal, up to 128 digits: compare as integers.")


class PutFailureEntry(BaseModel):
    """The record has no sequence number; its code says whether it may be in the stream."""

    model_config = _FORBID

    errorCode: str = Field(
        description=(
            "Kinesis' code, or shardlog's: ProvisionedThroughputExceededException and the "
            "other throttling codes, InternalFailure (provably not put: send it again, after "
            f"the records before it of its key); {NOT_SENT} (not sent, held back behind an "
            f"earlier failure: send it again); {OUTCOME_UNKNOWN} (the request went out and "
            "Kinesis' answer was lost or was a server error: the record may be in the "
            "stream; send it again only with its recordId)."
        )
    )
    errorMessage: str


class PutRecordsResponse(BaseModel):
    """One result per request record, in request order, as Kinesis PutRecords answers."""

    model_config = _FORBID

    failedRecordCount: int = Field(ge=0)
    records: list[PutResultEntry | PutFailureEntry]


class Health(BaseModel):
    model_config = _FORBID

    status: str = Field(description='"ok" when the function answers.')
    version: str


class ErrorBody(BaseModel):
    """Every error of the API has this shape."""

    model_config = _FORBID

    error: str = Field(description="What is wrong, for a human.")
    field: str | None = Field(
        description='The offending part of the request: "body", "records", '
        '"records[3].partitionKey", a header name; null when none applies.'
    )
    limit: int | str | None = Field(
        description="The limit broken (a number of bytes, characters or records, or a range "
        "or media type); null when no limit applies."
    )
