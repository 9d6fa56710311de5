"""Make moto's Kinesis behave like Kinesis where shardlog depends on it.

moto 5.x treats resharding as metadata: after SplitShard it re-puts the parent's
records into the still-routable parent (renumbered from 1), MergeShards copies
both parents' records into the child (duplicates), records keep routing to
closed shards, and GetRecords at the end of a closed shard neither ends nor
returns ChildShards. Its per-shard counters are also not thread-safe under the
threaded server. ``apply()`` patches the in-process backend (the server side, so
every client, shardlog or plain boto3, sees the fixed behaviour):

- a split or merge closes the parents in place: their records stay, their
  EndingSequenceNumber is their last record, and new records route only to
  open shards (hash ranges inclusive at both ends, as in Kinesis);
- sequence numbers are 56-digit decimals, increasing across the whole stream
  (children's records sort after their parents'), as on AWS;
- GetRecords that reaches the end of a closed shard returns ChildShards and no
  NextShardIterator;
- puts, splits and merges are serialized, so concurrent producers never lose
  or renumber records; GetRecords reads a shard under the same lock (moto iterates the
  shard's records while a put appends: "OrderedDict mutated during iteration").

And where moto spends the embedded AWS's CPU on the data path (`bench/latency.py` at 5,000
records/s: a third of the runtime process's interpreter time was moto's generic response
serializer walking PutRecords' and GetRecords' record lists, and GetRecords scanned a
shard's records from its first on every call):

- GetRecords finds its first record by bisection on the shard's sequence numbers (kept
  beside its records, in order), not by a scan from the shard's start;
- GetRecords and PutRecords answer with the JSON Kinesis sends, written directly (the same
  members, values and millisecond timestamps as moto's serializer gives);
- a record's arrival time is computed against an epoch built once: moto's ``unix_time``
  builds the epoch from a timestamp on every call, which was half of a PutRecords' CPU in
  the embedded AWS's own process (the same value: the same arithmetic on the same dates).
"""

from __future__ import annotations

import bisect
import calendar
import datetime
import itertools
import json
import threading
from typing import Any

from moto.core.utils import utcnow
from moto.kinesis import models as kinesis_models
from moto.kinesis import responses as kinesis_responses
from moto.kinesis.exceptions import InvalidArgumentError
from moto.kinesis.utils import compose_shard_iterator, decompose_shard_iterator

SEQUENCE_BASE = 49 * 10**54  # AWS sequence numbers are 56 digits and start with 49...
_lock = threading.RLock()
_sequence = itertools.count(1)
_applied = False


_EPOCH = datetime.datetime(1970, 1, 1)  # naive, as moto's utcfromtimestamp(0)


def _unix_time(dt: datetime.datetime | None = None) -> float:
    """moto's ``unix_time`` (seconds since the epoch of a naive UTC datetime, by the same
    arithmetic), with the epoch built once instead of on every call."""
    delta = (dt or utcnow()) - _EPOCH
    return (delta.days * 86400) + (delta.seconds + (delta.microseconds / 1e6))


def _next_sequence_number() -> int:
    with _lock:
        return SEQUENCE_BASE + next(_sequence)


def _shard_put_record(
    self: kinesis_models.Shard, partition_key: str, data: str, explicit_hash_key: str
) -> str:
    with _lock:
        number = _next_sequence_number()
        numbers = _numbers(self)  # before the record is added: the two stay the same length
        self.records[number] = kinesis_models.Record(partition_key, data, number, explicit_hash_key)
        numbers.append(number)  # increasing: the stream's counter only grows
        return str(number)


def _numbers(shard: kinesis_models.Shard) -> list[int]:
    """The shard's sequence numbers in order (its records' keys), for bisection."""
    numbers: list[int] | None = shard.__dict__.get("_shardlog_numbers")
    if numbers is None or len(numbers) != len(shard.records):
        numbers = list(shard.records)
        shard.__dict__["_shardlog_numbers"] = numbers
    return numbers


