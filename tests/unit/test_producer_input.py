"""Producer input checks: Kinesis limits at and past the edge, record ids and their envelope,
JSON lines, batch settings; the classification of outcomes; batching.

The producer against the embedded Kinesis: tests/functional/producer/test_producer.py.
"""

from __future__ import annotations

from collections import deque
from typing import Any

import pytest
from botocore.exceptions import (
    ClientError,
    ConnectionClosedError,
    ConnectTimeoutError,
    EndpointConnectionError,
    NoCredentialsError,
    ReadTimeoutError,
    ResponseStreamingError,
)

from shardlog import constants as C
from shardlog.aws import Clients
from shardlog.exceptions import ValidationError
from shardlog.idempotence import RECORD_ID_PATTERN, unwrap, wrap
from shardlog.outcomes import NOT_SENT, OUTCOME_UNKNOWN, FailureKind, PutFailure
from shardlog.producer import Producer, call_failure, take_batch
from shardlog.records import ProducerRecord, iter_json_records, validate_record

MIB = 1024 * 1024


def rejected(*args: Any, **kwargs: Any) -> ValidationError:
    with pytest.raises(ValidationError) as caught:
        validate_record(*args, **kwargs)
    return caught.value


# --- partition key ------------------------------------------------------------------------


@pytest.mark.parametrize("key", ["k", "k" * 256, "\u00e9" * 256, "\U0001f600" * 256])
def test_partition_key_of_1_to_256_characters_is_accepted(key: str) -> None:
    assert validate_record(key, b"").partition_key == key


@pytest.mark.parametrize("key", ["", "k" * 257, "\u00e9" * 257])
def test_partition_key_of_0_or_257_characters_is_rejected(key: str) -> None:
    error = rejected(key, b"")
    assert error.field == "partitionKey"
    assert error.limit == 256
    assert f"got {len(key)}" in str(error)


@pytest.mark.parametrize("key", [None, 5, b"key", ["k"]])
def test_partition_key_must_be_a_string(key: Any) -> None:
    error = rejected(key, b"")
    assert error.field == "partitionKey"
    assert error.limit == "1..256 chars"


def test_field_names_the_record_index() -> None:
    assert rejected("", b"", index=3).field == "records[3].partitionKey"
    assert rejected("k", 5, index=0).field == "records[0].data"
    assert rejected("k", b"", "-1", index=7).field == "records[7].explicitHashKey"


# --- record size: data plus UTF-8 key -----------------------------------------------------


def test_record_of_exactly_1_mib_including_the_key_is_accepted() -> None:
    record = validate_record("key", b"x" * (MIB - 3))
    assert record.size == C.KINESIS_MAX_RECORD_BYTES == 1_048_576


def test_record_one_byte_over_1_mib_is_rejected() -> None:
    error = rejected("key", b"x" * (MIB - 2))
    assert error.field == "data"
    assert error.limit == 1_048_576
    assert "1048577 bytes" in str(error)


def test_multibyte_key_counts_bytes_for_size_and_characters_for_length() -> None:
    key = "\u00e9" * 256  # 256 characters, 512 bytes
    assert validate_record(key, b"x" * (MIB - 512)).size == MIB
    error = rejected(key, b"x" * (MIB - 511))
    assert (error.field, error.limit) == ("data", MIB)
    emoji = "\U0001f600" * 256  # 256 characters, 1024 bytes
    assert validate_record(emoji, b"x" * (MIB - 1024)).size == MIB
    assert rejected(emoji, b"x" * (MIB - 1023)).field == "data"


