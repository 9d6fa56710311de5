"""The embedded Kinesis behaves like Kinesis across resharding (plain boto3, over HTTP)."""

from __future__ import annotations

import datetime
import threading
from typing import Any

import moto.core.utils as moto_utils
import pytest
from botocore.exceptions import ClientError

from shardlog.hashing import hash_key
from shardlog.local import kinesis_fidelity
from shardlog.shardsync import list_shards
from tests.support.aws import AwsEnv


def _put(aws: AwsEnv, key: str, data: bytes = b"x", hash_key: str | None = None) -> dict[str, Any]:
    kwargs: dict[str, Any] = {
        "StreamName": aws.config.stream_name,
        "PartitionKey": key,
        "Data": data,
    }
    if hash_key is not None:
        kwargs["ExplicitHashKey"] = hash_key
    return aws.clients.kinesis.put_record(**kwargs)


def _read_all(aws: AwsEnv, shard_id: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    kinesis = aws.clients.kinesis
    iterator = kinesis.get_shard_iterator(
        StreamName=aws.config.stream_name, ShardId=shard_id, ShardIteratorType="TRIM_HORIZON"
    )["ShardIterator"]
    records: list[dict[str, Any]] = []
    for _ in range(100):
        page = kinesis.get_records(ShardIterator=iterator, Limit=1000)
        records += page["Records"]
        if "NextShardIterator" not in page or not page["Records"]:
            return records, page
        iterator = page["NextShardIterator"]
    raise AssertionError("shard never ended")


def _shards(aws: AwsEnv) -> dict[str, dict[str, Any]]:
    return {s["ShardId"]: s for s in list_shards(aws.clients.kinesis, aws.config.stream_name)}


def test_split_keeps_parent_records_and_routes_new_ones_to_children(aws: AwsEnv) -> None:
    parent = "shardId-000000000000"
    before = [_put(aws, "k", f"{i}".encode(), hash_key="5") for i in range(3)]
    assert {r["ShardId"] for r in before} == {parent}
    aws.clients.kinesis.split_shard(
        StreamName=aws.config.stream_name, ShardToSplit=parent, NewStartingHashKey="10"
    )
    after_low = _put(aws, "k", b"low", hash_key="5")
    after_high = _put(aws, "k", b"high", hash_key="10")
    shards = _shards(aws)
    children = [sid for sid, s in shards.items() if s.get("ParentShardId") == parent]
    assert len(children) == 2
    assert after_low["ShardId"] in children and after_high["ShardId"] in children
    assert after_low["ShardId"] != after_high["ShardId"]
    records, last_page = _read_all(aws, parent)
    assert [r["Data"] for r in records] == [b"0", b"1", b"2"], "parent records stay, unrenumbered"
    assert [r["SequenceNumber"] for r in records] == [r["SequenceNumber"] for r in before]
    assert (
        shards[parent]["SequenceNumberRange"]["EndingSequenceNumber"]
        == before[-1]["SequenceNumber"]
    )
    assert "NextShardIterator" not in last_page
    assert sorted(c["ShardId"] for c in last_page["ChildShards"]) == sorted(children)
    assert all(c["ParentShards"] == [parent] for c in last_page["ChildShards"])


def test_merge_does_not_copy_records(aws: AwsEnv) -> None:
    first, second = sorted(_shards(aws))
    low = _put(aws, "a", b"low", hash_key="0")
    high = _put(aws, "b", b"high", hash_key=str(2**128 - 1))
    assert (low["ShardId"], high["ShardId"]) == (first, second)
    aws.clients.kinesis.merge_shards(
        StreamName=aws.config.stream_name, ShardToMerge=first, AdjacentShardToMerge=second
    )
    shards = _shards(aws)
    (child,) = [sid for sid, s in shards.items() if s.get("AdjacentParentShardId")]
    assert (shards[child]["ParentShardId"], shards[child]["AdjacentParentShardId"]) == (
        first,
        second,
    )
    assert _read_all(aws, child)[0] == [], "the child starts empty: no duplicated records"
    assert _put(aws, "c", b"new")["ShardId"] == child
    for parent in (first, second):
        records, page = _read_all(aws, parent)
        assert len(records) == 1 and page["ChildShards"][0]["ShardId"] == child


def test_hash_ranges_are_inclusive_at_both_ends(aws: AwsEnv) -> None:
    shards = sorted(_shards(aws).values(), key=lambda s: int(s["HashKeyRange"]["StartingHashKey"]))
    for shard in shards:
        for edge in ("StartingHashKey", "EndingHashKey"):
            put = _put(aws, "k", hash_key=shard["HashKeyRange"][edge])
            assert put["ShardId"] == shard["ShardId"]


def test_sequence_numbers_are_big_and_increase_across_the_stream(aws: AwsEnv) -> None:
    numbers = [int(_put(aws, f"key-{i}")["SequenceNumber"]) for i in range(20)]
    assert numbers == sorted(numbers) and len(set(numbers)) == 20
    assert all(len(str(n)) == 56 for n in numbers)


def test_records_route_by_md5_of_the_key(aws: AwsEnv) -> None:
    shards = list(_shards(aws).values())
    for i in range(30):
        key = f"user-{i}"
        expected = next(
            s["ShardId"]
            for s in shards
            if int(s["HashKeyRange"]["StartingHashKey"])
            <= hash_key(key)
            <= int(s["HashKeyRange"]["EndingHashKey"])
        )
        assert _put(aws, key)["ShardId"] == expected


def test_concurrent_producers_lose_nothing(aws: AwsEnv) -> None:
    def produce(worker: int) -> None:
        clients = aws.fresh_clients()
        for i in range(25):
            clients.kinesis.put_record(
                StreamName=aws.config.stream_name,
                PartitionKey="same",
                Data=f"{worker}-{i}".encode(),
            )

    threads = [threading.Thread(target=produce, args=(w,)) for w in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    shard_id = _put(aws, "same", b"last")["ShardId"]
    records, _ = _read_all(aws, shard_id)
    numbers = [int(r["SequenceNumber"]) for r in records]
    assert len(records) == 101 and len(set(numbers)) == 101 and numbers == sorted(numbers)


def test_resharding_a_closed_shard_is_refused(aws: AwsEnv) -> None:
    parent = "shardId-000000000000"
    aws.clients.kinesis.split_shard(
        StreamName=aws.config.stream_name, ShardToSplit=parent, NewStartingHashKey="10"
    )
    with pytest.raises(ClientError):
        aws.clients.kinesis.split_shard(
            StreamName=aws.config.stream_name, ShardToSplit=parent, NewStartingHashKey="20"
        )


def _raw(aws: AwsEnv, action: str, body: dict[str, Any]) -> dict[str, Any]:
    """The JSON the embedded Kinesis answers, as the wire carries it (no SDK parsing)."""
    import json
    import urllib.request

    request = urllib.request.Request(
        f"{aws.config.endpoint_url}/",
        data=json.dumps(body).encode(),
        headers={
            "Content-Type": "application/x-amz-json-1.1",
            "X-Amz-Target": f"Kinesis_20131202.{action}",
            "Authorization": "AWS4-HMAC-SHA256 Credential=testing/20261126/us-east-1/kinesis/"
            "aws4_request, SignedHeaders=host, Signature=x",
        },
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        result: dict[str, Any] = json.loads(answer.read())
        return result


def test_get_records_and_put_records_answer_as_kinesis_does(aws: AwsEnv) -> None:
    """PutRecords' and GetRecords' JSON, written directly: Kinesis's members, Data as put
    (base64), the arrival time in epoch seconds at millisecond precision."""
    import base64

    put = _raw(
        aws,
        "PutRecords",
        {
            "StreamName": aws.config.stream_name,
            "Records": [
                {
                    "PartitionKey": "a",
                    "Data": base64.b64encode(b"one").decode(),
                    "ExplicitHashKey": "5",
                },
                {
                    "PartitionKey": "b",
                    "Data": base64.b64encode(b"\x00\xff").decode(),
                    "ExplicitHashKey": "5",
                },
            ],
        },
    )
    assert put["FailedRecordCount"] == 0
    assert [set(r) for r in put["Records"]] == [{"SequenceNumber", "ShardId"}] * 2
    shard_id = put["Records"][0]["ShardId"]
    iterator = aws.clients.kinesis.get_shard_iterator(
        StreamName=aws.config.stream_name, ShardId=shard_id, ShardIteratorType="TRIM_HORIZON"
    )["ShardIterator"]
    got = _raw(aws, "GetRecords", {"ShardIterator": iterator, "Limit": 10})
    assert set(got) == {"Records", "NextShardIterator", "MillisBehindLatest"}
    assert [set(r) for r in got["Records"]] == [
        {"SequenceNumber", "ApproximateArrivalTimestamp", "Data", "PartitionKey"}
    ] * 2
    assert [base64.b64decode(r["Data"]) for r in got["Records"]] == [b"one", b"\x00\xff"]
    assert [r["SequenceNumber"] for r in got["Records"]] == [
        r["SequenceNumber"] for r in put["Records"]
    ]
    stamp = got["Records"][0]["ApproximateArrivalTimestamp"]
    assert isinstance(stamp, int | float) and round(stamp * 1000) == stamp * 1000
    # and the SDK reads it as it reads Kinesis
    parsed = aws.clients.kinesis.get_records(ShardIterator=iterator, Limit=10)["Records"]
    assert [r["Data"] for r in parsed] == [b"one", b"\x00\xff"]
    assert parsed[0]["ApproximateArrivalTimestamp"].timestamp() == pytest.approx(stamp)


def test_get_records_pages_from_any_position_with_a_limit(aws: AwsEnv) -> None:
    """Found by bisection, each page starts right after the last record read, at most Limit
    records, and the last page reads nothing more; AT/AFTER_SEQUENCE_NUMBER start exactly."""
    shard_id = _put(aws, "k", b"0", hash_key="5")["ShardId"]
    numbers = [
        int(_put(aws, "k", f"{i}".encode(), hash_key="5")["SequenceNumber"]) for i in range(1, 12)
    ]
    kinesis = aws.clients.kinesis
    records, _ = _read_all(aws, shard_id)
    assert [r["Data"] for r in records] == [f"{i}".encode() for i in range(12)]
    for kind, at, first in (("AT_SEQUENCE_NUMBER", 3, 4), ("AFTER_SEQUENCE_NUMBER", 3, 5)):
        iterator = kinesis.get_shard_iterator(
            StreamName=aws.config.stream_name,
            ShardId=shard_id,
            ShardIteratorType=kind,
            StartingSequenceNumber=str(numbers[at]),
        )["ShardIterator"]
        pages = []
        for _ in range(10):
            page = kinesis.get_records(ShardIterator=iterator, Limit=3)
            if not page["Records"]:
                break
            pages.append([int(r["Data"]) for r in page["Records"]])
            iterator = page["NextShardIterator"]
        assert pages[0] == [first, first + 1, first + 2]
        assert [d for p in pages for d in p] == list(range(first, 12))
        assert all(len(p) <= 3 for p in pages)


def test_reads_beside_concurrent_puts_see_every_record_once_in_order(aws: AwsEnv) -> None:
    """GetRecords reads a shard while puts append to it (moto iterated the records a put
    changed: 'OrderedDict mutated during iteration')."""
    shard_id = _put(aws, "k", b"-1", hash_key="5")["ShardId"]
    done = threading.Event()

    def produce() -> None:
        clients = aws.fresh_clients()
        for i in range(300):
            clients.kinesis.put_records(
                StreamName=aws.config.stream_name,
                Records=[{"PartitionKey": "k", "Data": f"{i}".encode(), "ExplicitHashKey": "5"}],
            )
        done.set()

    producer = threading.Thread(target=produce)
    producer.start()
    kinesis = aws.fresh_clients().kinesis
    iterator = kinesis.get_shard_iterator(
        StreamName=aws.config.stream_name, ShardId=shard_id, ShardIteratorType="TRIM_HORIZON"
    )["ShardIterator"]
    seen: list[int] = []
    for _ in range(5_000):
        page = kinesis.get_records(ShardIterator=iterator, Limit=7)
        seen += [int(r["Data"]) for r in page["Records"]]
        iterator = page["NextShardIterator"]
        if done.is_set() and not page["Records"] and len(seen) == 301:
            break
    producer.join(timeout=60)
    assert seen == list(range(-1, 300))


@pytest.mark.parametrize(
    "moment",
    [
        datetime.datetime(1970, 1, 1),
        datetime.datetime(2026, 11, 27, 2, 59, 59, 999_999),
        datetime.datetime(2038, 1, 19, 3, 14, 8, 1),
        datetime.datetime(1969, 12, 31, 23, 59, 59, 500_000),
    ],
)
def test_a_records_arrival_time_is_the_same_number_as_motos(moment: datetime.datetime) -> None:
    assert kinesis_fidelity._unix_time(moment) == moto_utils.unix_time(moment)


def test_arrival_times_are_the_put_time(aws: AwsEnv) -> None:
    before = datetime.datetime.now(datetime.UTC).timestamp()
    shard_id = _put(aws, "k")["ShardId"]
    after = datetime.datetime.now(datetime.UTC).timestamp()
    (record,), _ = _read_all(aws, shard_id)
    arrival = record["ApproximateArrivalTimestamp"].timestamp()
    assert before - 0.001 <= arrival <= after + 0.001  # the answer has millisecond precision
