"""Segment format v3 (compressed records): round trip, when the writer compresses, the size
limits at and past their edges (a decompression bomb refused), corruption of the compressed
bytes raising the log's error, old versions still read, and docs/FORMAT.md's compressed
example and decoder."""

from __future__ import annotations

import json
import random
import struct
import tracemalloc
import zlib
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardlog import constants as C
from shardlog import settings as S
from shardlog.exceptions import SegmentFormatError
from shardlog.format import (
    CODEC_ZLIB,
    VERSION_COMPRESSED,
    IncomingRecord,
    compress_segment,
    compression_ratio,
    decode_segment,
    encode_segment,
    pays,
)
from tests.unit.test_format import (
    EXAMPLE_FIRST_SEQ,
    EXAMPLE_PARTITION,
    EXAMPLE_RECORDS,
    EXAMPLE_WRITTEN_AT_MS,
    doc_decoder,
    doc_section,
    example_blob,
    incoming_records,
    seal,
)

KSEQ = "49590338271490256608559692538361571095921575989136588"


def json_records(count: int, start: int = 0) -> list[IncomingRecord]:
    """Records like the demo's (shardlog/local/demo.py): small JSON documents."""
    return [
        IncomingRecord(
            f"key-{i % 1000:05d}",
            json.dumps({"k": f"key-{i % 1000:05d}", "n": i // 1000, "i": i}).encode(),
            f"{KSEQ}{i:03d}",
            1_700_000_000_000 + i,
        )
        for i in range(start, start + count)
    ]


def random_records(count: int, size: int = 1000) -> list[IncomingRecord]:
    rng = random.Random(27)
    return [IncomingRecord(f"k{i}", rng.randbytes(size), str(i + 1), i) for i in range(count)]


def compressed(records: list[IncomingRecord], first_seq: int = 0) -> bytes:
    return encode_segment("shardId-000000000000", first_seq, records, 9, compression="zlib")


def v3(
    records: bytes,
    *,
    layout: int = 1,
    count: int = 1,
    size: int | None = None,
    codec: int = CODEC_ZLIB,
    stream: bytes | None = None,
) -> bytes:
    """A sealed version 3 segment of partition "p" around ``records`` (raw record bytes)."""
    body = (
        struct.pack(">4sBBH", b"SHLG", VERSION_COMPRESSED, 0, 1)
        + b"p"
        + struct.pack(">QIQ", 0, count, 0)
        + struct.pack(">BBI", codec, layout, len(records) if size is None else size)
        + (zlib.compress(records) if stream is None else stream)
    )
    return seal(body)


def one_record(data: bytes = b"d" * 100, key: bytes = b"k") -> bytes:
    return (
        struct.pack(">B", 1)
        + b"1"
        + struct.pack(">QH", 5, len(key))
        + key
        + struct.pack(">I", len(data))
        + data
    )


def same_records(blob: bytes, records: list[IncomingRecord]) -> bool:
    decoded = decode_segment(blob).records
    return [
        (r.partition_key, r.data, r.kinesis_sequence_number, r.arrival_ms, r.record_id)
        for r in decoded
    ] == [
        (r.partition_key, r.data, r.kinesis_sequence_number, r.arrival_ms, r.record_id)
        for r in records
    ]


# --- round trip -------------------------------------------------------------------------


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    records=st.lists(incoming_records, min_size=1, max_size=8),
    repeat=st.integers(min_value=1, max_value=20),
)
def test_round_trip_compressed_or_not(records: list[IncomingRecord], repeat: int) -> None:
    """Whatever the records, the zlib writer's segment decodes to them, the documented
    decoder agrees, and it is version 3 exactly when compressing saved a tenth."""
    records = records * repeat  # repeats make compression pay for some examples
    plain = encode_segment("p", 3, records, 7)
    blob = encode_segment("p", 3, records, 7, compression="zlib")
    assert decode_segment(blob) == decode_segment(plain)
    assert (blob[4] == VERSION_COMPRESSED) == pays(len(blob), len(plain))
    if blob[4] != VERSION_COMPRESSED:
        assert blob == plain
    documented = doc_decoder()(blob)
    assert documented == doc_decoder()(plain)
    assert [r[0] for r in documented["records"]] == list(range(3, 3 + len(records)))


@pytest.mark.parametrize("with_ids", [False, True])
def test_both_record_layouts_compress_and_keep_the_layout(with_ids: bool) -> None:
    records = json_records(200)
    if with_ids:
        records = [r._replace(record_id=f"p:{i}" if i % 3 else None) for i, r in enumerate(records)]
    plain = encode_segment("shardId-000000000000", 0, records, 9)
    blob = compressed(records)
    assert blob[4] == VERSION_COMPRESSED
    header_end = 8 + len("shardId-000000000000") + 20
    codec, layout, size = struct.unpack_from(">BBI", blob, header_end)
    assert (codec, layout) == (CODEC_ZLIB, plain[4])
    assert layout == (2 if with_ids else 1)
    assert size == len(plain) - header_end - 4
    assert zlib.decompress(blob[header_end + 6 : -4]) == plain[header_end:-4]
    assert same_records(blob, records)


def test_the_demos_json_compresses_and_random_bytes_stay_as_they_were() -> None:
    records = json_records(1000)
    blob = compressed(records)
    assert blob[4] == VERSION_COMPRESSED
    assert len(blob) < len(encode_segment("shardId-000000000000", 0, records, 9)) // 4
    assert same_records(blob, records)
    noise = random_records(50)
    assert compressed(noise) == encode_segment("shardId-000000000000", 0, noise, 9)
    assert compressed(noise)[4] == 1


def test_compression_none_writes_versions_1_and_2_byte_for_byte() -> None:
    assert (
        encode_segment(
            EXAMPLE_PARTITION,
            EXAMPLE_FIRST_SEQ,
            EXAMPLE_RECORDS,
            EXAMPLE_WRITTEN_AT_MS,
            compression="none",
        )
        == example_blob()
    )
    with pytest.raises(ValueError, match="compression 'lz4' is not one of zlib, none"):
        encode_segment("p", 0, EXAMPLE_RECORDS, 0, compression="lz4")  # type: ignore[arg-type]


def test_it_pays_at_a_tenth_saved_and_not_one_byte_short_of_it() -> None:
    assert pays(90, 100) and pays(900, 1000) and pays(0, 1)
    assert not pays(91, 100) and not pays(901, 1000) and not pays(100, 100)


def test_compress_segment_keeps_what_does_not_pay_and_refuses_what_is_not_v1_or_v2() -> None:
    noise = encode_segment("p", 0, random_records(3), 0)
    assert compress_segment(noise) is noise
    blob = compressed(json_records(100))
    with pytest.raises(ValueError, match="not version 3"):
        compress_segment(blob)


def test_old_versions_are_still_read_beside_compressed_ones() -> None:
    """A log written before compression (versions 1 and 2) reads as it did: the documented
    example, a version 2 segment, and a compressed one decode the same records."""
    records = json_records(30)
    with_ids = [r._replace(record_id=f"id-{i}") for i, r in enumerate(records)]
    for old in (
        encode_segment("shardId-000000000000", 0, records, 9),
        encode_segment("shardId-000000000000", 0, with_ids, 9),
    ):
        assert old[4] in (1, 2)
        new = compress_segment(old)
        assert new[4] == VERSION_COMPRESSED
        assert decode_segment(old) == decode_segment(new)


def test_compression_ratio_of_a_sample() -> None:
    """What bench/cost.py prices storage with: stored bytes per uncompressed byte."""
    ratio = compression_ratio(json_records(2000))
    assert 0.05 < ratio < 0.5
    # Smaller segments compress less well; the sample is cut as ingest would cut it.
    assert ratio < compression_ratio(json_records(2000), segment_records=10) < 1.0
    assert compression_ratio(json_records(2000), "none") == 1.0
    assert compression_ratio(random_records(20)) == 1.0
    with pytest.raises(ValueError, match="at least one record"):
        compression_ratio([])


# --- size limits --------------------------------------------------------------------------


def test_the_read_limit_holds_every_segment_a_writer_can_write() -> None:
    """segmentMaxBytes' upper edge of records, plus one id length byte per record at the
    record count's upper edge, plus the largest header: under the limit."""
    largest_header = 34 + 0xFFFF + 4
    assert (
        S.SEGMENT_MAX_BYTES_MAX + S.SEGMENT_MAX_RECORDS_MAX + largest_header
        <= C.SEGMENT_MAX_READ_BYTES
    )
    assert C.KINESIS_MAX_RECORD_BYTES + 128 + 1024 + 20 < C.SEGMENT_MAX_READ_BYTES


def test_decompressed_size_at_and_past_the_limit() -> None:
    blob = compressed(json_records(100))
    size = struct.unpack_from(">I", blob, 8 + 20 + 22)[0]
    assert decode_segment(blob, max_bytes=size).next_seq == 100  # at the limit
    with pytest.raises(
        SegmentFormatError,
        match=f"segment records declare {size} bytes decompressed, past the limit of {size - 1}",
    ):
        decode_segment(blob, max_bytes=size - 1)


def test_stored_size_at_and_past_the_limit() -> None:
    blob = encode_segment("p", 0, json_records(100), 0)
    assert decode_segment(blob, max_bytes=len(blob)).next_seq == 100
    with pytest.raises(
        SegmentFormatError,
        match=f"segment of {len(blob)} bytes refused: a segment takes at most {len(blob) - 1}",
    ):
        decode_segment(blob, max_bytes=len(blob) - 1)
    # A compressed one's stored size too, before anything is decompressed.
    small = compressed(json_records(100))
    with pytest.raises(SegmentFormatError, match=f"segment of {len(small)} bytes refused"):
        decode_segment(small, max_bytes=len(small) - 1)


def test_the_default_limit_at_and_past_its_edge() -> None:
    """Declared at the limit: accepted as a size (then refused for not decompressing to it);
    one past: refused before a byte is decompressed."""
    at = v3(one_record(), size=C.SEGMENT_MAX_READ_BYTES)
    with pytest.raises(SegmentFormatError, match=r"decompress to 117 bytes, their header declares"):
        decode_segment(at)
    past = v3(one_record(), size=C.SEGMENT_MAX_READ_BYTES + 1)
    with pytest.raises(SegmentFormatError, match=f"past the limit of {C.SEGMENT_MAX_READ_BYTES}"):
        decode_segment(past)
    with pytest.raises(ValueError, match=f"or {C.SEGMENT_MAX_READ_BYTES + 1} bytes"):
        doc_decoder()(past)


def test_a_decompression_bomb_is_refused_without_inflating_it() -> None:
    """64 MiB of zeros in about 64 KiB, declared as 117 bytes: refused at byte 118, and the
    decoder never holds more than a few KiB of its output."""
    deflater = zlib.compressobj()
    stream = b"".join(deflater.compress(bytes(C.MIB)) for _ in range(64)) + deflater.flush()
    bomb = v3(one_record(), stream=stream)
    tracemalloc.start()
    try:
        with pytest.raises(SegmentFormatError, match="decompress past the 117 bytes"):
            decode_segment(bomb)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < len(bomb) + 64 * 1024
    with pytest.raises(ValueError, match="do not decompress to their declared size"):
        doc_decoder()(bomb)


def test_the_encoder_never_writes_what_readers_refuse(monkeypatch: pytest.MonkeyPatch) -> None:
    record = IncomingRecord("k", b"x" * 1000, "1", 0)
    size = len(encode_segment("p", 0, [record], 0))
    monkeypatch.setattr(C, "SEGMENT_MAX_READ_BYTES", size)
    encode_segment("p", 0, [record], 0)  # at the limit
    monkeypatch.setattr(C, "SEGMENT_MAX_READ_BYTES", size - 1)
    with pytest.raises(ValueError, match=f"{size} bytes is past the {size - 1} bytes readers"):
        encode_segment("p", 0, [record], 0, compression="zlib")


# --- corruption -----------------------------------------------------------------------------


def test_a_corrupt_stream_raises_the_logs_error_not_zlibs() -> None:
    blob = v3(one_record(), stream=b"\x78\x9c" + b"\xff" * 40)
    with pytest.raises(SegmentFormatError, match="segment records do not decompress") as caught:
        decode_segment(blob)
    assert isinstance(caught.value.__cause__, zlib.error)
    with pytest.raises(ValueError, match="compressed records are corrupt"):
        doc_decoder()(blob)


@pytest.mark.parametrize(
    ("blob", "message"),
    [
        pytest.param(
            v3(one_record(), stream=zlib.compress(one_record())[:-6]),
            "the zlib stream does not end",
            id="stream-truncated",
        ),
        pytest.param(
            v3(one_record(), stream=zlib.compress(one_record()) + b"xx"),
            "2 unexpected bytes after the compressed records",
            id="bytes-after-the-stream",
        ),
        pytest.param(
            v3(one_record(), size=116),
            "decompress past the 116 bytes their header declares",
            id="declared-one-short",
        ),
        pytest.param(
            v3(one_record(), size=118),
            "decompress to 117 bytes, their header declares 118",
            id="declared-one-long",
        ),
        pytest.param(
            v3(one_record() + b"junk"),
            "4 unexpected bytes after the last record",
            id="records-then-junk",
        ),
        pytest.param(v3(one_record(), count=2), "needed 1 bytes for record 1", id="fewer-records"),
        pytest.param(v3(one_record(key=b"\xff")), "not valid utf-8", id="key-not-utf8"),
        pytest.param(v3(one_record(), layout=0), "unsupported record layout 0", id="layout-0"),
        pytest.param(v3(one_record(), layout=3), "unsupported record layout 3", id="layout-3"),
        pytest.param(
            v3(one_record(), layout=2), "needed 1 bytes for record 0", id="layout-2-no-id"
        ),
        pytest.param(v3(one_record(), codec=0), "unsupported segment codec 0 ", id="codec-0"),
        pytest.param(
            v3(one_record(), codec=2),
            r"codec 2 \(zstd, reserved\) \(this reads 1 \(zlib\)\)",
            id="codec-zstd",
        ),
        pytest.param(v3(one_record(), codec=255), "unsupported segment codec 255", id="codec-255"),
        pytest.param(v3(one_record(), stream=b""), "the zlib stream does not end", id="empty"),
    ],
)
def test_each_defect_of_the_compressed_records(blob: bytes, message: str) -> None:
    with pytest.raises(SegmentFormatError, match=message):
        decode_segment(blob)
    with pytest.raises(ValueError):
        doc_decoder()(blob)


def test_a_crafted_v3_segment_decodes() -> None:
    """The helpers above are right: a well-formed crafted version 3 segment decodes."""
    (record,) = decode_segment(v3(one_record())).records
    assert (record.partition_id, record.seq, record.partition_key, record.data) == (
        "p",
        0,
        "k",
        b"d" * 100,
    )


def test_any_flipped_bit_or_truncation_of_a_compressed_segment_is_detected() -> None:
    blob = compressed(json_records(5))
    assert blob[4] == VERSION_COMPRESSED
    for position in range(len(blob)):
        for bit in range(8):
            corrupt = bytearray(blob)
            corrupt[position] ^= 1 << bit
            with pytest.raises(SegmentFormatError):
                decode_segment(bytes(corrupt))
    for length in range(len(blob)):
        with pytest.raises(SegmentFormatError, match=r"truncated|checksum mismatch"):
            decode_segment(blob[:length])


# --- the documented example and decoder -----------------------------------------------------


def doc_compressed_example() -> bytes:
    out = bytearray()
    for line in doc_section("compressed-example").splitlines():
        offset, _, rest = line.partition("  ")
        assert int(offset, 16) == len(out), f"hex dump line {line!r} starts at the wrong offset"
        out += bytes.fromhex(rest.split("|", 1)[0])
    return bytes(out)


def test_the_compressed_example_in_the_doc() -> None:
    """Section 8.3: the example's records, its header as the encoder writes it, and its
    records decompressing to section 8.1's (the zlib bytes themselves may differ by zlib)."""
    documented = doc_compressed_example()
    plain = example_blob()
    ours = encode_segment(
        EXAMPLE_PARTITION,
        EXAMPLE_FIRST_SEQ,
        EXAMPLE_RECORDS,
        EXAMPLE_WRITTEN_AT_MS,
        compression="zlib",
    )
    assert len(documented) == 167
    assert (
        documented[:54]
        == ours[:54]
        == plain[:4] + b"\x03" + plain[5:48] + bytes.fromhex("0101000000a0")
    )
    assert zlib.decompress(documented[54:-4]) == plain[48:-4]
    assert decode_segment(documented) == decode_segment(plain)
    assert doc_decoder()(documented) == doc_decoder()(plain)


def test_the_documented_decoder_reads_real_compressed_segments() -> None:
    records = json_records(300)
    with_ids = [r._replace(record_id=f"id-{i}") for i, r in enumerate(records)]
    for blob in (compressed(records, 40), compressed(with_ids, 40)):
        assert blob[4] == VERSION_COMPRESSED
        documented: dict[str, Any] = doc_decoder()(blob)
        assert documented["first_seq"] == 40
        assert [(r[0], r[1], r[2], r[5]) for r in documented["records"]] == [
            (r.seq, r.partition_key, r.data, r.record_id) for r in decode_segment(blob).records
        ]
