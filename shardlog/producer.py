"""The SDK producer: validated, batched PutRecords with retries that keep per-key order.

Order: Kinesis keeps the order of successful records of one shard, but a
PutRecords call can fail some entries and not others. If two records of one key
were in the same call and the first failed, retrying it would put it after the
second. So a call never holds two records of one key, and a key whose record is
waiting for a retry sends nothing newer until that record is in. Each key's
records therefore reach Kinesis in the order ``put`` was called.
"""

from __future__ import annotations

import base64
import json
import random
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from shardlog import constants as C
from shardlog.aws import Clients
from shardlog.clock import Clock, SystemClock
from shardlog.exceptions import ProducerError, ValidationError, aws_error_code
from shardlog.hashing import parse_explicit_hash_key


@dataclass(frozen=True)
class ProducerRecord:
    partition_key: str
    data: bytes
    explicit_hash_key: str | None = None

    @property
    def size(self) -> int:
        """Bytes Kinesis counts against its limits: data plus the UTF-8 partition key."""
        return len(self.data) + len(self.partition_key.encode("utf-8"))


@dataclass(frozen=True)
class PutResult:
    shard_id: str
    sequence_number: str


def validate_record(
    partition_key: Any, data: Any, explicit_hash_key: Any = None, *, index: int | None = None
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
    record = ProducerRecord(partition_key, data, explicit_hash_key)
    if record.size > C.KINESIS_MAX_RECORD_BYTES:
        raise ValidationError(
            f"{where}data",
            f"data plus partition key is {record.size} bytes, at most "
            f"{C.KINESIS_MAX_RECORD_BYTES} (1 MiB)",
            limit=C.KINESIS_MAX_RECORD_BYTES,
        )
    return record


@dataclass
class _Pending:
    index: int
    record: ProducerRecord
    attempts: int = 0
    error_code: str = ""
    error_message: str = ""


class Producer:
    """Puts records into the stream. ``put_records`` returns one PutResult per record, in order.

    Retries entries Kinesis failed (throttling, internal errors) with exponential
    backoff and full jitter, up to ``max_attempts`` per record; then raises
    ProducerError holding what was not put (``unsent``) and what was (``results``).
    """

    def __init__(
        self,
        stream_name: str = C.DEFAULT_STREAM_NAME,
        clients: Clients | None = None,
        *,
        max_batch_records: int = C.KINESIS_MAX_RECORDS_PER_PUT,
        max_batch_bytes: int = C.KINESIS_MAX_BYTES_PER_PUT,
        max_attempts: int = 8,
        base_backoff_s: float = 0.05,
        max_backoff_s: float = 2.0,
        clock: Clock | None = None,
        rng: random.Random | None = None,
    ) -> None:
        if not 1 <= max_batch_records <= C.KINESIS_MAX_RECORDS_PER_PUT:
            raise ValidationError(
                "max_batch_records",
                f"must be 1 to {C.KINESIS_MAX_RECORDS_PER_PUT}",
                limit=C.KINESIS_MAX_RECORDS_PER_PUT,
            )
        if not 1 <= max_batch_bytes <= C.KINESIS_MAX_BYTES_PER_PUT:
            raise ValidationError(
                "max_batch_bytes",
                f"must be 1 to {C.KINESIS_MAX_BYTES_PER_PUT}",
                limit=C.KINESIS_MAX_BYTES_PER_PUT,
            )
        self.stream_name = stream_name
        self.clients = clients or Clients()
        self.max_batch_records = max_batch_records
        self.max_batch_bytes = max_batch_bytes
        self.max_attempts = max_attempts
        self.base_backoff_s = base_backoff_s
        self.max_backoff_s = max_backoff_s
        self.clock = clock or SystemClock()
        self.rng = rng or random.Random()
        self.calls = 0

    def put(
        self, partition_key: str, data: bytes | str, explicit_hash_key: str | None = None
    ) -> PutResult:
        return self.put_records([(partition_key, data, explicit_hash_key)])[0]

    def put_records(
        self,
        records: Iterable[ProducerRecord | tuple[Any, ...]],
        *,
        on_progress: Callable[[int], None] | None = None,
    ) -> list[PutResult]:
        """Validate everything first (nothing is sent if any record is bad), then put."""
        validated = [self._validate(r, i) for i, r in enumerate(records)]
        results: list[PutResult | None] = [None] * len(validated)
        queue = deque(_Pending(i, r) for i, r in enumerate(validated))
        while queue:
            batch = self._next_batch(queue)
            try:
                failed = self._send(batch, results)
            except (ClientError, BotoCoreError) as exc:
                if not any(results):
                    raise  # nothing went in: the caller sees AWS's own error
                # Some records are in Kinesis already: never let the caller think otherwise.
                error = ProducerError(
                    f"{len(batch) + len(queue)} record(s) not put: PutRecords failed "
                    f"as a whole ({aws_error_code(exc) or type(exc).__name__}) after "
                    f"{sum(r is not None for r in results)} went in",
                    [p.record for p in sorted([*batch, *queue], key=lambda p: p.index)],
                    aws_error_code=aws_error_code(exc) or "InternalFailure",
                )
                error.results = results
                raise error from exc
            if on_progress:
                on_progress(len(batch) - len(failed))
            if failed:
                exhausted = [p for p in failed if p.attempts >= self.max_attempts]
                if exhausted:
                    unsent = [p.record for p in sorted([*failed, *queue], key=lambda p: p.index)]
                    last = exhausted[0]
                    error = ProducerError(
                        f"{len(unsent)} record(s) not put after {self.max_attempts} attempts: "
                        f"key {last.record.partition_key!r} failed last with "
                        f"{last.error_code}: {last.error_message}",
                        unsent,
                        aws_error_code=last.error_code,
                    )
                    error.results = results  # what did go in, by input index (None: unsent)
                    raise error
                # Failed entries go back to the front, in their original order.
                queue.extendleft(sorted(failed, key=lambda p: p.index, reverse=True))
                attempt = max(p.attempts for p in failed)
                cap = min(self.max_backoff_s, self.base_backoff_s * 2 ** (attempt - 1))
                self.clock.sleep(self.rng.uniform(0, cap))
        return [r for r in results if r is not None]

    def _validate(self, record: ProducerRecord | tuple[Any, ...], index: int) -> ProducerRecord:
        if isinstance(record, ProducerRecord):
            record = (record.partition_key, record.data, record.explicit_hash_key)
        valid = validate_record(*record, index=index)
        if valid.size > self.max_batch_bytes:
            raise ValidationError(
                f"records[{index}].data",
                f"record is {valid.size} bytes, more than this producer's max_batch_bytes "
                f"({self.max_batch_bytes})",
                limit=self.max_batch_bytes,
            )
        return valid

    def _next_batch(self, queue: deque[_Pending]) -> list[_Pending]:
        """Take from the queue in order, at most one record per key, a key blocked once skipped."""
        batch: list[_Pending] = []
        keys: set[str] = set()
        blocked: set[str] = set()
        size = 0
        kept: list[_Pending] = []
        while queue and len(batch) < self.max_batch_records:
            item = queue.popleft()
            key = item.record.partition_key
            fits = size + item.record.size <= self.max_batch_bytes
            if key in keys or key in blocked or not fits:
                blocked.add(key)
                kept.append(item)
                if not fits:  # validation guarantees a record fits an empty batch
                    break
                continue
            batch.append(item)
            keys.add(key)
            size += item.record.size
        queue.extendleft(reversed(kept))
        return batch

    def _send(self, batch: list[_Pending], results: list[PutResult | None]) -> list[_Pending]:
        entries = []
        for item in batch:
            entry: dict[str, Any] = {
                "PartitionKey": item.record.partition_key,
                "Data": item.record.data,
            }
            if item.record.explicit_hash_key is not None:
                entry["ExplicitHashKey"] = item.record.explicit_hash_key
            entries.append(entry)
            item.attempts += 1
        self.calls += 1
        response = self.clients.kinesis.put_records(StreamName=self.stream_name, Records=entries)
        failed = []
        for item, outcome in zip(batch, response["Records"], strict=True):
            if "ErrorCode" in outcome:
                item.error_code = outcome["ErrorCode"]
                item.error_message = outcome.get("ErrorMessage", "")
                failed.append(item)
            else:
                results[item.index] = PutResult(outcome["ShardId"], outcome["SequenceNumber"])
        return failed


def iter_json_records(lines: Iterable[str]) -> Iterator[ProducerRecord]:
    """Records from JSON lines with partitionKey, data (text) or dataBase64, explicitHashKey."""

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
            yield validate_record(obj.get("partitionKey"), data, obj.get("explicitHashKey"))
        except ValidationError as exc:
            raise ValidationError(
                f"line {number}.{exc.field}", exc.reason, limit=exc.limit
            ) from None
