"""The idempotence envelope: a producer-assigned record id carried through Kinesis inside
the record's data, so a record sent again after an unknown outcome is recognised at ingest.

Model: Kafka's idempotent producer. Each record gets an id unique to it (``RecordIds``: a
random producer id and a counter); a producer that does not know whether a put went in
sends the *same* record again, same id, flagged ``RESENT``, and ingest drops a resent record
whose id it already committed within its deduplication window (docs/FORMAT.md, section 5).
Only resent records are looked up, so a record sent once costs ingest nothing. Standard
library only.

The envelope, byte by byte (docs/API.md, "Idempotent produce")::

    offset  size  field
    0       4     magic: FF 53 4C 49 (0xFF, then "SLI")
    4       1     version: 01
    5       1     flags: bit 0 (0x01) RESENT: sent again after an unknown outcome; the
                  other bits are 0
    6       1     id length L, 1..64
    7       L     record id, ASCII [A-Za-z0-9._:-]
    7+L     4     CRC-32 (zlib/IEEE, big-endian) of bytes 0 .. 7+L-1
    11+L    ...   the payload, as given

Invariants: ``unwrap(wrap(i, p)) == (i, p)`` for every valid id and any payload; data that
is not a whole, valid envelope (wrong magic, other version, truncated header, bad length,
bad id characters, CRC mismatch) is a plain payload: ``unwrap(d) == (None, d)``. 0xFF
never occurs in UTF-8, so no text payload (JSON, say) can be misread as an envelope, and
the CRC makes a random binary payload that starts with the magic a plain payload but for
one chance in 2^32. A producer never sends, without an id, data that is itself a valid
envelope (``validate_record`` refuses it), so every envelope in the stream is one a
producer wrapped. An envelope costs ``11 + L`` bytes of Kinesis' 1 MiB record limit.
"""

from __future__ import annotations

import itertools
import re
import struct
import threading
import uuid
import zlib
from dataclasses import dataclass
from typing import Final

MAGIC: Final = b"\xffSLI"
VERSION: Final = 1
RECORD_ID_MAX_BYTES: Final = 64
RECORD_ID_PATTERN: Final = r"^[A-Za-z0-9._:-]{1,64}$"
RESENT: Final = 0x01
_KNOWN_FLAGS = RESENT
_HEADER_FIXED = len(MAGIC) + 3  # magic, version, flags, id length
_CRC = struct.Struct(">I")
_RECORD_ID = re.compile(RECORD_ID_PATTERN)
# The most an envelope adds to a record: the header around a 64-byte id.
MAX_OVERHEAD_BYTES: Final = _HEADER_FIXED + RECORD_ID_MAX_BYTES + _CRC.size


def record_id_problem(record_id: object) -> tuple[str, int | str] | None:
    """Why ``record_id`` is not a valid record id and the limit it breaks; None if valid."""
    if not isinstance(record_id, str):
        return "must be a string", RECORD_ID_PATTERN
    if not 1 <= len(record_id) <= RECORD_ID_MAX_BYTES:
        reason = f"must be 1 to {RECORD_ID_MAX_BYTES} characters, got {len(record_id)}"
        return reason, RECORD_ID_MAX_BYTES
    if not _RECORD_ID.fullmatch(record_id):
        return "may hold only the characters A-Z a-z 0-9 . _ : -", RECORD_ID_PATTERN
    return None


def overhead(record_id: str) -> int:
    """Bytes the envelope adds to the payload for this id."""
    return _HEADER_FIXED + len(record_id) + _CRC.size


def wrap(record_id: str, data: bytes, *, resent: bool = False) -> bytes:
    """The envelope carrying ``record_id`` and ``data``; ValueError for an invalid id.

    ``resent``: this is the same record sent again after an outcome the producer does not
    know (ingest looks its id up in the log before committing it)."""
    problem = record_id_problem(record_id)
    if problem is not None:
        raise ValueError(f"record id {record_id!r}: {problem[0]}")
    flags = RESENT if resent else 0
    header = MAGIC + bytes((VERSION, flags, len(record_id))) + record_id.encode("ascii")
    return header + _CRC.pack(zlib.crc32(header)) + bytes(data)


@dataclass(frozen=True)
class Envelope:
    """What a record's data holds: its id (None: sent without one), whether it was resent,
    and the payload (the data itself when there is no envelope)."""

    record_id: str | None
    resent: bool
    payload: bytes


def open_envelope(data: bytes) -> Envelope:
    """The envelope of a record's data; any data that is not a whole, valid envelope is a
    plain payload (``Envelope(None, False, data)``)."""
    data = bytes(data)
    plain = Envelope(None, False, data)
    if not data.startswith(MAGIC) or len(data) < _HEADER_FIXED:
        return plain
    version, flags, length = data[len(MAGIC) : _HEADER_FIXED]
    end = _HEADER_FIXED + length
    if (
        version != VERSION
        or flags & ~_KNOWN_FLAGS
        or not 1 <= length <= RECORD_ID_MAX_BYTES
        or len(data) < end + _CRC.size
    ):
        return plain
    (crc,) = _CRC.unpack_from(data, end)
    if crc != zlib.crc32(data[:end]):
        return plain
    record_id = data[_HEADER_FIXED:end].decode("ascii", "replace")
    if record_id_problem(record_id) is not None:
        return plain
    return Envelope(record_id, bool(flags & RESENT), data[end + _CRC.size :])


def unwrap(data: bytes) -> tuple[str | None, bytes]:
    """``(record id, payload)`` of an envelope; ``(None, data)`` for anything else."""
    envelope = open_envelope(data)
    return envelope.record_id, envelope.payload


def is_envelope(data: bytes) -> bool:
    return unwrap(data)[0] is not None


class RecordIds:
    """Unique record ids: ``<producer id>:<counter>``, the producer id random (UUID4 hex)
    unless given. Thread-safe; at most 32 + 1 + 20 characters for 2^64 records."""

    def __init__(self, producer_id: str | None = None) -> None:
        self.producer_id = producer_id or uuid.uuid4().hex
        problem = record_id_problem(f"{self.producer_id}:{2**64}")
        if problem is not None:
            raise ValueError(f"producer id {self.producer_id!r}: {problem[0]}")
        self._counter = itertools.count()
        self._lock = threading.Lock()

    def next(self) -> str:
        with self._lock:
            return f"{self.producer_id}:{next(self._counter)}"
