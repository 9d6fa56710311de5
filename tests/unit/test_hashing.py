"""Partition key -> hash key -> shard, checked against independent values and Kinesis (moto)."""

from __future__ import annotations

from typing import Any

import pytest

from shardlog import constants as C
from shardlog.exceptions import ValidationError
from shardlog.hashing import hash_key, parse_explicit_hash_key, shard_for_hash, shard_for_key

# Computed once outside Python: `printf '%s' KEY | md5sum`, the hex digest converted to
# decimal with `bc` (ibase=16). Kinesis hashes the UTF-8 bytes of the key.
KNOWN_HASH_KEYS = {
    "": 281949768489412648962353822266799178366,  # d41d8cd98f00b204e9800998ecf8427e
    "a": 16955237001963240173058271559858726497,  # 0cc175b9c0f1b6a831c399e269772661
    "hello": 123957004363873451094272536567338222994,  # 5d41402abc4b2a76b9719d911017c592
    "partition-key-1": 33365116028791453877729010807000998774,
    "user-42": 157107139746365290205026809710278036035,
    "shardlog": 173087301341773604789414172731031155740,
    "\u00e9": 136732923097551493579404309126273812335,  # c3 a9
    "\u65e5\u672c\u8a9e": 88491575051939950596574576699976684,  # 00110af8..., a leading zero byte
}


@pytest.mark.parametrize(("key", "expected"), sorted(KNOWN_HASH_KEYS.items()))
def test_hash_key_is_md5_as_128_bit_big_endian(key: str, expected: int) -> None:
    assert hash_key(key) == expected
    assert 0 <= hash_key(key) <= C.MAX_HASH_KEY


def test_explicit_hash_key_overrides_the_partition_key() -> None:
    assert hash_key("hello", "0") == 0
    assert hash_key("hello", "42") == 42
    assert hash_key("hello", None) == KNOWN_HASH_KEYS["hello"]


@pytest.mark.parametrize("value", ["0", "1", "10", str(2**127), str(2**128 - 1)])
def test_explicit_hash_key_accepted(value: str) -> None:
    assert parse_explicit_hash_key(value) == int(value)


def test_explicit_hash_key_just_past_the_top_is_rejected() -> None:
    with pytest.raises(ValidationError) as caught:
        parse_explicit_hash_key(str(2**128))
    assert caught.value.field == "explicitHashKey"
    assert caught.value.limit == 2**128 - 1
    assert "explicitHashKey" in str(caught.value)


@pytest.mark.parametrize(
    "value",
    [
        "",
        "-1",
        "+1",
        "000",  # Kinesis: 0|[1-9]\d{0,38}, no leading zeros
        "0001",
        " 1",
        "1 ",
        "1.0",
        "1e3",
        "0x10",
        "abc",
        "\u0661\u0662",  # Arabic-Indic digits: isdigit() is True, not ASCII
        "\uff11",  # fullwidth 1
        "\u00b2",  # superscript 2
        1,
        None,
        b"1",
    ],
)
def test_explicit_hash_key_malformed_is_rejected(value: Any) -> None:
    with pytest.raises(ValidationError) as caught:
        parse_explicit_hash_key(value)
    assert caught.value.field == "explicitHashKey"
    assert caught.value.limit == f"0..{2**128 - 1}"


# --- shard ranges -------------------------------------------------------------------------


def shard(shard_id: str, start: int, end: int, *, closed: bool = False) -> dict[str, Any]:
    sequence_range = {"StartingSequenceNumber": "1"}
    if closed:
        sequence_range["EndingSequenceNumber"] = "2"
    return {
        "ShardId": shard_id,
        "HashKeyRange": {"StartingHashKey": str(start), "EndingHashKey": str(end)},
        "SequenceNumberRange": sequence_range,
    }


SHARDS = [
    shard("closed-parent", 0, 199, closed=True),
    shard("low", 0, 99),
    shard("high", 100, 199),
]


@pytest.mark.parametrize(
    ("key", "expected"), [(0, "low"), (99, "low"), (100, "high"), (150, "high"), (199, "high")]
)
def test_both_ends_of_a_range_are_inclusive_and_closed_shards_are_skipped(
    key: int, expected: str
) -> None:
    assert shard_for_hash(SHARDS, key) == expected


@pytest.mark.parametrize("key", [200, -1])
def test_no_open_shard_holds_the_key(key: int) -> None:
    with pytest.raises(LookupError, match=f"no open shard holds hash key {key}"):
        shard_for_hash(SHARDS, key)


def test_only_closed_shards_hold_nothing() -> None:
    with pytest.raises(LookupError):
        shard_for_hash([shard("gone", 0, C.MAX_HASH_KEY, closed=True)], 5)


def test_shard_for_key_uses_the_explicit_hash_key() -> None:
    assert shard_for_key(SHARDS, "anything", "99") == "low"
    assert shard_for_key(SHARDS, "anything", "100") == "high"