def _shard_get_records(
    self: kinesis_models.Shard, last_sequence_id: str, limit: int | None
) -> tuple[list[kinesis_models.Record], int, int]:
    """moto's ``Shard.get_records`` (records after ``last_sequence_id``, at most ``limit``,
    how far the last one returned is behind the shard's newest) by bisection."""
    with _lock:
        numbers = _numbers(self)
        last = int(last_sequence_id)
        start = bisect.bisect_right(numbers, last)
        chosen = numbers[start : start + limit if limit else None]
        records = [self.records[n] for n in chosen]
        if not records:
            return [], last, 0
        behind = self.records[numbers[-1]].created_at - records[-1].created_at
        return records, chosen[-1], int(behind * 1000)


def _shard_min_sequence_number(self: kinesis_models.Shard) -> int:
    with _lock:
        numbers = _numbers(self)
        return numbers[0] if numbers else 0


def _shard_max_sequence_number(self: kinesis_models.Shard) -> int:
    with _lock:
        numbers = _numbers(self)
        return numbers[-1] if numbers else 0


def _get_shard_for_key(
    self: kinesis_models.Stream, partition_key: str, explicit_hash_key: str
) -> kinesis_models.Shard | None:
    if explicit_hash_key:
        if not isinstance(explicit_hash_key, str):
            raise InvalidArgumentError("explicit_hash_key")
        key = int(explicit_hash_key)
        if key >= 2**128:
            raise InvalidArgumentError("explicit_hash_key")
    else:
        key = int(kinesis_models.md5_hash(partition_key.encode("utf-8")).hexdigest(), 16)
    for shard in self.shards.values():
        if shard.is_open and shard.starting_hash <= key <= shard.ending_hash:
            return shard
    return None


def _stream_put_record(
    self: kinesis_models.Stream, partition_key: str, explicit_hash_key: str, data: str
) -> tuple[str, str]:
    with _lock:  # route and append atomically: a reshard can't slip in between
        shard = _get_shard_for_key(self, partition_key, explicit_hash_key)
        if shard is None:
            raise InvalidArgumentError("no open shard for the hash key")
        return _shard_put_record(shard, partition_key, data, explicit_hash_key), shard.shard_id


def _new_shard(
    stream: kinesis_models.Stream, start: int, end: int, parent: str, adjacent: str | None = None
) -> kinesis_models.Shard:
    last_id = max(s._shard_id for s in stream.shards.values())
    shard = kinesis_models.Shard(
        last_id + 1, starting_hash=start, ending_hash=end, parent=parent, adjacent_parent=adjacent
    )
    stream.shards[shard.shard_id] = shard
    return shard


def _split_shard(
    self: kinesis_models.Stream, shard_to_split: str, new_starting_hash_key: str
) -> None:
    with _lock:
        split_at = int(new_starting_hash_key)
        shard = self.get_shard(shard_to_split)
        if not shard.is_open:
            raise InvalidArgumentError(f"Shard {shard_to_split} has already been merged or split")
        if not shard.starting_hash < split_at <= shard.ending_hash:
            raise InvalidArgumentError(
                f"NewStartingHashKey {split_at} is not inside shard {shard_to_split}'s hash range"
            )
        shard.is_open = False
        _new_shard(self, shard.starting_hash, split_at - 1, shard.shard_id)
        _new_shard(self, split_at, shard.ending_hash, shard.shard_id)


def _merge_shards(
    self: kinesis_models.Stream, shard_to_merge: str, adjacent_shard_to_merge: str
) -> None:
    with _lock:
        first = self.get_shard(shard_to_merge)
        second = self.get_shard(adjacent_shard_to_merge)
        if not (first.is_open and second.is_open):
            raise InvalidArgumentError("both shards of a merge must be open")
        low, high = sorted((first, second), key=lambda s: s.starting_hash)
        if low.ending_hash + 1 != high.starting_hash:
            raise InvalidArgumentError(
                f"shards {shard_to_merge} and {adjacent_shard_to_merge} are not adjacent"
            )
        first.is_open = False
        second.is_open = False
        _new_shard(self, low.starting_hash, high.ending_hash, first.shard_id, second.shard_id)


