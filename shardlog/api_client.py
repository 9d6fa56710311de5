"""A client of the producer HTTP API (POST /v1/records, GET /v1/health), and the API's
paths and body limit, defined here once for the client and the handler.

Requests to AWS are signed with SigV4 (botocore's signer, service ``execute-api``, the
caller's boto3 credentials), as the API's IAM auth requires; requests to the local server
on 127.0.0.1 or localhost go unsigned. Standard library HTTP only.

``put_records`` checks every record first with the SDK's ``validate_record`` (nothing is
sent if one is bad), sends requests of at most 500 records and ``MAX_BODY_BYTES`` of JSON,
in order (the SDK's ``take_batch``), and answers one outcome per record with the SDK's
types (shardlog/producer.py): a ``PutResult``, or a ``PutFailure`` whose kind says what is
known. For a whole request:

- 200: the API's result per record;
- 429 or 503 (nothing was put), or no connection (nothing was sent): sent again after
  Retry-After (1 s if none), up to ``max_attempts``; then each record is answered
  ``ThrottlingException``, ``ServiceUnavailable`` or ``EndpointConnectionError``;
- 502 or 504, or the connection lost after the request went out: the outcome is unknown.
  Never sent again blindly: each record is answered ``OutcomeUnknown``. An ``idempotent``
  client gives every record a record id, so it sends the same request again (same ids,
  the copies are dropped at ingest), up to ``max_attempts``;
- any other answer (400, 403, 413, 415, 500, ...) raises ``ApiError``.

Once a request has a record without a PutResult, later requests are not sent (their
records are answered ``NotSent``), so sending every record without a PutResult again, in
order, keeps each key's order.
"""

from __future__ import annotations

import base64
import http.client
import json
import re
import socket
import urllib.error
import urllib.request
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, replace
from json.encoder import encode_basestring_ascii
from typing import Any, Final
from urllib.parse import urlsplit

import boto3
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest

from shardlog import constants as C
from shardlog.clock import Clock, SystemClock
from shardlog.exceptions import ShardlogError
from shardlog.idempotence import RecordIds
from shardlog.outcomes import (
    OUTCOME_UNKNOWN,
    Outcome,
    PutFailure,
    PutResult,
    first_failure,
    held_back,
)
from shardlog.producer import take_batch
from shardlog.records import ProducerRecord, RecordInput, prepare_records

RECORDS_PATH: Final = "/v1/records"
HEALTH_PATH: Final = "/v1/health"
# Lambda refuses a synchronous invocation whose event (the request as JSON: the body as a
# string, escaped, plus headers and request context) is 6 MiB or more.
LAMBDA_MAX_REQUEST_BYTES: Final = 6 * C.MIB
# The API's body limit, below Lambda's cap so that its own 413 answers a body just past
# it: the 291,456 bytes left cover the event around the body (headers twice, at most
# 10 KiB each on API Gateway; the request context) and the escaping of its quotes and
# backslashes. 5 MiB of data is 6.7 MiB of base64, so a request carries less: see
# docs/API.md for the real maximum.
MAX_BODY_BYTES: Final = 6_000_000
# The most data a request can carry: five records (the fewest that hold it, at 1 MiB each)
# with 1-character keys in compact JSON, {"records":[{"partitionKey":"k","data":"..."},...]}:
# the body leaves 5,999,832 characters of base64, which decode to 3/4 of that.
MAX_DATA_PER_REQUEST_BYTES: Final = 4_499_874
# A request body: {"records":[entry,entry,...]}, compact JSON, ASCII only.
_BODY_ENVELOPE_BYTES = len('{"records":[]}')
SIGNING_SERVICE = "execute-api"
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})
_REGION_IN_HOST = re.compile(r"\.execute-api\.([a-z0-9-]+)\.amazonaws\.com")
# Whole-request answers that are an outcome of every record of the request.
_REQUEST_OUTCOMES = {
    429: "ThrottlingException",
    503: "ServiceUnavailable",
    502: OUTCOME_UNKNOWN,
    504: OUTCOME_UNKNOWN,
}
_WAIT_WITHOUT_RETRY_AFTER_S = 1.0


