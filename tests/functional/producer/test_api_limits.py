"""The producer API at and just past every limit, over HTTP against the embedded Kinesis.

Each refusal asserts the status, the whole error body, and that nothing reached the
stream (no PutRecords request was sent and the stream is empty); each acceptance at a
limit asserts the records are in the stream.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from shardlog import constants as C
from shardlog.api_client import (
    LAMBDA_MAX_REQUEST_BYTES,
    MAX_BODY_BYTES,
    MAX_DATA_PER_REQUEST_BYTES,
)
from shardlog.idempotence import RECORD_ID_PATTERN, open_envelope, overhead, unwrap
from shardlog.local.http_api import API_GATEWAY_MAX_PAYLOAD_BYTES, to_proxy_event
from tests.support.api import ApiUnderTest, HttpAnswer, post_json, send
from tests.support.readback import read_stream

MIB = C.MIB


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def record(key: str, data: bytes = b"x", **extra: Any) -> dict[str, Any]:
    return {"partitionKey": key, "data": b64(data), **extra}


def assert_refused(
    api: ApiUnderTest, answer: HttpAnswer, status: int, field: str | None, limit: Any
) -> dict[str, Any]:
    assert answer.status == status, answer.body[:300]
    assert answer.header("Content-Type") == "application/json"
    body = answer.json
    assert set(body) == {"error", "field", "limit"}
    assert (body["field"], body["limit"]) == (field, limit)
    assert isinstance(body["error"], str) and body["error"]
    if field is not None and field not in ("Content-Type", "method", "path"):
        assert body["error"].startswith(field), body["error"]
    assert api.kinesis_puts == 0
    assert read_stream(api.aws) == []
    return body


def assert_accepted(api: ApiUnderTest, answer: HttpAnswer, sent: list[dict[str, Any]]) -> None:
    assert answer.status == 200, answer.body[:300]
    body = answer.json
    assert body["failedRecordCount"] == 0
    assert len(body["records"]) == len(sent)
    stream = {(r.shard_id, r.sequence_number): r for r in read_stream(api.aws)}
    assert len(stream) == len(sent)
    for entry, result in zip(sent, body["records"], strict=True):
        found = stream[(result["shardId"], result["sequenceNumber"])]
        assert found.partition_key == entry["partitionKey"]
        assert found.data == base64.b64decode(entry["data"])


# --- number of records: 1 to 500 ---------------------------------------------------------


@pytest.mark.parametrize("count", [1, C.KINESIS_MAX_RECORDS_PER_PUT])
def test_1_and_500_records_are_accepted(api: ApiUnderTest, count: int) -> None:
    sent = [record(f"k{i}", f"v{i}".encode()) for i in range(count)]
    assert_accepted(api, post_json(api.url, {"records": sent}), sent)


@pytest.mark.parametrize("count", [0, C.KINESIS_MAX_RECORDS_PER_PUT + 1])
def test_0_and_501_records_are_refused(api: ApiUnderTest, count: int) -> None:
    sent = [record(f"k{i}") for i in range(count)]
    body = assert_refused(api, post_json(api.url, {"records": sent}), 400, "records", 500)
    assert f"got {count}" in body["error"]


# --- partition key: 1 to 256 characters ----------------------------------------------------


@pytest.mark.parametrize("key", ["k", "k" * 256, "\u00e9" * 256, "\U0001f600" * 256])
def test_partition_key_of_1_to_256_characters_is_accepted(api: ApiUnderTest, key: str) -> None:
    sent = [record(key)]
    assert_accepted(api, post_json(api.url, {"records": sent}), sent)


@pytest.mark.parametrize("key", ["", "k" * 257, "\u00e9" * 257])
def test_empty_or_257_character_partition_key_is_refused(api: ApiUnderTest, key: str) -> None:
    sent = [record("fine"), record(key)]
    body = assert_refused(
        api, post_json(api.url, {"records": sent}), 400, "records[1].partitionKey", 256
    )
    assert f"got {len(key)}" in body["error"]


@pytest.mark.parametrize(
    ("entry", "field"),
    [
        ({"data": "eA=="}, "records[0].partitionKey"),
        ({"partitionKey": 7, "data": "eA=="}, "records[0].partitionKey"),
        ({"partitionKey": None, "data": "eA=="}, "records[0].partitionKey"),
        ({"partitionKey": "k"}, "records[0].data"),
        ({"partitionKey": "k", "data": 5}, "records[0].data"),
    ],
)
def test_missing_or_mistyped_fields_are_refused(
    api: ApiUnderTest, entry: dict[str, Any], field: str
) -> None:
    assert_refused(api, post_json(api.url, {"records": [entry]}), 400, field, None)


def test_partition_key_with_a_lone_surrogate_is_refused_not_a_500(api: ApiUnderTest) -> None:
    body = '{"records": [{"partitionKey": "a\\ud800", "data": "eA=="}]}'
    assert_refused(api, post_json(api.url, body), 400, "records[0].partitionKey", "UTF-8")


# --- data: base64, data + UTF-8 key at most 1 MiB --------------------------------------------


@pytest.mark.parametrize("key", ["key", "\u00e9" * 256])
def test_record_of_exactly_1_mib_with_its_key_is_accepted(api: ApiUnderTest, key: str) -> None:
    data = b"\x00" * (MIB - len(key.encode()))
    sent = [record(key, data)]
    assert_accepted(api, post_json(api.url, {"records": sent}), sent)


@pytest.mark.parametrize("key", ["key", "\u00e9" * 256])
def test_record_one_byte_past_1_mib_is_413(api: ApiUnderTest, key: str) -> None:
    data = b"\x00" * (MIB - len(key.encode()) + 1)
    sent = [record("small"), record(key, data)]
    body = assert_refused(
        api,
        post_json(api.url, {"records": sent}),
        413,
        "records[1].data",
        C.KINESIS_MAX_RECORD_BYTES,
    )
    assert f"{MIB + 1} bytes" in body["error"]


@pytest.mark.parametrize("data", ["eA", "e===", "e$A=", "eA==eA==", "\u00e9A==", " eA=="])
def test_bad_base64_is_refused(api: ApiUnderTest, data: str) -> None:
    sent = [{"partitionKey": "k", "data": data}]
    body = assert_refused(api, post_json(api.url, {"records": sent}), 400, "records[0].data", None)
    assert "base64" in body["error"]


def test_empty_data_is_accepted(api: ApiUnderTest) -> None:
    sent = [record("k", b"")]
    assert_accepted(api, post_json(api.url, {"records": sent}), sent)


# --- record ids: 1 to 64 characters of [A-Za-z0-9._:-]; the envelope counts in the 1 MiB ----


@pytest.mark.parametrize("record_id", ["a", "A" * 64, "producer-1:42", "a.b_c:d-E9"])
def test_record_ids_of_1_to_64_allowed_characters_are_accepted(
    api: ApiUnderTest, record_id: str
) -> None:
    sent = [record("k", b"payload", recordId=record_id)]
    answer = post_json(api.url, {"records": sent})
    assert answer.status == 200 and answer.json["failedRecordCount"] == 0
    assert [unwrap(r.data) for r in read_stream(api.aws)] == [(record_id, b"payload")]


@pytest.mark.parametrize(
    ("record_id", "limit"),
    [("", 64), ("A" * 65, 64), ("has space", RECORD_ID_PATTERN), ("é", RECORD_ID_PATTERN),
     ("a/b", RECORD_ID_PATTERN), ("line\n", RECORD_ID_PATTERN)],
)  # fmt: skip
def test_bad_record_ids_are_refused(api: ApiUnderTest, record_id: str, limit: Any) -> None:
    sent = [record("k"), record("k", recordId=record_id)]
    assert_refused(api, post_json(api.url, {"records": sent}), 400, "records[1].recordId", limit)


def test_record_id_must_be_a_string(api: ApiUnderTest) -> None:
    sent = [record("k", recordId=7)]
    assert_refused(api, post_json(api.url, {"records": sent}), 400, "records[0].recordId", None)


def test_a_resent_record_travels_flagged_resent(api: ApiUnderTest) -> None:
    sent = [record("k", b"p", recordId="id-1", resent=True), record("k", b"q", recordId="id-2")]
    answer = post_json(api.url, {"records": sent})
    assert answer.status == 200 and answer.json["failedRecordCount"] == 0
    opened = [open_envelope(r.data) for r in read_stream(api.aws)]
    assert [(e.record_id, e.resent) for e in opened] == [("id-1", True), ("id-2", False)]


@pytest.mark.parametrize("resent", [1, "true", None])
def test_resent_must_be_a_boolean(api: ApiUnderTest, resent: Any) -> None:
    sent = [record("k", recordId="id-1", resent=resent)]
    assert_refused(api, post_json(api.url, {"records": sent}), 400, "records[0].resent", None)


def test_only_a_record_with_an_id_can_be_resent(api: ApiUnderTest) -> None:
    sent = [record("k"), record("k", resent=True)]
    assert_refused(api, post_json(api.url, {"records": sent}), 400, "records[1].resent", None)


def test_record_with_its_envelope_of_exactly_1_mib_is_accepted(api: ApiUnderTest) -> None:
    record_id = "r" * 64
    data = b"\x00" * (MIB - len("key") - overhead(record_id))
    sent = [record("key", data, recordId=record_id)]
    answer = post_json(api.url, {"records": sent})
    assert answer.status == 200 and answer.json["failedRecordCount"] == 0
    assert [unwrap(r.data) for r in read_stream(api.aws)] == [(record_id, data)]


def test_record_one_byte_past_1_mib_with_its_envelope_is_413(api: ApiUnderTest) -> None:
    record_id = "r" * 64
    data = b"\x00" * (MIB - len("key") - overhead(record_id) + 1)
    sent = [record("key", data, recordId=record_id)]
    body = assert_refused(api, post_json(api.url, {"records": sent}), 413, "records[0].data", MIB)
    assert f"{MIB + 1} bytes" in body["error"] and "envelope" in body["error"]


def test_data_that_is_itself_an_envelope_needs_a_record_id(api: ApiUnderTest) -> None:
    from shardlog.idempotence import wrap

    inner = wrap("inner", b"payload")
    refused = post_json(api.url, {"records": [record("k", inner)]})
    assert_refused(api, refused, 400, "records[0].data", "not an envelope")
    sent = [record("k", inner, recordId="outer")]
    assert post_json(api.url, {"records": sent}).status == 200
    assert [unwrap(r.data) for r in read_stream(api.aws)] == [("outer", inner)]


# --- the body: at most MAX_BODY_BYTES (below Lambda's cap), then API Gateway's 10 MiB ------


def padded(document: dict[str, Any], size: int) -> bytes:
    raw = json.dumps(document).encode()
    return raw + b" " * (size - len(raw))


def test_body_of_exactly_the_cap_is_accepted(api: ApiUnderTest) -> None:
    sent = [record("k", b"padded")]
    body = padded({"records": sent}, MAX_BODY_BYTES)
    assert len(body) == MAX_BODY_BYTES
    assert_accepted(api, post_json(api.url, body), sent)


def test_body_one_byte_past_the_cap_is_413_before_parsing(api: ApiUnderTest) -> None:
    body = padded({"records": [record("k")]}, MAX_BODY_BYTES + 1)
    assert_refused(api, post_json(api.url, body), 413, "body", MAX_BODY_BYTES)


def test_body_past_api_gateways_10_mib_is_413_unread(api: ApiUnderTest) -> None:
    body = b"{" + b" " * API_GATEWAY_MAX_PAYLOAD_BYTES
    answer = post_json(api.url, body)
    assert_refused(api, answer, 413, "body", API_GATEWAY_MAX_PAYLOAD_BYTES)
    assert api.server.requests == 0  # the function was never invoked


def most_data_per_request(extra_bytes: int) -> list[dict[str, Any]]:
    """Five records, 1-character keys, MAX_DATA_PER_REQUEST_BYTES + extra_bytes of data
    (in whole 3-byte groups, so no base64 padding is wasted; the extra in the last)."""
    groups = MAX_DATA_PER_REQUEST_BYTES // 3
    sizes = [3 * (groups // 5 + (1 if i < groups % 5 else 0)) for i in range(5)]
    sizes[-1] += extra_bytes
    return [record(str(i), bytes([i]) * size) for i, size in enumerate(sizes)]


def compact(document: Any) -> bytes:
    return json.dumps(document, separators=(",", ":")).encode()


def test_the_most_data_a_request_can_carry_is_accepted(api: ApiUnderTest) -> None:
    sent = most_data_per_request(0)
    body = compact({"records": sent})
    assert len(body) == MAX_BODY_BYTES
    assert_accepted(api, post_json(api.url, body), sent)


def test_one_byte_more_data_does_not_fit_the_body(api: ApiUnderTest) -> None:
    body = compact({"records": most_data_per_request(1)})
    assert len(body) > MAX_BODY_BYTES
    assert_refused(api, post_json(api.url, body), 413, "body", MAX_BODY_BYTES)


def test_a_body_just_past_the_limit_reaches_the_function_under_lambdas_cap() -> None:
    """The 413 is this API's, not the platform's: the Lambda event of a body one byte past
    the limit, with API Gateway's largest headers and the most escaping a request that
    passes the schema can need (keys of quotes and backslashes, every optional field), is
    under Lambda's request cap."""
    key = '"\\' * 128  # 256 characters that each take two bytes in JSON, and more escaped
    entry = record(key, b"", explicitHashKey="1", recordId="r" * 64)
    entries = [entry] * C.KINESIS_MAX_RECORDS_PER_PUT
    skeleton = compact({"records": entries})
    padding = MAX_BODY_BYTES + 1 - len(skeleton)
    entries[0] = record(key, b"\x00" * (padding // 4 * 3), explicitHashKey="1", recordId="r" * 64)
    body = compact({"records": entries})
    body += b" " * (MAX_BODY_BYTES + 1 - len(body))
    assert len(body) == MAX_BODY_BYTES + 1
    headers = [("Content-Type", "application/json"), ("Authorization", "a" * 10_000)]
    event = to_proxy_event("POST", "/v1/records", headers, body)
    assert len(json.dumps(event).encode()) < LAMBDA_MAX_REQUEST_BYTES


# --- JSON and unknown fields -----------------------------------------------------------------


@pytest.mark.parametrize("body", ["{", "", "not json", '{"records": [}', "\ufeff{}"])
def test_invalid_json_is_refused(api: ApiUnderTest, body: str) -> None:
    answer = post_json(api.url, body)
    refusal = assert_refused(api, answer, 400, "body", None)
    assert "JSON" in refusal["error"]


@pytest.mark.parametrize(
    ("document", "field"),
    [
        ({"records": [record("k")], "stream": "other"}, "stream"),
        (
            {"records": [record("k", sequenceNumberForOrdering="1")]},
            "records[0].sequenceNumberForOrdering",
        ),
        ({"records": [{"PartitionKey": "k", "Data": "eA=="}]}, "records[0].partitionKey"),
    ],
)
def test_unknown_fields_are_refused(api: ApiUnderTest, document: Any, field: str) -> None:
    assert_refused(api, post_json(api.url, document), 400, field, None)


@pytest.mark.parametrize(
    ("document", "field"),
    [([], "body"), ("text", "body"), (7, "body"), ({}, "records"), ({"records": {}}, "records")],
)
def test_wrong_shapes_are_refused(api: ApiUnderTest, document: Any, field: str) -> None:
    assert_refused(api, post_json(api.url, json.dumps(document)), 400, field, None)


# --- explicit hash key ---------------------------------------------------------------------


@pytest.mark.parametrize("value", ["0", str(C.MAX_HASH_KEY)])
def test_explicit_hash_key_bounds_are_accepted(api: ApiUnderTest, value: str) -> None:
    sent = [record("k", explicitHashKey=value)]
    assert_accepted(api, post_json(api.url, {"records": sent}), sent)


def test_explicit_hash_key_past_2_128_is_refused(api: ApiUnderTest) -> None:
    sent = [record("k", explicitHashKey=str(C.MAX_HASH_KEY + 1))]
    # Larger than 2^53: the limit is a string, so JavaScript clients read it exactly.
    assert_refused(
        api, post_json(api.url, {"records": sent}), 400, "records[0].explicitHashKey",
        str(C.MAX_HASH_KEY),
    )  # fmt: skip


@pytest.mark.parametrize("value", ["", "-1", "1.5", "abc", 7])
def test_malformed_explicit_hash_key_is_refused(api: ApiUnderTest, value: Any) -> None:
    sent = [record("k", explicitHashKey=value)]
    field = "records[0].explicitHashKey"
    answer = post_json(api.url, {"records": sent})
    limit = None if isinstance(value, int) else f"0..{C.MAX_HASH_KEY}"
    assert_refused(api, answer, 400, field, limit)


# --- media type, routes and methods ----------------------------------------------------------


@pytest.mark.parametrize(
    "content_type",
    ["text/plain", "application/x-www-form-urlencoded", "application/json; charset=latin-1", ""],
)
def test_wrong_content_type_is_415(api: ApiUnderTest, content_type: str) -> None:
    body = json.dumps({"records": [record("k")]})
    headers = {"Content-Type": content_type} if content_type else {}
    answer = send(api.url, "POST", "/v1/records", body, headers)
    assert_refused(api, answer, 415, "Content-Type", "application/json")


@pytest.mark.parametrize("content_type", ["application/json; charset=utf-8", "Application/JSON"])
def test_json_content_type_with_utf8_charset_is_accepted(
    api: ApiUnderTest, content_type: str
) -> None:
    sent = [record("k")]
    assert_accepted(api, post_json(api.url, {"records": sent}, content_type), sent)


def test_body_that_is_not_utf8_is_refused(api: ApiUnderTest) -> None:
    answer = post_json(api.url, b'{"records": [{"partitionKey": "\xff", "data": ""}]}')
    assert_refused(api, answer, 400, "body", None)


@pytest.mark.parametrize("path", ["/v1/record", "/v2/records", "/", "/v1/records/extra"])
def test_unknown_route_is_404(api: ApiUnderTest, path: str) -> None:
    answer = send(api.url, "POST", path, "{}", {"Content-Type": "application/json"})
    assert_refused(api, answer, 404, "path", None)


@pytest.mark.parametrize(
    ("method", "path", "allow"),
    [
        ("GET", "/v1/records", "POST"),
        ("PUT", "/v1/records", "POST"),
        ("DELETE", "/v1/records", "POST"),
        ("POST", "/v1/health", "GET"),
    ],
)
def test_wrong_method_is_405_with_allow(
    api: ApiUnderTest, method: str, path: str, allow: str
) -> None:
    answer = send(api.url, method, path, "{}", {"Content-Type": "application/json"})
    assert_refused(api, answer, 405, "method", None)
    assert answer.header("Allow") == allow


def test_health_answers_without_calling_aws(api: ApiUnderTest) -> None:
    answer = send(api.url, "GET", "/v1/health")
    assert answer.status == 200
    assert answer.json == {"status": "ok", "version": "0.1.0"}
    assert api.requests.total == 0
