"""Partition key -> hash key -> shard, exactly as Kinesis routes a record.

Kinesis takes the MD5 of the UTF-8 partition key as a 128-bit big-endian unsigned
integer (or the ExplicitHashKey, a decimal string, when given) and sends the
record to the open shard whose HashKeyRange holds it, both ends inclusive.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from typing import Any

from shardlog import constants as C
from shardlog.exceptions import ValidationError

_EXPLICIT_HASH_KEY = re.compile(C.EXPLICIT_HASH_KEY_PATTERN)


def hash_key(partition_key: str, explicit_hash_key: str | None = None) -> int:
    if explicit_hash_key is not None:
        return parse_explicit_hash_key(explicit_hash_key)
    return int.from_bytes(hashlib.md5(partition_key.encode("utf-8")).digest(), "big")


def parse_explicit_hash_key(value: Any) -> int:
    if not isinstance(value, str) or not _EXPLICIT_HASH_KEY.fullmatch(value):
        raise ValidationError(
            "explicitHashKey",
            "must be a decimal integer string without sign or leading zeros",
            limit=f"0..{C.MAX_HASH_KEY}",
        )
    number = int(value)
    if number > C.MAX_HASH_KEY:
        raise ValidationError(
            "explicitHashKey", f"must be at most 2^128-1 ({C.MAX_HASH_KEY})", limit=C.MAX_HASH_KEY
        )
    return number


def shard_for_hash(shards: Iterable[Mapping[str, Any]], key: int) -> str:
    """The open shard (no EndingSequenceNumber) of a ListShards result holding ``key``."""
    for shard in shards:
        if "EndingSequenceNumber" in shard.get("SequenceNumberRange", {}):
            continue
        hash_range = shard["HashKeyRange"]
        if int(hash_range["StartingHashKey"]) <= key <= int(hash_range["EndingHashKey"]):
            return str(shard["ShardId"])
    raise LookupError(f"no open shard holds hash key {key}")


def shard_for_key(
    shards: Iterable[Mapping[str, Any]], partition_key: str, explicit_hash_key: str | None = None
) -> str:
    return shard_for_hash(shards, hash_key(partition_key, explicit_hash_key))