def _get_records(self: kinesis_responses.KinesisResponse) -> Any:
    stream_arn = self._get_param("StreamARN")
    iterator = self._get_param("ShardIterator")
    limit = self._get_param("Limit")
    backend = self.kinesis_backend
    stream_name, shard_id, position = decompose_shard_iterator(iterator)
    stream = backend.describe_stream(stream_arn=stream_arn, stream_name=stream_name)
    shard = stream.get_shard(shard_id)
    records, last, millis_behind = _shard_get_records(shard, position, limit)
    next_iterator = compose_shard_iterator(stream_name, shard, last)
    body: dict[str, Any] = {
        "Records": [_record_json(record) for record in records],
        "MillisBehindLatest": millis_behind,
    }
    last_read = int(decompose_shard_iterator(next_iterator)[2])
    if not shard.is_open and last_read >= shard.get_max_sequence_number():
        body["ChildShards"] = [
            {
                "ShardId": child.shard_id,
                "ParentShards": [p for p in (child.parent, child.adjacent_parent) if p],
                "HashKeyRange": {
                    "StartingHashKey": str(child.starting_hash),
                    "EndingHashKey": str(child.ending_hash),
                },
            }
            for child in stream.shards.values()
            if shard.shard_id in (child.parent, child.adjacent_parent)
        ]
    else:
        body["NextShardIterator"] = next_iterator
    return json.dumps(body)


def _record_json(record: kinesis_models.Record) -> dict[str, Any]:
    """A record as GetRecords sends it: Data as put (base64), the arrival time in epoch
    seconds truncated to milliseconds (moto's serializer: the Smithy rule)."""
    arrival = record.created_at_datetime
    return {
        "SequenceNumber": str(record.sequence_number),
        "ApproximateArrivalTimestamp": _epoch_ms(arrival),
        "Data": record.data,
        "PartitionKey": record.partition_key,
    }


def _epoch_ms(value: Any) -> int | float:
    seconds = calendar.timegm(value.timetuple())
    if value.microsecond:
        return seconds + (value.microsecond // 1000) / 1000.0
    return seconds


def _put_records(self: kinesis_responses.KinesisResponse) -> str:
    """PutRecords, answered with Kinesis's JSON directly."""
    answer = self.kinesis_backend.put_records(
        self._get_param("StreamARN"), self._get_param("StreamName"), self._get_param("Records")
    )
    return json.dumps(answer)


def apply() -> None:
    """Install the patches (idempotent). Call before the moto server takes requests."""
    global _applied
    with _lock:
        if _applied:
            return
        kinesis_models.unix_time = _unix_time  # a record's created_at
        kinesis_models.Shard.put_record = _shard_put_record  # type: ignore[method-assign]
        kinesis_models.Stream.get_shard_for_key = _get_shard_for_key  # type: ignore[method-assign]
        kinesis_models.Stream.put_record = _stream_put_record  # type: ignore[method-assign]
        kinesis_models.Stream.split_shard = _split_shard  # type: ignore[method-assign]
        kinesis_models.Stream.merge_shards = _merge_shards  # type: ignore[method-assign]
        kinesis_responses.KinesisResponse.get_records = _get_records  # type: ignore[method-assign]
        kinesis_responses.KinesisResponse.put_records = _put_records  # type: ignore[method-assign,assignment]
        kinesis_models.Shard.get_records = _shard_get_records  # type: ignore[method-assign]
        kinesis_models.Shard.get_min_sequence_number = _shard_min_sequence_number  # type: ignore[method-assign]
        kinesis_models.Shard.get_max_sequence_number = _shard_max_sequence_number  # type: ignore[method-assign]
        _applied = True
