"""Segment format, versions 1 to 3: the bytes of one S3 object of the log.

docs/FORMAT.md is the specification; this module is its reference implementation
and uses only the standard library, so any Python (or any language) can decode it.
Version 2 is version 1 with a record id after each record's data (idempotent produce);
a writer writes version 1 whenever no record of the segment has an id.

Version 3 is a version 1 or 2 segment whose records are stored compressed: the same header,
then the codec (1 = zlib), the version whose record layout the records have, and their size
once decompressed; then the compressed records; then the CRC-32 of every stored byte. The
writer stores a segment compressed only when that saves at least a tenth of its bytes
(``compress_segment``); otherwise, and with compression off, it writes version 1 or 2 byte
for byte as before, so what a writer stores uncompressed every older reader still reads.

Invariants a reader relies on: a decoder returns every record of a segment or raises
SegmentFormatError (a zlib error never escapes); it never holds more than
``SEGMENT_MAX_READ_BYTES`` of a segment, stored or decompressed, whatever the object
declares (a decompression bomb is refused, not inflated); and ``encode_segment`` never
writes a segment that a reader would refuse for its size.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Literal, NamedTuple

from shardlog import constants as C
from shardlog.exceptions import SegmentFormatError
from shardlog.idempotence import MAGIC as ENVELOPE_MAGIC
from shardlog.idempotence import open_envelope

MAGIC = b"SHLG"
VERSION = 1
VERSION_WITH_RECORD_IDS = 2
VERSION_COMPRESSED = 3
VERSIONS = (VERSION, VERSION_WITH_RECORD_IDS, VERSION_COMPRESSED)
RECORD_LAYOUTS = (VERSION, VERSION_WITH_RECORD_IDS)  # what version 3 compresses
CODEC_ZLIB: Final = 1
# Codec bytes a decoder knows of, by name; 2 is reserved for zstd (docs/FORMAT.md, section 10
# says why shardlog does not write it yet). There is no codec 0: an uncompressed segment is
# version 1 or 2.
CODECS: Final = {CODEC_ZLIB: "zlib"}
RESERVED_CODECS: Final = {2: "zstd"}
# The writer's choices (the segmentCompression setting): "zlib" compresses when it pays.
Compression = Literal["zlib", "none"]
COMPRESSIONS: tuple[Compression, ...] = ("zlib", "none")
# zlib's level: 6 (zlib's default) against 1, measured in bench/codec.py (docs/FORMAT.md,
# section 10).
ZLIB_LEVEL: Final = 6
# Stored compressed only when that saves at least MIN_SAVING_PERCENT of the segment's bytes:
# under that, readers would pay a decompression for next to nothing.
MIN_SAVING_PERCENT: Final = 10
_RECORD_ID_LEN = struct.Struct(">B")
_HEADER_FIXED = struct.Struct(">4sBBH")  # magic, version, flags, partition id length
_HEADER_TAIL = struct.Struct(">QIQ")  # first seq, record count, written at (epoch ms)
_RECORD_SEQ_LEN = struct.Struct(">B")
_RECORD_FIXED = struct.Struct(">QH")  # arrival (epoch ms), partition key length
_RECORD_DATA_LEN = struct.Struct(">I")
_TRAILER = struct.Struct(">I")  # CRC-32 (zlib) of every byte before it
_CODEC_HEADER = struct.Struct(">BBI")  # version 3: codec, record layout, records' size
_MAX_SEQ = 2**64 - 1


class IncomingRecord(NamedTuple):
    """A Kinesis record on its way into the log. ``record_id``: the producer-assigned id of
    an idempotent produce (its envelope opened: ``data`` is the payload); ``resent``: the
    producer sent it again after an unknown outcome, so ingest looks the id up first.

    A named tuple, not a frozen dataclass: the ingest handler builds one per record of every
    batch, and a frozen dataclass took 0.41 us to build against 0.13 (0.28 ms a batch of
    1,000, of the 1.35 ms the handler adds to the writer)."""

    partition_key: str
    data: bytes
    kinesis_sequence_number: str
    arrival_ms: int
    record_id: str | None = None
    resent: bool = False

    @classmethod
    def from_kinesis(
        cls, partition_key: str, data: bytes, kinesis_sequence_number: str, arrival_ms: int
    ) -> IncomingRecord:
        """A Kinesis record, its idempotence envelope (if any) opened: the log keeps the
        payload as the data, and the record id (shardlog/idempotence.py)."""
        if not data.startswith(ENVELOPE_MAGIC):  # most records: no envelope to open
            return cls(partition_key, bytes(data), kinesis_sequence_number, arrival_ms)
        envelope = open_envelope(data)
        return cls(
            partition_key,
            envelope.payload,
            kinesis_sequence_number,
            arrival_ms,
            envelope.record_id,
            envelope.resent,
        )


@dataclass(frozen=True, slots=True)
class LogRecord:
    """A record of the log: its place (partition, seq) and what Kinesis gave it."""

    partition_id: str
    seq: int
    partition_key: str
    data: bytes
    kinesis_sequence_number: str
    arrival_ms: int
    record_id: str | None = None  # the producer's id, for an idempotent produce


@dataclass(frozen=True, slots=True)
class Segment:
    partition_id: str
    first_seq: int
    written_at_ms: int
    records: tuple[LogRecord, ...]

    @property
    def next_seq(self) -> int:
        return self.first_seq + len(self.records)


def encoded_record_size(record: IncomingRecord) -> int:
    """The bytes ``record`` takes in a segment; one more (its id length, 0) for a record
    without an id in a segment where another record has one."""
    return (
        _RECORD_SEQ_LEN.size
        + len(record.kinesis_sequence_number)
        + _RECORD_FIXED.size
        + len(record.partition_key.encode("utf-8"))
        + _RECORD_DATA_LEN.size
        + len(record.data)
        + (0 if record.record_id is None else _RECORD_ID_LEN.size + len(record.record_id))
    )


def plan_segments(
    records: Sequence[IncomingRecord], max_records: int, max_bytes: int
) -> list[Sequence[IncomingRecord]]:
    """Cut records into consecutive segments of at most max_records and about max_bytes.

    A single record larger than max_bytes still gets a segment of its own.
    """
    if max_records < 1 or max_bytes < 1:
        raise ValueError("max_records and max_bytes must be positive")
    segments: list[Sequence[IncomingRecord]] = []
    start, size = 0, 0
    for index, record in enumerate(records):
        record_size = encoded_record_size(record)
        count = index - start
        if count and (count >= max_records or size + record_size > max_bytes):
            segments.append(records[start:index])
            start, size = index, 0
        size += record_size
    if start < len(records):
        segments.append(records[start:])
    return segments


def encode_segment(
    partition_id: str,
    first_seq: int,
    records: Sequence[IncomingRecord],
    written_at_ms: int,
    *,
    compression: Compression = "none",
) -> bytes:
    """The segment of ``records``: version 1 or 2, or with ``compression="zlib"`` version 3
    when compressing saves at least MIN_SAVING_PERCENT of its bytes (``compress_segment``)."""
    if not records:
        raise ValueError("a segment holds at least one record")
    if first_seq < 0 or first_seq + len(records) > _MAX_SEQ:
        raise ValueError(f"first_seq {first_seq} out of range")
    pid = partition_id.encode("utf-8")
    with_ids = any(record.record_id is not None for record in records)
    parts = [
        _HEADER_FIXED.pack(MAGIC, VERSION_WITH_RECORD_IDS if with_ids else VERSION, 0, len(pid)),
        pid,
        _HEADER_TAIL.pack(first_seq, len(records), written_at_ms),
    ]
    for record in records:
        kseq = record.kinesis_sequence_number.encode("ascii", errors="replace")
        if not 1 <= len(kseq) <= C.KINESIS_SEQUENCE_MAX_DIGITS or not kseq.isdigit():
            raise ValueError(f"bad Kinesis sequence number {record.kinesis_sequence_number!r}")
        key = record.partition_key.encode("utf-8")
        parts += [
            _RECORD_SEQ_LEN.pack(len(kseq)),
            kseq,
            _RECORD_FIXED.pack(record.arrival_ms, len(key)),
            key,
            _RECORD_DATA_LEN.pack(len(record.data)),
            record.data,
        ]
        if with_ids:
            record_id = (record.record_id or "").encode("ascii")
            if len(record_id) > 255:
                raise ValueError(f"record id {record.record_id!r} is longer than 255 bytes")
            parts += [_RECORD_ID_LEN.pack(len(record_id)), record_id]
    body = b"".join(parts)
    if len(body) + _TRAILER.size > C.SEGMENT_MAX_READ_BYTES:
        raise ValueError(
            f"a segment of {len(body) + _TRAILER.size} bytes is past the "
            f"{C.SEGMENT_MAX_READ_BYTES} bytes readers accept (SEGMENT_MAX_READ_BYTES)"
        )
    plain = body + _TRAILER.pack(zlib.crc32(body))
    if compression == "none":
        return plain
    if compression != "zlib":
        raise ValueError(f"compression {compression!r} is not one of {', '.join(COMPRESSIONS)}")
    return compress_segment(plain)


def compress_segment(plain: bytes, level: int = ZLIB_LEVEL) -> bytes:
    """A version 1 or 2 segment as version 3 (its records compressed with zlib) when that
    saves at least MIN_SAVING_PERCENT of its bytes; else ``plain`` itself, unchanged."""
    version = plain[4]
    if plain[:4] != MAGIC or version not in RECORD_LAYOUTS:
        raise ValueError(f"only a version 1 or 2 segment is compressed, not version {version}")
    header_end = _HEADER_FIXED.size + _HEADER_FIXED.unpack_from(plain)[3] + _HEADER_TAIL.size
    records = memoryview(plain)[header_end : len(plain) - _TRAILER.size]
    compressed = zlib.compress(records, level)
    stored = header_end + _CODEC_HEADER.size + len(compressed) + _TRAILER.size
    if not pays(stored, len(plain)):
        return plain
    body = b"".join(
        [
            plain[:4],
            bytes([VERSION_COMPRESSED]),
            plain[5:header_end],
            _CODEC_HEADER.pack(CODEC_ZLIB, version, len(records)),
            compressed,
        ]
    )
    return body + _TRAILER.pack(zlib.crc32(body))


def pays(stored: int, raw: int) -> bool:
    """Compressing ``raw`` bytes into ``stored`` saves at least MIN_SAVING_PERCENT of them."""
    return 100 * stored <= (100 - MIN_SAVING_PERCENT) * raw


def compression_ratio(
    records: Sequence[IncomingRecord],
    compression: Compression = C.DEFAULT_SEGMENT_COMPRESSION,
    *,
    segment_records: int = C.INGEST_BATCH_SIZE,
) -> float:
    """Bytes stored per byte of uncompressed segment for a sample of a workload's records,
    cut into segments of ``segment_records`` (ingest writes a batch as one segment, so the
    batch size) and each stored as the writer would (1.0 when compressing never pays): what
    the log of such records costs in S3 (e.g. bench/cost.py's storage)."""
    if not records:
        raise ValueError("a compression ratio needs at least one record")
    raw = stored = 0
    for chunk in plan_segments(records, segment_records, C.DEFAULT_SEGMENT_MAX_BYTES):
        plain = encode_segment("shardId-000000000000", 0, chunk, 0)
        raw += len(plain)
        stored += len(compress_segment(plain)) if compression == "zlib" else len(plain)
    return stored / raw


class _Cursor:
    def __init__(self, blob: bytes, end: int) -> None:
        self.view = memoryview(blob)
        self.pos = 0
        self.end = end

    def take(self, n: int, what: str) -> memoryview:
        if self.pos + n > self.end:
            raise SegmentFormatError(
                f"segment truncated: needed {n} bytes for {what} at offset {self.pos}, "
                f"{self.end - self.pos} left"
            )
        chunk = self.view[self.pos : self.pos + n]
        self.pos += n
        return chunk

    def unpack(self, fmt: struct.Struct, what: str) -> tuple[int, ...]:
        return fmt.unpack(self.take(fmt.size, what))

    def rest(self) -> memoryview:
        """Every byte left before ``end``."""
        return self.take(self.end - self.pos, "the rest")


def _text(raw: memoryview, encoding: str, what: str) -> str:
    try:
        return bytes(raw).decode(encoding)
    except UnicodeDecodeError as exc:
        raise SegmentFormatError(f"{what} is not valid {encoding}: {exc.reason}") from None


def decode_segment(blob: bytes, *, max_bytes: int = C.SEGMENT_MAX_READ_BYTES) -> Segment:
    """Decode and verify one segment. Raises SegmentFormatError on any defect, and for a
    segment that takes more than ``max_bytes``, stored or decompressed."""
    minimum = _HEADER_FIXED.size + _HEADER_TAIL.size + _TRAILER.size
    if len(blob) < minimum:
        raise SegmentFormatError(f"segment truncated: {len(blob)} bytes, at least {minimum}")
    if len(blob) > max_bytes:
        raise SegmentFormatError(
            f"segment of {len(blob)} bytes refused: a segment takes at most {max_bytes} bytes"
        )
    if blob[:4] != MAGIC:
        raise SegmentFormatError(f"not a shardlog segment: magic {bytes(blob[:4])!r}")
    body_end = len(blob) - _TRAILER.size
    (stored_crc,) = _TRAILER.unpack(blob[body_end:])
    cursor = _Cursor(blob, body_end)
    _, version, flags, pid_len = cursor.unpack(_HEADER_FIXED, "header")
    if version not in VERSIONS:
        raise SegmentFormatError(
            f"unsupported segment version {version} (this reads {', '.join(map(str, VERSIONS))})"
        )
    if flags != 0:
        raise SegmentFormatError(f"unsupported segment flags {flags:#04x}")
    actual_crc = zlib.crc32(cursor.view[:body_end])
    if actual_crc != stored_crc:
        raise SegmentFormatError(
            f"segment checksum mismatch: stored {stored_crc:#010x}, computed {actual_crc:#010x} "
            "(corrupt or truncated object)"
        )
    partition_id = _text(cursor.take(pid_len, "partition id"), "utf-8", "partition id")
    first_seq, count, written_at_ms = cursor.unpack(_HEADER_TAIL, "header")
    if count == 0:
        raise SegmentFormatError("segment declares zero records")
    layout = version
    if version == VERSION_COMPRESSED:
        codec, layout, size = cursor.unpack(_CODEC_HEADER, "header")
        if layout not in RECORD_LAYOUTS:
            raise SegmentFormatError(f"unsupported record layout {layout} in a version 3 segment")
        records = _decompress(codec, cursor.rest(), size, max_bytes)
        cursor = _Cursor(records, len(records))
    decoded = tuple(_records(cursor, layout, partition_id, first_seq, count))
    if cursor.pos != cursor.end:
        left = cursor.end - cursor.pos
        raise SegmentFormatError(f"{left} unexpected bytes after the last record")
    return Segment(partition_id, first_seq, written_at_ms, decoded)


def _decompress(codec: int, data: memoryview, size: int, max_bytes: int) -> bytes:
    """A version 3 segment's records: exactly the ``size`` bytes its header declares, never
    more than ``max_bytes`` held (a decompression bomb stops at its first byte past them)."""
    if codec not in CODECS:
        reserved = f" ({RESERVED_CODECS[codec]}, reserved)" if codec in RESERVED_CODECS else ""
        known = ", ".join(f"{byte} ({name})" for byte, name in CODECS.items())
        raise SegmentFormatError(
            f"unsupported segment codec {codec}{reserved} (this reads {known})"
        )
    if size > max_bytes:
        raise SegmentFormatError(
            f"segment records declare {size} bytes decompressed, past the limit of {max_bytes}"
        )
    inflater = zlib.decompressobj()
    try:
        # At most size + 1 bytes out, whatever the stream holds (0 would mean no limit).
        records = inflater.decompress(data, size + 1)
    except zlib.error as exc:
        raise SegmentFormatError(f"segment records do not decompress: {exc}") from exc
    if len(records) > size:
        raise SegmentFormatError(
            f"segment records decompress past the {size} bytes their header declares "
            "(a decompression bomb or a corrupt header)"
        )
    if not inflater.eof:
        raise SegmentFormatError("segment records truncated: the zlib stream does not end")
    if inflater.unused_data:
        raise SegmentFormatError(
            f"{len(inflater.unused_data)} unexpected bytes after the compressed records"
        )
    if len(records) != size:
        raise SegmentFormatError(
            f"segment records decompress to {len(records)} bytes, their header declares {size}"
        )
    return records


class _Amiss(Exception):
    """The fast read met a record the checked read must name the defect of."""


def _records(
    cursor: _Cursor, layout: int, partition_id: str, first_seq: int, count: int
) -> list[LogRecord]:
    """``count`` records of ``layout`` (version 1 or 2) from ``cursor``: read at full speed
    (``_read_records``), and when anything is amiss read again from the first record,
    checking each field, to raise the error naming the defect (``_checked_records``)."""
    try:
        records, cursor_end = _read_records(
            cursor.view, cursor.pos, cursor.end, layout, partition_id, first_seq, count
        )
    except (_Amiss, struct.error, IndexError, UnicodeDecodeError):
        return _checked_records(cursor, layout, partition_id, first_seq, count)
    cursor.pos = cursor_end
    return records


def _read_records(
    view: memoryview,
    pos: int,
    end: int,
    layout: int,
    partition_id: str,
    first_seq: int,
    count: int,
) -> tuple[list[LogRecord], int]:
    """What ``_checked_records`` reads, where it raises nothing, without building its error
    messages: each field's bytes sliced and decoded alike (a slice past ``end`` shows as the
    position passing it, checked once a record). Raises (``_Amiss``, struct's, an index's
    or a decoding's error) where the checked read would raise; the records and the position
    after them."""
    fixed, fixed_size = _RECORD_FIXED.unpack_from, _RECORD_FIXED.size
    data_len, data_len_size = _RECORD_DATA_LEN.unpack_from, _RECORD_DATA_LEN.size
    with_ids = layout == VERSION_WITH_RECORD_IDS
    records = []
    for index in range(count):
        seq_len = view[pos]  # _RECORD_SEQ_LEN and _RECORD_ID_LEN: one unsigned byte
        kseq = str(view[pos + 1 : pos + 1 + seq_len], "ascii")
        pos += 1 + seq_len
        arrival_ms, key_len = fixed(view, pos)
        pos += fixed_size
        key = str(view[pos : pos + key_len], "utf-8")
        pos += key_len
        (size,) = data_len(view, pos)
        pos += data_len_size
        data = view[pos : pos + size].tobytes()
        pos += size
        record_id = None
        if with_ids:
            id_len = view[pos]
            record_id = str(view[pos + 1 : pos + 1 + id_len], "ascii") or None
            pos += 1 + id_len
        if pos > end or not kseq.isdigit():
            raise _Amiss
        records.append(
            LogRecord(partition_id, first_seq + index, key, data, kseq, arrival_ms, record_id)
        )
    return records, pos


def _checked_records(
    cursor: _Cursor, layout: int, partition_id: str, first_seq: int, count: int
) -> list[LogRecord]:
    """``count`` records of ``layout`` (version 1 or 2) from ``cursor``, each field checked
    as it is read: ``SegmentFormatError`` naming the first defect."""
    records = []
    for index in range(count):
        (seq_len,) = cursor.unpack(_RECORD_SEQ_LEN, f"record {index}")
        what = f"record {index} sequence number"
        kseq = _text(cursor.take(seq_len, what), "ascii", what)
        if not kseq.isdigit():
            raise SegmentFormatError(f"{what} {kseq!r} is not 1 to 128 decimal digits")
        arrival_ms, key_len = cursor.unpack(_RECORD_FIXED, f"record {index}")
        what = f"record {index} partition key"
        key = _text(cursor.take(key_len, what), "utf-8", what)
        (data_len,) = cursor.unpack(_RECORD_DATA_LEN, f"record {index}")
        data = bytes(cursor.take(data_len, f"record {index} data"))
        record_id = None
        if layout == VERSION_WITH_RECORD_IDS:
            (id_len,) = cursor.unpack(_RECORD_ID_LEN, f"record {index}")
            what = f"record {index} record id"
            record_id = _text(cursor.take(id_len, what), "ascii", what) or None
        records.append(
            LogRecord(partition_id, first_seq + index, key, data, kseq, arrival_ms, record_id)
        )
    return records
