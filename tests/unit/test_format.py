"""Segment format v1 and v2: round trip, the documented example, every way a segment can be bad."""

from __future__ import annotations

import re
import struct
import zlib
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardlog import constants as C
from shardlog import format as segment_format
from shardlog.exceptions import SegmentFormatError
from shardlog.format import (
    VERSIONS,
    IncomingRecord,
    decode_segment,
    encode_segment,
    encoded_record_size,
    plan_segments,
)
from tests.support import DOCS

FORMAT_DOC = DOCS / "FORMAT.md"

# The worked example of docs/FORMAT.md, section 8.
EXAMPLE_PARTITION = "shardId-000000000000"
EXAMPLE_FIRST_SEQ = 7
EXAMPLE_WRITTEN_AT_MS = 1_700_000_001_000
EXAMPLE_RECORDS = (
    IncomingRecord(
        "user-42",
        b'{"n":1}',
        "49590338271490256608559692538361571095921575989136588898",
        1_700_000_000_123,
    ),
    IncomingRecord(
        "\u00e9",
        b"\x00\xff",
        "49590338271490256608559692538361571095921575989136588899",
        1_700_000_000_456,
    ),
)


def example_blob() -> bytes:
    return encode_segment(
        EXAMPLE_PARTITION, EXAMPLE_FIRST_SEQ, EXAMPLE_RECORDS, EXAMPLE_WRITTEN_AT_MS
    )


def doc_section(name: str) -> str:
    text = FORMAT_DOC.read_text(encoding="utf-8")
    match = re.search(rf"<!-- {name}:begin -->\n```\w*\n(.*?)```\n<!-- {name}:end -->", text, re.S)
    assert match, f"docs/FORMAT.md has no {name} block"
    return match.group(1)


def doc_hex_dump() -> bytes:
    """The bytes of the worked example, parsed from its `hexdump -C` listing in the doc."""
    out = bytearray()
    for line in doc_section("worked-example").splitlines():
        offset, _, rest = line.partition("  ")
        assert int(offset, 16) == len(out), f"hex dump line {line!r} starts at the wrong offset"
        hex_part = rest.split("|", 1)[0]
        out += bytes.fromhex(hex_part)
    return bytes(out)


def doc_decoder() -> Any:
    namespace: dict[str, Any] = {}
    exec(compile(doc_section("decoder"), "docs/FORMAT.md", "exec"), namespace)
    return namespace["decode_segment"]


def seal(body: bytes) -> bytes:
    """Append a correct CRC, so a structural defect is what the decoder meets."""
    return body + struct.pack(">I", zlib.crc32(body))


def header(
    partition_id: str | bytes = "p",
    first_seq: int = 0,
    count: int = 1,
    *,
    version: int = 1,
    flags: int = 0,
) -> bytes:
    pid = partition_id.encode() if isinstance(partition_id, str) else partition_id
    return (
        struct.pack(">4sBBH", b"SHLG", version, flags, len(pid))
        + pid
        + struct.pack(">QIQ", first_seq, count, 0)
    )


def raw_record(kseq: bytes = b"1", key: bytes = b"k", data: bytes = b"d") -> bytes:
    return (
        struct.pack(">B", len(kseq))
        + kseq
        + struct.pack(">QH", 5, len(key))
        + key
        + struct.pack(">I", len(data))
        + data
    )


# --- round trip ---------------------------------------------------------------------------


def record_strategy(
    key: int, data: int, seq: int, record_id: st.SearchStrategy[str | None]
) -> st.SearchStrategy[IncomingRecord]:
    """Records whose partition key, data and sequence number take at most these lengths."""
    return st.builds(
        IncomingRecord,
        partition_key=st.text(min_size=1, max_size=key),
        data=st.binary(max_size=data),
        kinesis_sequence_number=st.text(alphabet="0123456789", min_size=1, max_size=seq),
        arrival_ms=st.integers(min_value=0, max_value=2**64 - 1),
        record_id=record_id,
        resent=st.just(False),  # not stored: only ingest reads it
    )