class ApiError(ShardlogError):
    """The API refused a request: its status and the body's error, field and limit."""

    def __init__(
        self,
        status: int,
        error: str,
        *,
        field: str | None = None,
        limit: Any = None,
        retry_after_s: float | None = None,
    ) -> None:
        super().__init__(f"HTTP {status}: {error}")
        self.status = status
        self.error = error
        self.field = field
        self.limit = limit
        self.retry_after_s = retry_after_s


@dataclass(frozen=True)
class _Answer:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        try:
            return json.loads(self.body or b"null")
        except ValueError:
            return None


def is_loopback(url: str) -> bool:
    return (urlsplit(url).hostname or "") in LOOPBACK_HOSTS


def wire_record(record: ProducerRecord) -> dict[str, Any]:
    """A record as an entry of the request body (docs/API.md)."""
    entry: dict[str, Any] = {
        "partitionKey": record.partition_key,
        "data": base64.b64encode(record.data).decode("ascii"),
    }
    if record.explicit_hash_key is not None:
        entry["explicitHashKey"] = record.explicit_hash_key
    if record.record_id is not None:
        entry["recordId"] = record.record_id
    if record.resent:
        entry["resent"] = True
    return entry


def wire_size(record: ProducerRecord) -> int:
    """Bytes of ``wire_record(record)`` in a compact ASCII JSON body, without encoding it."""
    size = len('{"partitionKey":,"data":""}') + len(encode_basestring_ascii(record.partition_key))
    size += 4 * -(-len(record.data) // 3)  # base64
    if record.explicit_hash_key is not None:
        size += len(',"explicitHashKey":""') + len(record.explicit_hash_key)
    if record.record_id is not None:
        size += len(',"recordId":""') + len(record.record_id)
    if record.resent:
        size += len(',"resent":true')
    return size


def encode_body(records: Iterable[ProducerRecord]) -> bytes:
    """The request body for these records (compact JSON, ASCII only)."""
    document = {"records": [wire_record(r) for r in records]}
    return json.dumps(document, separators=(",", ":")).encode("ascii")


def transport_failure(exc: OSError | http.client.HTTPException) -> PutFailure:
    """What a failed exchange says about the request's records. urllib raises URLError
    while connecting or sending, anything else while awaiting or reading the answer."""
    if isinstance(exc, urllib.error.URLError) and isinstance(
        exc.reason, ConnectionRefusedError | socket.gaierror
    ):
        return PutFailure("EndpointConnectionError", f"could not connect: {exc.reason}")
    reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
    return PutFailure(
        OUTCOME_UNKNOWN,
        f"the request may have reached the API ({type(reason).__name__}: {reason}): the "
        "records may or may not be in the stream",
    )


class ApiClient:
    def __init__(
        self,
        url: str,
        *,
        session: boto3.session.Session | None = None,
        region: str | None = None,
        sign: bool | None = None,
        timeout_s: float = 30.0,
        max_attempts: int = 3,
        max_retry_after_s: float = 30.0,
        idempotent: bool = False,
        clock: Clock | None = None,
    ) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {url!r}")
        self.url = url.rstrip("/")
        self.sign = (not is_loopback(url)) if sign is None else sign
        self._session = session
        match = _REGION_IN_HOST.search(parts.hostname)
        self.region = (
            region
            or (match.group(1) if match else None)
            or (session.region_name if session is not None else None)
            or C.DEFAULT_REGION
        )
        self.timeout_s = timeout_s
        self.max_attempts = max(1, max_attempts)
        self.max_retry_after_s = max_retry_after_s
        self.record_ids = RecordIds() if idempotent else None
        self.clock = clock or SystemClock()
        self.requests = 0

    # --- the API ------------------------------------------------------------------------
    def health(self) -> dict[str, Any]:
        answer = self._exchange("GET", HEALTH_PATH, None)
        if answer.status != 200:
            raise self._error(answer)
        return dict(answer.json())

    def put_records(self, records: Iterable[RecordInput]) -> list[Outcome]:
        """One outcome per record, in order (the module doc gives batching and resends)."""
        queue = deque(self.prepare_records(records))
        outcomes: list[Outcome] = []
        while queue:
            chunk = take_batch(  # each entry takes its size and a comma, but for the last
                queue,
                max_records=C.KINESIS_MAX_RECORDS_PER_PUT,
                max_bytes=MAX_BODY_BYTES - _BODY_ENVELOPE_BYTES + 1,
                size=lambda record: wire_size(record) + 1,
            )
            results = self._put_request(chunk)
            outcomes += results
            stop = first_failure(results)
            if stop is not None:
                outcomes += [held_back(stop)] * len(queue)
                break
        return outcomes

    def prepare_records(self, records: Iterable[RecordInput]) -> list[ProducerRecord]:
        """The records validated (nothing is sent if one is bad) and, when idempotent, each
        given a record id: to retry later without duplicates, send these again."""
        return prepare_records(records, self.record_ids)

    def prepare(
        self, method: str, path: str, body: bytes | None, headers: dict[str, str] | None = None
    ) -> urllib.request.Request:
        """The HTTP request, signed with SigV4 when ``sign`` (nothing is sent)."""
        url = self.url + path
        all_headers = dict(headers or {})
        if body is not None:
            all_headers.setdefault("Content-Type", "application/json")
        if self.sign:
            aws_request = AWSRequest(method=method, url=url, data=body, headers=all_headers)
            SigV4Auth(self._credentials(), SIGNING_SERVICE, self.region).add_auth(aws_request)
            all_headers = dict(aws_request.headers.items())
        return urllib.request.Request(url, data=body, headers=all_headers, method=method)

    # --- internals ----------------------------------------------------------------------
    def _put_request(self, chunk: list[ProducerRecord]) -> list[Outcome]:
        body = encode_body(chunk)
        identified = all(record.record_id is not None for record in chunk)
        for attempt in range(1, self.max_attempts + 1):
            wait_s = _WAIT_WITHOUT_RETRY_AFTER_S
            try:
                answer = self._exchange("POST", RECORDS_PATH, body)
            except (OSError, http.client.HTTPException) as exc:
                failure = transport_failure(exc)
            else:
                if answer.status == 200:
                    return _results(answer.json(), len(chunk))
                error = self._error(answer)
                if answer.status not in _REQUEST_OUTCOMES:
                    raise error
                failure = PutFailure(_REQUEST_OUTCOMES[answer.status], error.error)
                wait_s = wait_s if error.retry_after_s is None else error.retry_after_s
            resend = failure.retryable or (failure.may_be_in_the_stream and identified)
            if not resend or attempt == self.max_attempts:
                tried = f"{attempt} request" + ("" if attempt == 1 else "s")
                final = PutFailure(failure.error_code, f"{failure.error_message} ({tried})")
                return [final] * len(chunk)
            if failure.may_be_in_the_stream:  # they may be in: ingest must look the ids up
                chunk = [replace(record, resent=True) for record in chunk]
                body = encode_body(chunk)
            self.clock.sleep(min(wait_s, self.max_retry_after_s))
        raise AssertionError("unreachable")  # pragma: no cover

    def _exchange(self, method: str, path: str, body: bytes | None) -> _Answer:
        request = self.prepare(method, path, body)
        self.requests += 1
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                return _Answer(response.status, dict(response.headers.items()), response.read())
        except urllib.error.HTTPError as exc:
            with exc:
                return _Answer(exc.code, dict(exc.headers.items()), exc.read())

    def _credentials(self) -> Any:
        session = self._session or boto3.session.Session()
        credentials = session.get_credentials()
        if credentials is None:
            raise ShardlogError("no AWS credentials to sign the API request with (SigV4)")
        return credentials.get_frozen_credentials()

    @staticmethod
    def _error(answer: _Answer) -> ApiError:
        body = answer.json()
        if not isinstance(body, dict):
            body = {"error": answer.body[:200].decode("utf-8", "replace") or "no body"}
        retry_after = next(
            (v for k, v in answer.headers.items() if k.lower() == "retry-after"), None
        )
        return ApiError(
            answer.status,
            str(body.get("error") or body.get("message") or body),
            field=body.get("field"),
            limit=body.get("limit"),
            retry_after_s=float(retry_after) if retry_after and retry_after.isdigit() else None,
        )


def _results(body: Any, expected: int) -> list[Outcome]:
    entries = body.get("records") if isinstance(body, dict) else None
    if not isinstance(entries, list) or len(entries) != expected:
        raise ApiError(200, f"unexpected answer: {str(body)[:200]}")
    return [
        PutResult(e["shardId"], e["sequenceNumber"])
        if "sequenceNumber" in e
        else PutFailure(str(e.get("errorCode")), str(e.get("errorMessage", "")))
        for e in entries
    ]
