"""A client of the producer HTTP API (POST /v1/records, GET /v1/health).

Requests to AWS are signed with SigV4 (botocore's signer, service ``execute-api``, the
caller's boto3 credentials), as the API's IAM auth requires; requests to the local
server on 127.0.0.1 or localhost go unsigned. Standard library HTTP only.

``put_records`` sends batches of at most 500 records and 5 MiB, in order, and answers
one result per record: a PutResult, or an ApiRecordError for a record the API did not
put. A batch the API refused whole with 429 or 503 (nothing was put) is sent again after
Retry-After, up to ``max_attempts``. Once a batch has a failed record, later batches are
not sent (their records are answered ``NotSent``), so resending the failed records in
order keeps each key's order.
"""

from __future__ import annotations

import base64
import json
import re
import urllib.error
import urllib.request
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import boto3
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest

from shardlog import constants as C
from shardlog.clock import Clock, SystemClock
from shardlog.exceptions import ShardlogError
from shardlog.producer import ProducerRecord, PutResult

SIGNING_SERVICE = "execute-api"
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})
RECORDS_PATH = "/v1/records"
HEALTH_PATH = "/v1/health"
NOT_SENT = "NotSent"
_REGION_IN_HOST = re.compile(r"\.execute-api\.([a-z0-9-]+)\.amazonaws\.com")


@dataclass(frozen=True)
class ApiRecordError:
    """A record the API did not put: Kinesis' code (or NotSent) and message."""

    error_code: str
    error_message: str


class ApiError(ShardlogError):
    """The API answered an error (4xx/5xx): its status and the body's error, field, limit."""

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
        self.clock = clock or SystemClock()
        self.requests = 0

    # --- the API ------------------------------------------------------------------------
    def health(self) -> dict[str, Any]:
        answer = self._send("GET", HEALTH_PATH, None)
        if answer.status != 200:
            raise self._error(answer)
        return dict(answer.json())

    def put_records(
        self, records: Iterable[ProducerRecord | tuple[Any, ...]]
    ) -> list[PutResult | ApiRecordError]:
        """One result per record, in order (see the module doc for batching and retries)."""
        items = [self._record(r) for r in records]
        out: list[PutResult | ApiRecordError] = []
        for chunk in _chunks(items):
            if any(isinstance(r, ApiRecordError) for r in out):
                out += [ApiRecordError(NOT_SENT, "not sent: an earlier record was not put")] * len(
                    chunk
                )
                continue
            out += self._put_batch(chunk)
        return out

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
    def _put_batch(self, chunk: Sequence[ProducerRecord]) -> list[PutResult | ApiRecordError]:
        body = json.dumps({"records": [_wire(r) for r in chunk]}).encode()
        for attempt in range(1, self.max_attempts + 1):
            answer = self._send("POST", RECORDS_PATH, body)
            if answer.status == 200:
                return _results(answer.json(), len(chunk))
            error = self._error(answer)
            if answer.status not in (429, 503) or attempt == self.max_attempts:
                raise error
            wait_s = 1.0 if error.retry_after_s is None else error.retry_after_s
            self.clock.sleep(min(wait_s, self.max_retry_after_s))
        raise AssertionError("unreachable")  # pragma: no cover

    def _send(self, method: str, path: str, body: bytes | None) -> _Answer:
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
    def _record(record: ProducerRecord | tuple[Any, ...]) -> ProducerRecord:
        if isinstance(record, ProducerRecord):
            return record
        key, data, *rest = record
        if isinstance(data, str):
            data = data.encode("utf-8")
        return ProducerRecord(key, bytes(data), rest[0] if rest else None)

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


def _wire(record: ProducerRecord) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "partitionKey": record.partition_key,
        "data": base64.b64encode(record.data).decode("ascii"),
    }
    if record.explicit_hash_key is not None:
        entry["explicitHashKey"] = record.explicit_hash_key
    return entry


def _results(body: Any, expected: int) -> list[PutResult | ApiRecordError]:
    entries = body.get("records") if isinstance(body, dict) else None
    if not isinstance(entries, list) or len(entries) != expected:
        raise ApiError(200, f"unexpected answer: {str(body)[:200]}")
    return [
        PutResult(e["shardId"], e["sequenceNumber"])
        if "sequenceNumber" in e
        else ApiRecordError(str(e.get("errorCode")), str(e.get("errorMessage", "")))
        for e in entries
    ]


def _chunks(records: Sequence[ProducerRecord]) -> Iterator[list[ProducerRecord]]:
    """Batches of at most 500 records and 5 MiB, in order (an oversized record goes alone,
    and the API answers 413 naming it)."""
    chunk: list[ProducerRecord] = []
    size = 0
    for record in records:
        full = len(chunk) == C.KINESIS_MAX_RECORDS_PER_PUT
        if chunk and (full or size + record.size > C.KINESIS_MAX_BYTES_PER_PUT):
            yield chunk
            chunk, size = [], 0
        chunk.append(record)
        size += record.size
    if chunk:
        yield chunk