incoming_records = record_strategy(  # the format's limits; record ids as the envelope's
    256, 2048, 128, st.none() | st.from_regex(r"[A-Za-z0-9._:-]{1,64}", fullmatch=True)
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    partition_id=st.text(min_size=1, max_size=64),
    first_seq=st.integers(min_value=0, max_value=2**63),
    records=st.lists(incoming_records, min_size=1, max_size=8),
    written_at_ms=st.integers(min_value=0, max_value=2**64 - 1),
)
def test_round_trip(
    partition_id: str, first_seq: int, records: list[IncomingRecord], written_at_ms: int
) -> None:
    blob = encode_segment(partition_id, first_seq, records, written_at_ms)
    segment = decode_segment(blob)

    assert segment.partition_id == partition_id
    assert segment.first_seq == first_seq
    assert segment.written_at_ms == written_at_ms
    assert segment.next_seq == first_seq + len(records)
    assert [r.seq for r in segment.records] == list(range(first_seq, first_seq + len(records)))
    for decoded, original in zip(segment.records, records, strict=True):
        assert decoded.partition_id == partition_id
        assert decoded.partition_key == original.partition_key
        assert decoded.data == original.data
        assert decoded.kinesis_sequence_number == original.kinesis_sequence_number
        assert decoded.arrival_ms == original.arrival_ms
        assert decoded.record_id == original.record_id
    pid_bytes = len(partition_id.encode("utf-8"))
    # In a segment where some record has an id, one without takes its id length too (0).
    with_ids = any(r.record_id is not None for r in records)
    id_lengths = sum(r.record_id is None for r in records) if with_ids else 0
    size = sum(map(encoded_record_size, records)) + id_lengths
    assert len(blob) == 28 + pid_bytes + size + 4
    # The decoder printed in docs/FORMAT.md reads the same thing.
    documented = doc_decoder()(blob)
    assert documented["partition_id"] == partition_id
    assert documented["records"] == [
        (
            first_seq + i,
            r.partition_key,
            r.data,
            r.kinesis_sequence_number,
            r.arrival_ms,
            r.record_id,
        )
        for i, r in enumerate(records)
    ]


def test_encode_rejects_what_the_format_cannot_hold() -> None:
    record = EXAMPLE_RECORDS[0]
    with pytest.raises(ValueError, match="at least one record"):
        encode_segment("p", 0, [], 0)
    with pytest.raises(ValueError, match="out of range"):
        encode_segment("p", -1, [record], 0)
    with pytest.raises(ValueError, match="out of range"):
        encode_segment("p", 2**64 - 1, [record], 0)
    for bad in ("", "12a", "1" * 129, "-1"):
        with pytest.raises(ValueError, match="Kinesis sequence number"):
            encode_segment("p", 0, [IncomingRecord("k", b"", bad, 0)], 0)
    with pytest.raises(ValueError):  # non-ASCII digits: a UnicodeEncodeError, still a ValueError
        encode_segment("p", 0, [IncomingRecord("k", b"", "\u0661", 0)], 0)
    encode_segment("p", 0, [IncomingRecord("k", b"", "9" * 128, 0)], 0)


# --- the documented example ---------------------------------------------------------------


def test_worked_example_in_the_doc_is_what_encode_segment_writes() -> None:
    documented = doc_hex_dump()
    assert documented == example_blob()
    assert len(documented) == 212
    assert documented[208:] == struct.pack(">I", zlib.crc32(documented[:208]))
    assert zlib.crc32(documented[:208]) == 0x4F5699C2
    assert zlib.crc32(b"123456789") == 0xCBF43926  # the check value the doc quotes


def test_worked_example_decodes_to_the_documented_records() -> None:
    segment = decode_segment(doc_hex_dump())
    assert segment.partition_id == EXAMPLE_PARTITION
    assert segment.first_seq == 7
    assert segment.next_seq == 9
    assert segment.written_at_ms == EXAMPLE_WRITTEN_AT_MS
    assert [(r.seq, r.partition_key, r.data) for r in segment.records] == [
        (7, "user-42", b'{"n":1}'),
        (8, "\u00e9", b"\x00\xff"),
    ]


