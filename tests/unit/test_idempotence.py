"""The idempotence envelope (shardlog/idempotence.py): round trips, the exact bytes, what is
not an envelope, record id limits at and past the edge, and unique record ids."""

from __future__ import annotations

import struct
import subprocess
import sys
import threading
import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shardlog import idempotence
from shardlog.idempotence import (
    MAGIC,
    MAX_OVERHEAD_BYTES,
    RECORD_ID_MAX_BYTES,
    RECORD_ID_PATTERN,
    Envelope,
    RecordIds,
    is_envelope,
    open_envelope,
    overhead,
    record_id_problem,
    unwrap,
    wrap,
)

record_ids = st.text(
    alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._:-",
    min_size=1,
    max_size=RECORD_ID_MAX_BYTES,
)


@given(record_id=record_ids, payload=st.binary(max_size=2048))
def test_unwrap_gives_back_what_wrap_was_given(record_id: str, payload: bytes) -> None:
    envelope = wrap(record_id, payload)
    assert unwrap(envelope) == (record_id, payload)
    assert len(envelope) == len(payload) + overhead(record_id) <= len(payload) + 75
    assert is_envelope(envelope)


@given(record_id=record_ids, inner=record_ids, payload=st.binary(max_size=256))
def test_an_envelope_as_payload_comes_back_whole(
    record_id: str, inner: str, payload: bytes
) -> None:
    nested = wrap(inner, payload)
    assert unwrap(wrap(record_id, nested)) == (record_id, nested)


@given(payload=st.binary(max_size=512))
def test_random_payloads_are_plain_payloads(payload: bytes) -> None:
    assert unwrap(payload) == (None, payload)


@given(text=st.text(max_size=256))
def test_no_utf8_text_is_ever_an_envelope(text: str) -> None:
    data = text.encode("utf-8", "surrogatepass")
    assert unwrap(data) == (None, data)  # 0xFF, the magic's first byte, is never in UTF-8


def test_the_envelope_byte_by_byte() -> None:
    envelope = wrap("p:7", b"hello")
    header = b"\xffSLI" + b"\x01" + b"\x00" + b"\x03" + b"p:7"
    assert envelope == header + struct.pack(">I", zlib.crc32(header)) + b"hello"
    resent = b"\xffSLI" + b"\x01" + b"\x01" + b"\x03" + b"p:7"
    assert (
        wrap("p:7", b"hello", resent=True)
        == resent + struct.pack(">I", zlib.crc32(resent)) + b"hello"
    )
    assert overhead("p:7") == 14 and MAX_OVERHEAD_BYTES == 75


def test_the_resent_flag_round_trips_and_unknown_flags_are_a_plain_payload() -> None:
    assert open_envelope(wrap("p:7", b"x", resent=True)) == Envelope("p:7", True, b"x")
    assert open_envelope(wrap("p:7", b"x")) == Envelope("p:7", False, b"x")
    header = b"\xffSLI" + b"\x01" + b"\x02" + b"\x03" + b"p:7"  # a flag this version lacks
    unknown = header + struct.pack(">I", zlib.crc32(header)) + b"x"
    assert open_envelope(unknown) == Envelope(None, False, unknown)


def test_empty_payload_round_trips() -> None:
    assert unwrap(wrap("id", b"")) == ("id", b"")


@pytest.mark.parametrize(
    "data",
    [
        MAGIC,  # only the magic
        MAGIC + b"\x01",  # no flags
        MAGIC + b"\x01\x00",  # no id length
        MAGIC + b"\x01\x00\x05ab",  # id cut short, no CRC
        MAGIC + b"rest of a payload that merely starts with the magic",
        MAGIC + b"\x01\x00" + b"\x00" * 4,  # id length 0
        MAGIC + b"\x01\x41" + b"a" * 65 + b"\x00" * 4,  # id length 65
    ],
)
def test_payloads_that_merely_start_with_the_magic_are_plain(data: bytes) -> None:
    assert unwrap(data) == (None, data)
    assert not is_envelope(data)


@pytest.mark.parametrize("cut", range(1, 15))
def test_every_truncated_header_is_a_plain_payload(cut: int) -> None:
    whole = wrap("abc", b"")  # 14 bytes: all header
    assert unwrap(whole[:cut]) == ((None, whole[:cut]) if cut < 14 else ("abc", b""))


def test_a_bad_crc_is_a_plain_payload() -> None:
    envelope = bytearray(wrap("abc", b"payload"))
    envelope[9] ^= 0x01  # a bit of the id
    assert unwrap(bytes(envelope)) == (None, bytes(envelope))
    envelope = bytearray(wrap("abc", b"payload"))
    envelope[12] ^= 0x80  # a bit of the CRC itself
    assert unwrap(bytes(envelope)) == (None, bytes(envelope))


def test_another_version_is_a_plain_payload() -> None:
    header = MAGIC + b"\x02\x03abc"
    data = header + struct.pack(">I", zlib.crc32(header)) + b"x"
    assert unwrap(data) == (None, data)


def test_an_id_with_bad_characters_and_a_good_crc_is_a_plain_payload() -> None:
    header = MAGIC + b"\x01\x03a b"
    data = header + struct.pack(">I", zlib.crc32(header))
    assert unwrap(data) == (None, data)


@pytest.mark.parametrize("record_id", ["a", "A" * 64, "0.1_2:3-4", "-", "...", ":"])
def test_record_ids_at_the_edges_are_valid(record_id: str) -> None:
    assert record_id_problem(record_id) is None
    assert unwrap(wrap(record_id, b"x")) == (record_id, b"x")


@pytest.mark.parametrize(
    ("record_id", "limit"),
    [
        ("", RECORD_ID_MAX_BYTES),
        ("A" * 65, RECORD_ID_MAX_BYTES),
        ("a b", RECORD_ID_PATTERN),
        ("a/b", RECORD_ID_PATTERN),
        ("\u00e9", RECORD_ID_PATTERN),
        ("abc\n", RECORD_ID_PATTERN),
        (7, RECORD_ID_PATTERN),
        (b"abc", RECORD_ID_PATTERN),
    ],
)
def test_invalid_record_ids_name_their_limit(record_id: object, limit: object) -> None:
    problem = record_id_problem(record_id)
    assert problem is not None and problem[1] == limit
    with pytest.raises(ValueError, match="record id"):
        wrap(record_id, b"x")  # type: ignore[arg-type]


def test_record_ids_are_unique_across_threads_and_producers() -> None:
    first, second = RecordIds(), RecordIds()
    seen: list[str] = []
    lock = threading.Lock()

    def take(ids: RecordIds) -> None:
        mine = [ids.next() for _ in range(500)]
        with lock:
            seen.extend(mine)

    threads = [threading.Thread(target=take, args=(ids,)) for ids in (first, second) * 2]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert len(seen) == len(set(seen)) == 2000
    assert all(record_id_problem(i) is None for i in seen)
    assert first.producer_id != second.producer_id
    assert record_id_problem(f"{first.producer_id}:{2**64}") is None  # room for 2^64 ids


def test_a_producer_id_that_leaves_no_room_for_the_counter_is_refused() -> None:
    assert RecordIds("p").next() == "p:0"
    with pytest.raises(ValueError, match="producer id"):
        RecordIds("p" * 44)


def test_the_envelope_module_needs_only_the_standard_library() -> None:
    code = "import sys, shardlog.idempotence; print(sorted(sys.modules))"
    loaded = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True, timeout=60
    ).stdout
    assert "boto3" not in loaded and "botocore" not in loaded and "pydantic" not in loaded
    assert idempotence.__doc__ is not None and "offset" in idempotence.__doc__
