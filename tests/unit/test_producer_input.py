"""Producer input checks: Kinesis limits at and past the edge, JSON lines, batch settings.

The producer against the embedded Kinesis: tests/functional/producer/test_producer.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from shardlog import constants as C
from shardlog.aws import Clients
from shardlog.exceptions import ValidationError
from shardlog.producer import (
    Producer,
    ProducerRecord,
    iter_json_records,
    validate_record,
)

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