def test_documented_decoder_reads_the_example_and_rejects_defects() -> None:
    decode = doc_decoder()
    blob = example_blob()
    segment = decode(blob)
    assert segment["first_seq"] == 7
    assert [r[1] for r in segment["records"]] == ["user-42", "\u00e9"]
    defects = [
        b"XXXX" + blob[4:],
        blob[:4] + b"\x02" + blob[5:],
        blob[:5] + b"\x01" + blob[6:],
        blob[:100] + bytes([blob[100] ^ 1]) + blob[101:],
        blob[:-1],
        blob + b"\x00",
        seal(header(count=0)),
        seal(header(count=2) + raw_record()),
        seal(header() + raw_record() + b"junk"),
        seal(header() + raw_record(kseq=b"12x")),
        seal(header() + raw_record(key=b"\xff")),
    ]
    for defect in defects:
        with pytest.raises(ValueError):
            decode(defect)


# --- corruption ---------------------------------------------------------------------------


def test_bad_magic() -> None:
    blob = example_blob()
    with pytest.raises(SegmentFormatError, match="not a shardlog segment: magic b'SHLX'"):
        decode_segment(b"SHLX" + blob[4:])


@pytest.mark.parametrize("version", [0, 4, 255])
def test_unknown_version(version: int) -> None:
    blob = seal(header(version=version) + raw_record())
    with pytest.raises(SegmentFormatError, match=f"unsupported segment version {version} "):
        decode_segment(blob)


@pytest.mark.parametrize("flags", [0x01, 0x80, 0xFF])
def test_nonzero_flags(flags: int) -> None:
    blob = seal(header(flags=flags) + raw_record())
    with pytest.raises(SegmentFormatError, match=f"unsupported segment flags {flags:#04x}"):
        decode_segment(blob)


def test_any_flipped_bit_is_detected() -> None:
    blob = example_blob()
    for position in range(len(blob)):
        for bit in range(8):
            corrupt = bytearray(blob)
            corrupt[position] ^= 1 << bit
            with pytest.raises(SegmentFormatError) as caught:
                decode_segment(bytes(corrupt))
            message = str(caught.value)
            if position < 4:
                assert "not a shardlog segment" in message
            elif position == 4 and corrupt[4] not in VERSIONS:
                assert "unsupported segment version" in message
            elif position == 5:
                assert "unsupported segment flags" in message
            else:
                assert "checksum mismatch" in message, (position, bit, message)


def test_every_truncation_is_detected() -> None:
    blob = example_blob()
    for length in range(len(blob)):
        with pytest.raises(SegmentFormatError, match=r"truncated|checksum mismatch"):
            decode_segment(blob[:length])


def test_every_truncation_is_detected_even_with_a_valid_crc() -> None:
    body = example_blob()[:-4]
    for length in range(len(body)):
        with pytest.raises(SegmentFormatError, match="truncated"):
            decode_segment(seal(body[:length]))


def test_truncation_message_says_where() -> None:
    blob = seal(header(count=2) + raw_record())
    with pytest.raises(SegmentFormatError, match=r"needed 1 bytes for record 1 at offset \d+"):
        decode_segment(blob)


def test_trailing_garbage() -> None:
    blob = example_blob()
    with pytest.raises(SegmentFormatError, match="checksum mismatch"):
        decode_segment(blob + b"\x00")
    with pytest.raises(SegmentFormatError, match="4 unexpected bytes after the last record"):
        decode_segment(seal(blob[:-4] + b"junk"))


def test_zero_records() -> None:
    with pytest.raises(SegmentFormatError, match="zero records"):
        decode_segment(seal(header(count=0)))


