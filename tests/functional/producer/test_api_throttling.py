"""Kinesis failures through the API: retried with backoff (injected clock), then answered per
record (200 with failed entries) or, when provably nothing went in, 429/503 with
Retry-After, and 502 when the outcome of every record is unknown.

Failures are injected at the SDK's call seam (tests/support/faults.py): Kinesis fails
chosen entries *without them being sent* (so what is in the stream is exactly what the
API acknowledged), or a whole PutRecords call raises what botocore raises. Everything else
is real: HTTP, the handler, the embedded Kinesis. Lost answers: test_lost_answers.py.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from botocore.exceptions import EndpointConnectionError, ReadTimeoutError

from shardlog.clock import ManualClock
from shardlog.outcomes import NOT_SENT, OUTCOME_UNKNOWN
from shardlog.producer import Producer
from tests.support.api import ApiUnderTest, post_json, serve
from tests.support.aws import stream_env
from tests.support.faults import (
    THROTTLED,
    FaultyProducer,
    RaisingProducer,
    client_error,
    entries_where,
)
from tests.support.readback import read_stream

MAX_ATTEMPTS = 5  # ProducerApiSettings' default
MAX_BACKOFF_S = 1.0


@pytest.fixture
def make_api(endpoint_url: str, clock: ManualClock) -> Iterator[Callable[..., ApiUnderTest]]:
    servers: list[Iterator[ApiUnderTest]] = []

    def make(producer_class: type[Producer], **kwargs: Any) -> ApiUnderTest:
        server = serve(stream_env(endpoint_url), clock, producer_class, **kwargs)
        servers.append(server)
        return next(server)

    yield make
    for server in servers:
        for _ in server:  # runs the generator's cleanup: shuts the server down
            pass


def body_of(records: list[tuple[str, bytes]]) -> dict[str, Any]:
    return {
        "records": [
            {"partitionKey": key, "data": base64.b64encode(data).decode()} for key, data in records
        ]
    }


def test_whole_request_throttled_after_retries_is_429_with_retry_after(
    make_api: Callable[..., ApiUnderTest],
) -> None:
    api = make_api(FaultyProducer, fail=entries_where(lambda _entry: True))
    answer = post_json(api.url, body_of([("a", b"1"), ("b", b"2")]))

    assert answer.status == 429
    assert answer.header("Retry-After") == "1"
    body = answer.json
    assert body == {"error": body["error"], "field": None, "limit": None}
    assert THROTTLED in body["error"] and "nothing was put" in body["error"]
    assert read_stream(api.aws) == []
    # Retried MAX_ATTEMPTS times with exponential backoff, all on the injected clock.
    assert len(api.clock.slept) == MAX_ATTEMPTS - 1
    assert all(0 <= s <= MAX_BACKOFF_S for s in api.clock.slept)


def test_whole_request_failed_internally_is_503_with_retry_after(
    make_api: Callable[..., ApiUnderTest],
) -> None:
    api = make_api(FaultyProducer, fail=entries_where(lambda _e: True), code="InternalFailure")
    answer = post_json(api.url, body_of([("a", b"1")]))
    assert answer.status == 503
    assert answer.header("Retry-After") == "1"
    assert "InternalFailure" in answer.json["error"]
    assert read_stream(api.aws) == []


def test_throttling_that_clears_within_the_retries_is_a_clean_200(
    make_api: Callable[..., ApiUnderTest],
) -> None:
    api = make_api(FaultyProducer, fail=entries_where(lambda entry: entry.attempt <= 2))
    records = [("a", b"1"), ("b", b"2"), ("c", b"3")]
    answer = post_json(api.url, body_of(records))

    assert answer.status == 200
    assert answer.json["failedRecordCount"] == 0
    assert len(api.clock.slept) == 2
    stream = read_stream(api.aws)
    assert sorted((r.partition_key, r.data) for r in stream) == records  # each exactly once
    acknowledged = {(e["shardId"], e["sequenceNumber"]) for e in answer.json["records"]}
    assert acknowledged == {(r.shard_id, r.sequence_number) for r in stream}


def test_some_entries_failing_after_retries_is_200_with_per_record_errors(
    make_api: Callable[..., ApiUnderTest],
) -> None:
    api = make_api(FaultyProducer, fail=entries_where(lambda entry: entry.partition_key in "bd"))
    records = [("a", b"1"), ("b", b"2"), ("c", b"3"), ("d", b"4")]
    answer = post_json(api.url, body_of(records))

    assert answer.status == 200
    body = answer.json
    assert body["failedRecordCount"] == 2
    entries = body["records"]
    assert [set(e) for e in entries] == [
        {"shardId", "sequenceNumber"},
        {"errorCode", "errorMessage"},
        {"shardId", "sequenceNumber"},
        {"errorCode", "errorMessage"},
    ]
    assert [entries[1]["errorCode"], entries[3]["errorCode"]] == [THROTTLED, THROTTLED]
    assert f"after {MAX_ATTEMPTS} attempts" in entries[1]["errorMessage"]
    stream = read_stream(api.aws)
    assert sorted(r.data for r in stream) == [b"1", b"3"]
    acknowledged = {(entries[i]["shardId"], entries[i]["sequenceNumber"]) for i in (0, 2)}
    assert acknowledged == {(r.shard_id, r.sequence_number) for r in stream}


def test_a_failed_record_holds_back_the_later_records_of_its_key(
    make_api: Callable[..., ApiUnderTest],
) -> None:
    # b#0 keeps failing: b#1 is never sent while b#0 awaits its retries, a's records go in.
    api = make_api(FaultyProducer, fail=entries_where(lambda entry: entry.data == b"b#0"))
    records = [("a", b"a#0"), ("b", b"b#0"), ("a", b"a#1"), ("b", b"b#1"), ("a", b"a#2")]
    answer = post_json(api.url, body_of(records))

    assert answer.status == 200
    entries = answer.json["records"]
    assert answer.json["failedRecordCount"] == 2
    assert [e.get("errorCode", "put") for e in entries] == [
        "put", THROTTLED, "put", NOT_SENT, "put",
    ]  # fmt: skip
    assert "not sent" in entries[3]["errorMessage"]
    stream = read_stream(api.aws)
    assert [r.data for r in stream if r.partition_key == "a"] == [b"a#0", b"a#1", b"a#2"]
    assert [r.data for r in stream if r.partition_key == "b"] == []


def test_records_of_one_key_in_one_request_keep_their_order(
    make_api: Callable[..., ApiUnderTest],
) -> None:
    api = make_api(FaultyProducer, fail=entries_where(lambda entry: entry.attempt == 1))
    records = [(f"k{i % 3}", f"k{i % 3}#{i // 3}".encode()) for i in range(12)]
    answer = post_json(api.url, body_of(records))

    assert answer.status == 200 and answer.json["failedRecordCount"] == 0
    stream = read_stream(api.aws)
    for key in ("k0", "k1", "k2"):
        mine = sorted((int(r.sequence_number), r.data) for r in stream if r.partition_key == key)
        assert [data for _, data in mine] == [f"{key}#{n}".encode() for n in range(4)]


@pytest.mark.parametrize(
    ("error", "status"),
    [
        (client_error("ThrottlingException"), 429),
        (client_error("LimitExceededException"), 429),
        (client_error(THROTTLED), 429),
        (client_error("KMSThrottlingException"), 429),
        (EndpointConnectionError(endpoint_url="https://kinesis.invalid"), 503),
    ],
)
def test_a_whole_call_refused_before_anything_was_put_is_429_or_503(
    make_api: Callable[..., ApiUnderTest], error: Exception, status: int
) -> None:
    api = make_api(RaisingProducer, error=error)
    answer = post_json(api.url, body_of([("a", b"1"), ("a", b"2")]))
    assert answer.status == status
    assert answer.header("Retry-After") == "1"
    assert answer.json["field"] is None
    assert "nothing was put" in answer.json["error"]
    assert len(api.clock.slept) == MAX_ATTEMPTS - 1  # provably not put: retried
    assert read_stream(api.aws) == []


@pytest.mark.parametrize(
    "error",
    [
        client_error("InternalFailure", 500),
        client_error("InternalFailureException", 500),
        client_error("ServiceUnavailable", 503),
        ReadTimeoutError(endpoint_url="https://kinesis.invalid"),
    ],
)
def test_a_whole_call_failing_after_the_request_went_out_is_502_outcome_unknown(
    make_api: Callable[..., ApiUnderTest], error: Exception
) -> None:
    api = make_api(RaisingProducer, error=error)
    answer = post_json(api.url, body_of([("a", b"1"), ("b", b"2")]))
    assert answer.status == 502
    assert answer.header("Retry-After") is None
    assert "outcome is unknown" in answer.json["error"]
    assert "nothing was put" not in answer.json["error"]
    assert api.clock.slept == []  # no record id: never sent again
    assert answer.json["field"] is None


def test_a_whole_call_failing_after_the_request_went_out_is_retried_with_record_ids(
    make_api: Callable[..., ApiUnderTest],
) -> None:
    api = make_api(RaisingProducer, error=client_error("InternalFailure", 500))
    records = [{**body_of([("a", b"1")])["records"][0], "recordId": "id-1"}]
    answer = post_json(api.url, {"records": records})
    assert answer.status == 502
    assert len(api.clock.slept) == MAX_ATTEMPTS - 1
    assert f"after {MAX_ATTEMPTS} attempts" in answer.json["error"]


def test_kinesis_refusing_the_arguments_is_400_not_a_retry(
    make_api: Callable[..., ApiUnderTest],
) -> None:
    api = make_api(RaisingProducer, error=client_error("InvalidArgumentException"))
    answer = post_json(api.url, body_of([("a", b"1")]))
    assert answer.status == 400
    assert answer.json["field"] == "records"
    assert "InvalidArgumentException" in answer.json["error"]


def test_a_misconfigured_stream_is_a_json_500_naming_the_code(
    make_api: Callable[..., ApiUnderTest],
) -> None:
    api = make_api(RaisingProducer, error=client_error("ResourceNotFoundException"))
    answer = post_json(api.url, body_of([("a", b"1")]))
    assert answer.status == 500
    assert answer.json == {
        "error": "the stream refused the records (ResourceNotFoundException); nothing was put",
        "field": None,
        "limit": None,
    }


def test_later_calls_failing_as_a_whole_answer_the_first_call_and_errors_for_the_rest(
    make_api: Callable[..., ApiUnderTest],
) -> None:
    api = make_api(RaisingProducer, error=client_error("ThrottlingException"), passing_calls=1)
    answer = post_json(api.url, body_of([("a", b"a#0"), ("b", b"b#0"), ("a", b"a#1")]))

    assert answer.status == 200
    entries = answer.json["records"]
    assert answer.json["failedRecordCount"] == 1
    assert "sequenceNumber" in entries[0] and "sequenceNumber" in entries[1]
    assert entries[2]["errorCode"] == "ThrottlingException"
    assert f"after {MAX_ATTEMPTS} attempts" in entries[2]["errorMessage"]
    assert sorted(r.data for r in read_stream(api.aws)) == [b"a#0", b"b#0"]


def test_a_whole_call_failing_after_some_records_went_in_never_answers_nothing_put(
    make_api: Callable[..., ApiUnderTest],
) -> None:
    """First call: one record in, one throttled; its retries then fail as a whole. The
    record that went in must be answered with its sequence number (not 429 "nothing was
    put", which would make a client resend it and duplicate it in the log)."""
    api = make_api(
        RaisingProducer,
        error=client_error("ThrottlingException"),
        passing_calls=1,
        fail=entries_where(lambda entry: entry.data == b"b#0"),
    )
    answer = post_json(api.url, body_of([("a", b"a#0"), ("b", b"b#0")]))

    assert answer.status == 200
    entries = answer.json["records"]
    assert "sequenceNumber" in entries[0]
    assert entries[1]["errorCode"] == "ThrottlingException"
    assert answer.json["failedRecordCount"] == 1
    assert [r.data for r in read_stream(api.aws)] == [b"a#0"]


def test_an_unknown_outcome_after_some_records_went_in_is_answered_per_record(
    make_api: Callable[..., ApiUnderTest],
) -> None:
    api = make_api(RaisingProducer, error=client_error("InternalFailure", 500), passing_calls=1)
    answer = post_json(api.url, body_of([("a", b"a#0"), ("a", b"a#1"), ("a", b"a#2")]))

    assert answer.status == 200
    codes = [e.get("errorCode", "put") for e in answer.json["records"]]
    assert codes == ["put", OUTCOME_UNKNOWN, NOT_SENT]
    assert [r.data for r in read_stream(api.aws)] == [b"a#0"]


def test_a_failure_of_the_function_itself_is_502_outcome_unknown(
    make_api: Callable[..., ApiUnderTest],
) -> None:
    # It may come after records went in: never "nothing was put", never a retry hint.
    api = make_api(RaisingProducer, error=RuntimeError("a bug"), passing_calls=1)
    answer = post_json(api.url, body_of([("a", b"a#0"), ("a", b"a#1")]))
    assert answer.status == 502
    assert answer.json == {
        "error": "the function failed (RuntimeError); the outcome is unknown",
        "field": None,
        "limit": None,
    }
    assert answer.header("Retry-After") is None
    assert [r.data for r in read_stream(api.aws)] == [b"a#0"]
