"""The segment store's key layout (pure: no AWS). Its S3 behaviour is tested against the
embedded AWS in tests/functional/ingest/test_segment_store.py."""

from __future__ import annotations

import pytest

from shardlog import constants as C
from shardlog.exceptions import SegmentFormatError
from shardlog.segments import partition_prefix, segment_key, seq_of_key


def test_the_documented_example_key() -> None:
    assert (
        segment_key("shardId-000000000000", 7) == "events/shardId-000000000000/00000000000000000007"
    )


@pytest.mark.parametrize("partition_id", ["", "a/b"])
def test_a_partition_id_that_would_break_the_layout_is_refused(partition_id: str) -> None:
    with pytest.raises(ValueError, match="not a partition id"):
        partition_prefix(partition_id)


def test_segment_key_layout() -> None:
    assert segment_key("shardId-000000000001", 0) == (
        "events/shardId-000000000001/00000000000000000000"
    )
    assert segment_key("p", 10**20 - 1) == "events/p/99999999999999999999"
    assert partition_prefix("p") == "events/p/"
    assert segment_key("p", 5).startswith(partition_prefix("p"))
    assert len(segment_key("p", 123).rsplit("/", 1)[1]) == C.SEQ_DIGITS


@pytest.mark.parametrize("seq", [-1, 10**20])
def test_segment_key_rejects_seqs_that_do_not_fit(seq: int) -> None:
    with pytest.raises(ValueError, match="does not fit 20 digits"):
        segment_key("p", seq)


def test_keys_sort_in_log_order_and_round_trip() -> None:
    seqs = [0, 1, 9, 10, 99, 100, 12345, 10**19, 10**20 - 1]
    keys = [segment_key("shardId-000000000000", s) for s in seqs]
    assert sorted(keys) == keys
    assert [seq_of_key(k) for k in keys] == seqs


@pytest.mark.parametrize(
    "key",
    [
        "events/p/7",
        "events/p/" + "1" * 19,
        "events/p/" + "1" * 21,
        "events/p/0000000000000000000a",
        "events/p/-0000000000000000001",
        "events/p/ 0000000000000000001",
        "events/p/",
        "",
        "events/p/00000000000000000001/",
    ],
)
def test_seq_of_key_rejects_bad_keys(key: str) -> None:
    with pytest.raises(SegmentFormatError, match="not a segment key"):
        seq_of_key(key)


@pytest.mark.parametrize(
    "tail", ["\u0660" * 20, "\u00b2" * 20], ids=["arabic-indic", "superscript"]
)
def test_seq_of_key_rejects_non_ascii_digits(tail: str) -> None:
    with pytest.raises(SegmentFormatError, match="not a segment key"):
        seq_of_key("events/p/" + tail)