def test_crafted_minimal_segment_decodes() -> None:
    """The hand-built helpers above are right: a well-formed crafted segment decodes."""
    segment = decode_segment(seal(header("p", 3) + raw_record(b"42", b"k", b"v")))
    assert [
        (r.seq, r.kinesis_sequence_number, r.partition_key, r.data) for r in segment.records
    ] == [(3, "42", "k", b"v")]


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(header(b"shard\xff") + raw_record(), id="partition-id-not-utf8"),
        pytest.param(header() + raw_record(key=b"\xc3"), id="partition-key-not-utf8"),
        pytest.param(header() + raw_record(kseq=b"\xd9\xa1"), id="kinesis-seq-not-ascii"),
        pytest.param(header() + raw_record(kseq=b""), id="kinesis-seq-empty"),
        pytest.param(header() + raw_record(kseq=b"12a"), id="kinesis-seq-not-digits"),
    ],
)
def test_undecodable_strings_raise_segment_format_error(body: bytes) -> None:
    with pytest.raises(SegmentFormatError):
        decode_segment(seal(body))


# --- plan_segments ----------------------------------------------------------------------


def records_of(count: int, data_size: int = 10) -> list[IncomingRecord]:
    return [IncomingRecord(f"k{i:03d}", b"x" * data_size, str(i + 1), 0) for i in range(count)]


def sizes(plan: list[Any]) -> list[int]:
    return [len(segment) for segment in plan]


def test_plan_max_records_exactly_reached_and_one_past() -> None:
    assert sizes(plan_segments(records_of(3), max_records=3, max_bytes=C.MIB)) == [3]
    assert sizes(plan_segments(records_of(4), max_records=3, max_bytes=C.MIB)) == [3, 1]
    assert sizes(plan_segments(records_of(7), max_records=3, max_bytes=C.MIB)) == [3, 3, 1]
    assert sizes(plan_segments(records_of(3), max_records=1, max_bytes=C.MIB)) == [1, 1, 1]


def test_plan_max_bytes_exactly_reached_and_one_past() -> None:
    records = records_of(3)
    size = encoded_record_size(records[0])
    assert all(encoded_record_size(r) == size for r in records)
    assert sizes(plan_segments(records, max_records=100, max_bytes=3 * size)) == [3]
    assert sizes(plan_segments(records, max_records=100, max_bytes=3 * size - 1)) == [2, 1]
    assert sizes(plan_segments(records, max_records=100, max_bytes=size)) == [1, 1, 1]


def test_plan_record_bigger_than_max_bytes_gets_its_own_segment() -> None:
    small = records_of(4)
    big = IncomingRecord("big", b"x" * 1000, "99", 0)
    records = [small[0], small[1], big, small[2], small[3]]
    max_bytes = 2 * encoded_record_size(small[0])
    plan = plan_segments(records, max_records=100, max_bytes=max_bytes)
    assert [list(segment) for segment in plan] == [small[:2], [big], small[2:]]
    assert sizes(plan_segments([big], max_records=100, max_bytes=1)) == [1]


def test_plan_keeps_every_record_once_in_order() -> None:
    records = records_of(50, data_size=7)
    plan = plan_segments(records, max_records=6, max_bytes=200)
    assert [r for segment in plan for r in segment] == records
    assert all(1 <= len(segment) <= 6 for segment in plan)
    assert plan_segments([], max_records=1, max_bytes=1) == []


@pytest.mark.parametrize(("max_records", "max_bytes"), [(0, 1), (1, 0), (-1, 10)])
def test_plan_rejects_nonpositive_limits(max_records: int, max_bytes: int) -> None:
    with pytest.raises(ValueError, match="must be positive"):
        plan_segments(records_of(1), max_records, max_bytes)


def test_encoded_record_size_is_the_bytes_the_record_takes() -> None:
    record = IncomingRecord("\u00e9\u65e5", b"abc", "123", 9)  # 2 + 3 key bytes
    assert encoded_record_size(record) == 1 + 3 + 8 + 2 + 5 + 4 + 3
    one = encode_segment("p", 0, [record], 0)
    two = encode_segment("p", 0, [record, record], 0)
    assert len(two) - len(one) == encoded_record_size(record)