def test_text_data_is_utf8_and_counted_in_bytes() -> None:
    assert validate_record("k", "\u00e9").data == b"\xc3\xa9"
    assert validate_record("kk", "\u00e9" * (MIB // 2 - 1)).size == MIB
    assert rejected("kk", "\u00e9" * (MIB // 2 - 1) + "x").field == "data"


@pytest.mark.parametrize("data", [5, None, ["x"], {"a": 1}])
def test_data_must_be_bytes(data: Any) -> None:
    error = rejected("k", data)
    assert (error.field, error.limit) == ("data", MIB)


def test_bytes_like_data_is_accepted() -> None:
    assert validate_record("k", bytearray(b"ab")).data == b"ab"
    assert validate_record("k", memoryview(b"ab")).data == b"ab"
    assert validate_record("k", b"").data == b""


# --- explicit hash key --------------------------------------------------------------------


@pytest.mark.parametrize("value", ["0", str(2**128 - 1)])
def test_explicit_hash_key_bounds_accepted(value: str) -> None:
    assert validate_record("k", b"", value).explicit_hash_key == value


def test_explicit_hash_key_past_the_top_is_rejected() -> None:
    error = rejected("k", b"", str(2**128))
    assert error.field == "explicitHashKey"
    assert error.limit == 2**128 - 1


@pytest.mark.parametrize("value", ["", "-1", "1.5", "abc", "\u0661", 7])
def test_explicit_hash_key_malformed_is_rejected(value: Any) -> None:
    error = rejected("k", b"", value)
    assert error.field == "explicitHashKey"
    assert error.limit == f"0..{2**128 - 1}"


# --- JSON lines ---------------------------------------------------------------------------


def test_iter_json_records_reads_every_shape() -> None:
    lines = [
        '{"partitionKey": "a", "data": "text"}',
        "",
        '{"partitionKey": "b", "dataBase64": "AP8="}',
        '{"partitionKey": "c", "data": "", "explicitHashKey": "42"}',
    ]
    assert list(iter_json_records(lines)) == [
        ProducerRecord("a", b"text"),
        ProducerRecord("b", b"\x00\xff"),
        ProducerRecord("c", b"", "42"),
    ]


@pytest.mark.parametrize(
    ("bad_line", "field", "message"),
    [
        ("{not json", "line 3", "invalid JSON"),
        ("[1, 2]", "line 3", "must be a JSON object"),
        ('{"partitionKey": "k", "dataBase64": "***"}', "line 3.dataBase64", "invalid base64"),
        ('{"data": "x"}', "line 3.partitionKey", "must be a string"),
        ('{"partitionKey": ""}', "line 3.partitionKey", "1 to 256"),
        ('{"partitionKey": "k", "explicitHashKey": "-1"}', "line 3.explicitHashKey", "decimal"),
        ('{"partitionKey": "k", "data": 5}', "line 3.data", "bytes"),
    ],
)
def test_iter_json_records_errors_name_the_line(bad_line: str, field: str, message: str) -> None:
    lines = ['{"partitionKey": "a"}', "   ", bad_line, '{"partitionKey": "z"}']
    records = iter_json_records(lines)
    assert next(records).partition_key == "a"
    with pytest.raises(ValidationError, match=message) as caught:
        next(records)
    assert caught.value.field == field
    assert str(caught.value).startswith(field)


def test_iter_json_records_size_error_names_the_line_and_limit() -> None:
    line = '{"partitionKey": "k", "data": "' + "x" * MIB + '"}'
    with pytest.raises(ValidationError) as caught:
        list(iter_json_records([line]))
    assert (caught.value.field, caught.value.limit) == ("line 1.data", MIB)


# --- Producer settings --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("max_records", "max_bytes", "field", "limit"),
    [
        (0, 5 * MIB, "max_batch_records", 500),
        (501, 5 * MIB, "max_batch_records", 500),
        (500, 0, "max_batch_bytes", 5 * MIB),
        (500, 5 * MIB + 1, "max_batch_bytes", 5 * MIB),
    ],
)
def test_producer_rejects_batch_limits_past_kinesis(
    max_records: int, max_bytes: int, field: str, limit: int
) -> None:
    with pytest.raises(ValidationError) as caught:
        Producer("s", Clients(), max_batch_records=max_records, max_batch_bytes=max_bytes)
    assert (caught.value.field, caught.value.limit) == (field, limit)


def test_producer_accepts_batch_limits_at_the_edges() -> None:
    for records, size in ((1, 1), (500, 5 * MIB)):
        producer = Producer("s", Clients(), max_batch_records=records, max_batch_bytes=size)
        assert (producer.max_batch_records, producer.max_batch_bytes) == (records, size)


# --- record ids and the idempotence envelope ----------------------------------------------


@pytest.mark.parametrize("record_id", ["r", "r" * 64, "producer:1", "a.b_c:d-E9"])
def test_record_ids_of_1_to_64_allowed_characters_are_accepted(record_id: str) -> None:
    record = validate_record("k", b"x", None, record_id)
    assert record.record_id == record_id
    assert unwrap(record.wire_data) == (record_id, b"x")
    assert record.entry()["Data"] == record.wire_data


@pytest.mark.parametrize(
    ("record_id", "limit"),
    [("", 64), ("r" * 65, 64), ("a b", RECORD_ID_PATTERN), ("\u00e9", RECORD_ID_PATTERN),
     (5, RECORD_ID_PATTERN)],
)  # fmt: skip
def test_bad_record_ids_are_rejected_naming_the_field_and_limit(record_id: Any, limit: Any) -> None:
    error = rejected("k", b"x", None, record_id, index=2)
    assert (error.field, error.limit) == ("records[2].recordId", limit)


def test_the_envelope_counts_against_the_1_mib_record_limit() -> None:
    record_id = "r" * 64  # the envelope is 75 bytes
    at_limit = validate_record("key", b"x" * (MIB - 3 - 75), None, record_id)
    assert at_limit.size == len(at_limit.wire_data) + 3 == MIB
    error = rejected("key", b"x" * (MIB - 3 - 75 + 1), None, record_id)
    assert (error.field, error.limit) == ("data", MIB)
    assert f"{MIB + 1} bytes" in str(error) and "envelope" in str(error)
    assert validate_record("key", b"x" * (MIB - 3 - 75 + 1)).size == MIB - 74  # no id: fits


def test_data_that_is_itself_an_envelope_is_refused_without_a_record_id() -> None:
    inner = wrap("inner", b"payload")
    error = rejected("k", inner)
    assert (error.field, error.limit) == ("data", "not an envelope")
    wrapped = validate_record("k", inner, None, "outer")
    assert unwrap(wrapped.wire_data) == ("outer", inner)
    merely_magic = b"\xffSLI not an envelope"
    assert validate_record("k", merely_magic).wire_data == merely_magic


def test_json_lines_may_carry_a_record_id() -> None:
    lines = ['{"partitionKey": "a", "data": "x", "recordId": "id-1"}']
    assert list(iter_json_records(lines)) == [ProducerRecord("a", b"x", None, "id-1")]
    with pytest.raises(ValidationError) as caught:
        list(iter_json_records(['{"partitionKey": "a", "recordId": ""}']))
    assert (caught.value.field, caught.value.limit) == ("line 1.recordId", 64)


def test_an_idempotent_producer_gives_every_record_without_an_id_a_new_one() -> None:
    producer = Producer("s", Clients(), idempotent=True)
    prepared = producer.prepare_records(
        [("a", b"1"), ProducerRecord("b", b"2", "7", "mine"), ("c", b"3", None, "given")]
    )
    ids = [r.record_id for r in prepared]
    assert ids[1:] == ["mine", "given"]
    assert ids[0] == f"{producer.record_ids.producer_id}:0"  # type: ignore[union-attr]
    assert prepared[1].explicit_hash_key == "7"
    assert producer.prepare_records([("a", b"1")])[0].record_id.endswith(":1")  # type: ignore[union-attr]
    assert Producer("s", Clients()).prepare_records([("a", b"1")])[0].record_id is None


def test_an_id_given_by_the_producer_still_counts_against_the_record_limit() -> None:
    producer = Producer("s", Clients(), idempotent=True)
    with pytest.raises(ValidationError) as caught:
        producer.prepare_records([("k", b"x" * (MIB - 1))])  # fits alone, not with an id
    assert (caught.value.field, caught.value.limit) == ("records[0].data", MIB)


# --- outcomes: one classification of error codes and whole-call failures ------------------


@pytest.mark.parametrize(
    ("code", "kind", "retryable"),
    [
        ("ProvisionedThroughputExceededException", FailureKind.THROTTLED, True),
        ("ThrottlingException", FailureKind.THROTTLED, True),
        ("KMSThrottlingException", FailureKind.THROTTLED, True),
        ("InternalFailure", FailureKind.UNAVAILABLE, True),
        ("EndpointConnectionError", FailureKind.UNAVAILABLE, True),
        ("ConnectTimeoutError", FailureKind.UNAVAILABLE, True),
        (NOT_SENT, FailureKind.NOT_SENT, True),
        (OUTCOME_UNKNOWN, FailureKind.UNKNOWN, False),
        ("InvalidArgumentException", FailureKind.INVALID, False),
        ("ResourceNotFoundException", FailureKind.INVALID, False),
    ],
)
def test_error_codes_are_classified_once(code: str, kind: FailureKind, retryable: bool) -> None:
    failure = PutFailure(code, "message")
    assert (failure.kind, failure.retryable) == (kind, retryable)
    assert failure.may_be_in_the_stream is (kind is FailureKind.UNKNOWN)


def client_error(code: str, status: int) -> ClientError:
    return ClientError(
        {"Error": {"Code": code, "Message": code}, "ResponseMetadata": {"HTTPStatusCode": status}},
        "PutRecords",
    )


URL = "https://kinesis.us-east-1.amazonaws.com"


@pytest.mark.parametrize(
    ("error", "code"),
    [
        # Kinesis answered 4xx, or nothing went out: provably not put.
        (client_error("KMSThrottlingException", 400), "KMSThrottlingException"),
        (client_error("ResourceNotFoundException", 400), "ResourceNotFoundException"),
        (EndpointConnectionError(endpoint_url=URL), "EndpointConnectionError"),
        (ConnectTimeoutError(endpoint_url=URL), "ConnectTimeoutError"),
        (NoCredentialsError(), "NoCredentialsError"),
        # The request went out: the answer was a 5xx, or was lost.
        (client_error("InternalFailure", 500), OUTCOME_UNKNOWN),
        (client_error("ServiceUnavailable", 503), OUTCOME_UNKNOWN),
        (ReadTimeoutError(endpoint_url=URL), OUTCOME_UNKNOWN),
        (ConnectionClosedError(endpoint_url=URL), OUTCOME_UNKNOWN),
        (ResponseStreamingError(error="reset"), OUTCOME_UNKNOWN),
    ],
)  # fmt: skip
def test_whole_call_failures_are_classified_by_whether_the_request_went_out(
    error: Exception, code: str
) -> None:
    failure = call_failure(error)  # type: ignore[arg-type]
    assert failure.error_code == code
    if code == OUTCOME_UNKNOWN:
        assert "may or may not be in the stream" in failure.error_message


# --- batches: at most N records and B bytes, one per key ------------------------------------


def test_take_batch_keeps_order_and_one_item_per_key() -> None:
    queue = deque(["a1", "b1", "a2", "c1", "b2", "d1"])
    batch = take_batch(queue, max_records=10, max_bytes=100, size=len, key=lambda i: i[0])
    assert batch == ["a1", "b1", "c1", "d1"]
    assert list(queue) == ["a2", "b2"]


def test_take_batch_a_skipped_key_stays_skipped_so_nothing_overtakes() -> None:
    queue = deque(["a1", "b1", "a2", "c1", "a3"])
    batch = take_batch(queue, max_records=2, max_bytes=100, size=len, key=lambda i: i[0])
    assert batch == ["a1", "b1"] and list(queue) == ["a2", "c1", "a3"]


@pytest.mark.parametrize(
    ("sizes", "max_bytes", "taken"),
    [([4, 4, 4], 8, 2), ([4, 4, 4], 7, 1), ([9, 1], 8, 1), ([4, 4], 8, 2)],
)
def test_take_batch_bounds_bytes_and_sends_an_oversized_item_alone(
    sizes: list[int], max_bytes: int, taken: int
) -> None:
    queue = deque(sizes)
    batch = take_batch(queue, max_records=10, max_bytes=max_bytes, size=lambda n: n)
    assert batch == sizes[:taken] and list(queue) == sizes[taken:]


def test_take_batch_bounds_records() -> None:
    queue = deque(range(1201))
    sizes = []
    while queue:
        sizes.append(len(take_batch(queue, max_records=500, max_bytes=10**9, size=lambda _: 1)))
    assert sizes == [500, 500, 201]
