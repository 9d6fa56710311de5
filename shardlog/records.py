"""A record to produce: validated once against Kinesis' limits, the same for the SDK, the CLI
and the HTTP API; the error names the field and the limit.

A record with a record id travels in an idempotence envelope (shardlog/idempotence.py), and
its size counts the envelope, so a record that passes here also passes Kinesis.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from typing import Any

from shardlog import constants as C
from shardlog import idempotence
from shardlog.exceptions import ValidationError
from shardlog.hashing import parse_explicit_hash_key


@dataclass(frozen=True)
class ProducerRecord:
    partition_key: str
    data: bytes  # the payload; with a record id it travels in an idempotence envelope
    explicit_hash_key: str | None = None
    record_id: str | None = None
    # Sent again after an unknown outcome (only with a record id): ingest looks the id up.
    resent: bool = False

    @property
    def wire_data(self) -> bytes:
        """The bytes Kinesis stores: the payload, in its envelope when it has a record id."""
        if self.record_id is None:
            return self.data
        return idempotence.wrap(self.record_id, self.data, resent=self.resent)

    @property
    def size(self) -> int:
        """Bytes Kinesis counts against its limits: the stored data plus the UTF-8 key."""
        envelope = 0 if self.record_id is None else idempotence.overhead(self.record_id)
        return envelope + len(self.data) + len(self.partition_key.encode("utf-8"))

    def entry(self) -> dict[str, Any]:
        """The record as a PutRecords entry."""
        entry: dict[str, Any] = {"PartitionKey": self.partition_key, "Data": self.wire_data}
        if self.explicit_hash_key is not None:
            entry["ExplicitHashKey"] = self.explicit_hash_key
        return entry


RecordInput = ProducerRecord | tuple[Any, ...]


def validate_record(
    partition_key: Any,
    data: Any,
    explicit_hash_key: Any = None,
    record_id: Any = None,
    *,
    index: int | None = None,
) -> ProducerRecord:
    """Check one record against Kinesis' limits; the error names the field and the limit."""
    where = f"records[{index}]." if index is not None else ""
    if not isinstance(partition_key, str):
        raise ValidationError(f"{where}partitionKey", "must be a string", limit="1..256 chars")
    if not 1 <= len(partition_key) <= C.PARTITION_KEY_MAX_CHARS:
        raise ValidationError(
            f"{where}partitionKey",
            f"must be 1 to {C.PARTITION_KEY_MAX_CHARS} characters, got {len(partition_key)}",
            limit=C.PARTITION_KEY_MAX_CHARS,
        )
    try:
        partition_key.encode("utf-8")
    except UnicodeEncodeError:
        raise ValidationError(
            f"{where}partitionKey", "must be valid Unicode (no lone surrogates)", limit="UTF-8"
        ) from None
    if isinstance(data, str):
        data = data.encode("utf-8")
    if not isinstance(data, bytes | bytearray | memoryview):
        raise ValidationError(f"{where}data", "must be bytes", limit=C.KINESIS_MAX_RECORD_BYTES)
    data = bytes(data)
    if explicit_hash_key is not None:
        try:
            parse_explicit_hash_key(explicit_hash_key)
        except ValidationError as exc:
            raise ValidationError(f"{where}explicitHashKey", exc.reason, limit=exc.limit) from None
    if record_id is not None:
        problem = idempotence.record_id_problem(record_id)
        if problem is not None:
            reason, limit = problem
            raise ValidationError(f"{where}recordId", reason, limit=limit)
    elif idempotence.is_envelope(data):
        raise ValidationError(
            f"{where}data",
            "is itself an idempotence envelope (docs/API.md): ingest would read it as one; "
            "give the record a recordId to send it as the payload of an envelope",
            limit="not an envelope",
        )
    record = ProducerRecord(partition_key, data, explicit_hash_key, record_id)
    if record.size > C.KINESIS_MAX_RECORD_BYTES:
        envelope = "" if record_id is None else " plus the recordId's envelope"
        raise ValidationError(
            f"{where}data",
            f"data{envelope} plus partition key is {record.size} bytes, at most "
            f"{C.KINESIS_MAX_RECORD_BYTES} (1 MiB)",
            limit=C.KINESIS_MAX_RECORD_BYTES,
        )
    return record


def prepare_records(
    records: Iterable[RecordInput], record_ids: idempotence.RecordIds | None = None
) -> list[ProducerRecord]:
    """Every record validated (ValidationError on the first bad one), and with
    ``record_ids`` each record that has no id given a new one."""
    out = []
    for index, record in enumerate(records):
        resent = False
        if isinstance(record, ProducerRecord):
            resent = record.resent and record.record_id is not None
            record = (
                record.partition_key,
                record.data,
                record.explicit_hash_key,
                record.record_id,
            )
        valid = validate_record(*record, index=index)
        if record_ids is not None and valid.record_id is None:
            key, data, hash_key = valid.partition_key, valid.data, valid.explicit_hash_key
            valid = validate_record(key, data, hash_key, record_ids.next(), index=index)
        out.append(replace(valid, resent=True) if resent else valid)
    return out


def iter_json_records(lines: Iterable[str]) -> Iterator[ProducerRecord]:
    """Records from JSON lines with partitionKey, data (text) or dataBase64, explicitHashKey,
    recordId."""

    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValidationError(f"line {number}", f"invalid JSON: {exc.msg}") from None
        if not isinstance(obj, dict):
            raise ValidationError(f"line {number}", "must be a JSON object")
        if "dataBase64" in obj:
            try:
                data: Any = base64.b64decode(obj["dataBase64"], validate=True)
            except (ValueError, TypeError):
                raise ValidationError(f"line {number}.dataBase64", "invalid base64") from None
        else:
            data = obj.get("data", "")
        try:
            yield validate_record(
                obj.get("partitionKey"), data, obj.get("explicitHashKey"), obj.get("recordId")
            )
        except ValidationError as exc:
            raise ValidationError(
                f"line {number}.{exc.field}", exc.reason, limit=exc.limit
            ) from None