# --- version 2: record ids ----------------------------------------------------------------


def test_records_with_ids_make_a_version_2_segment_that_round_trips() -> None:
    records = [
        IncomingRecord("k", b"a", "11", 1, record_id="p:0"),
        IncomingRecord("k", b"b", "12", 2),
        IncomingRecord("k", b"c", "13", 3, record_id="x" * 64),
    ]
    blob = encode_segment("p", 5, records, 9)
    assert blob[4] == 2
    segment = decode_segment(blob)
    assert [r.record_id for r in segment.records] == ["p:0", None, "x" * 64]
    assert [r.data for r in segment.records] == [b"a", b"b", b"c"]
    doc = doc_decoder()(blob)
    assert [r[5] for r in doc["records"]] == ["p:0", None, "x" * 64]


def test_records_without_ids_still_make_version_1() -> None:
    blob = encode_segment("p", 0, [IncomingRecord("k", b"a", "11", 1)], 9)
    assert blob[4] == 1 and doc_decoder()(blob)["records"][0][5] is None


def test_a_version_2_record_cut_inside_its_id_is_truncated() -> None:
    blob = encode_segment("p", 0, [IncomingRecord("k", b"a", "11", 1, record_id="abc")], 9)
    body = blob[:-4][:-2]  # without the CRC and the id's last two bytes, then sealed again
    with pytest.raises(SegmentFormatError, match="truncated"):
        decode_segment(body + struct.pack(">I", zlib.crc32(body)))


def test_the_size_estimate_counts_the_record_id() -> None:
    plain = IncomingRecord("k", b"data", "11", 1)
    with_id = IncomingRecord("k", b"data", "11", 1, record_id="abc")
    assert encoded_record_size(with_id) == encoded_record_size(plain) + 4
    one = encode_segment("p", 0, [with_id], 0)
    two = encode_segment("p", 0, [with_id, with_id], 0)
    assert len(two) - len(one) == encoded_record_size(with_id)


def _decoded(blob: bytes) -> object:
    """What decoding gives: the segment, or the error's message."""
    try:
        return decode_segment(blob)
    except SegmentFormatError as exc:
        return f"SegmentFormatError: {exc}"


# Records whose fields are short: an edit lands in a length or a text as often as in data.
short_records = record_strategy(
    4, 4, 3, st.none() | st.from_regex(r"[a-z0-9]{0,3}", fullmatch=True)
)


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    records=st.lists(short_records, min_size=1, max_size=4),
    edits=st.lists(st.tuples(st.integers(min_value=0), st.integers(0, 255)), max_size=3),
    cut=st.integers(min_value=0, max_value=8),
    extra=st.binary(max_size=3),
    count=st.none() | st.integers(min_value=1, max_value=6),
)
def test_the_fast_read_gives_what_the_checked_read_gives(
    records: list[IncomingRecord],
    edits: list[tuple[int, int]],
    cut: int,
    extra: bytes,
    count: int | None,
) -> None:
    """Records are read fast and, when anything is amiss, again field by field to name the
    defect: for any segment (bytes of its records changed, its end cut or extended, its
    record count changed, sealed again so the records are what the decoder meets) both give
    the same records or the same error."""
    body = bytearray(encode_segment("p", 3, records, 9)[:-4])
    start = len(header())  # the records' first byte
    if count is not None:
        body[start - 12 : start - 8] = struct.pack(">I", count)  # the header's record count
    for offset, value in edits:
        body[start + offset % (len(body) - start)] = value
    blob = seal(bytes(body[: len(body) - cut]) + extra)
    fast = _decoded(blob)
    with pytest.MonkeyPatch.context() as patched:  # every read the checked one

        def amiss(*_: Any) -> Any:
            raise segment_format._Amiss

        patched.setattr(segment_format, "_read_records", amiss)
        assert fast == _decoded(blob)
