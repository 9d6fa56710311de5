"""The SDK Producer against the embedded Kinesis: batching, per-key order and retries.

Requests are observed with botocore event hooks (never stubbed); failed entries are
injected at the SDK's call seam (tests/support/faults.py): the failed ones are never sent,
the rest really go to the embedded Kinesis.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from shardlog import constants as C
from shardlog.aws import Clients, RequestCounter
from shardlog.clock import ManualClock
from shardlog.exceptions import ProducerError, ValidationError
from shardlog.idempotence import unwrap
from shardlog.outcomes import NOT_SENT, FailureKind, PutResult
from shardlog.producer import Producer
from shardlog.records import ProducerRecord
from shardlog.shardsync import list_shards
from tests.support.aws import AwsEnv
from tests.support.faults import THROTTLED, Entry, FaultyProducer, Picker, entries_where
from tests.support.readback import StreamRecord, read_stream


@dataclass
class Observed:
    """Clients whose PutRecords calls are counted and whose Records params are captured."""

    clients: Clients
    requests: RequestCounter
    calls: list[list[dict[str, Any]]] = field(default_factory=list)

    def capture(self, params: dict[str, Any], **_: Any) -> None:
        self.calls.append(list(params["Records"]))


@pytest.fixture
def observed(aws: AwsEnv) -> Observed:
    # Hooks go on a session before its clients exist: botocore copies the session's
    # event emitter into each client when the client is built.
    clients = aws.fresh_clients()
    spy = Observed(clients, RequestCounter().attach(clients.session))
    clients.session.events.register("before-parameter-build.kinesis.PutRecords", spy.capture)
    return spy


def per_key_order(stream: list[StreamRecord]) -> dict[str, list[bytes]]:
    by_key: dict[str, list[StreamRecord]] = {}
    for record in stream:
        by_key.setdefault(record.partition_key, []).append(record)
    return {
        key: [r.data for r in sorted(records, key=lambda r: int(r.sequence_number))]
        for key, records in by_key.items()
    }


def keyed_records(keys: int, per_key: int) -> list[tuple[str, bytes]]:
    """Interleaved: k0#0, k1#0, ..., k0#1, k1#1, ... with unique data."""
    return [(f"k{k}", f"k{k}#{n}".encode()) for n in range(per_key) for k in range(keys)]


def expected_order(records: list[tuple[str, bytes]]) -> dict[str, list[bytes]]:
    order: dict[str, list[bytes]] = {}
    for key, data in records:
        order.setdefault(key, []).append(data)
    return order


def entry_size(entry: dict[str, Any]) -> int:
    return len(entry["Data"]) + len(entry["PartitionKey"].encode("utf-8"))


def test_1200_records_go_in_calls_of_at_most_500_records_and_5_mib(
    aws: AwsEnv, observed: Observed
) -> None:
    small = [(f"s{i:04d}", b"s" * 10) for i in range(600)]
    large = [(f"l{i:04d}", bytes([i % 256]) * 16 * 1024) for i in range(600)]
    records = small + large
    producer = Producer(aws.config.stream_name, observed.clients, clock=ManualClock())

    results = producer.put_records(records)

    assert producer.calls == len(observed.calls) == 3
    assert observed.requests.by_operation["kinesis.PutRecords"] == 3
    assert [len(call) for call in observed.calls] == [500, 100 + 319, 281]
    assert all(len(call) <= 500 for call in observed.calls)
    assert all(sum(map(entry_size, call)) <= 5 * C.MIB for call in observed.calls)
    assert sum(map(entry_size, observed.calls[1])) > 5 * C.MIB - 16 * 1024  # bytes bound it
    sent = [(e["PartitionKey"], e["Data"]) for call in observed.calls for e in call]
    assert sent == records

    shard_ids = {s["ShardId"] for s in list_shards(aws.clients.kinesis, aws.config.stream_name)}
    assert len(results) == 1200
    assert all(isinstance(r, PutResult) for r in results)
    assert all(r.shard_id in shard_ids and r.sequence_number.isdigit() for r in results)
    stream = read_stream(aws)
    assert len(stream) == 1200
    located = {(r.shard_id, r.sequence_number): (r.partition_key, r.data) for r in stream}
    assert [located[(r.shard_id, r.sequence_number)] for r in results] == records


def test_nothing_is_sent_when_any_record_is_invalid(aws: AwsEnv, observed: Observed) -> None:
    records: list[Any] = [(f"k{i}", b"ok") for i in range(700)]
    records.append(("k" * 257, b"bad"))
    producer = Producer(aws.config.stream_name, observed.clients, clock=ManualClock())

    with pytest.raises(ValidationError) as caught:
        producer.put_records(records)

    assert caught.value.field == "records[700].partitionKey"
    assert producer.calls == 0
    assert observed.requests.by_operation["kinesis.PutRecords"] == 0
    assert read_stream(aws) == []


def test_nothing_is_sent_when_a_producer_record_is_invalid(aws: AwsEnv, observed: Observed) -> None:
    producer = Producer(aws.config.stream_name, observed.clients, clock=ManualClock())
    with pytest.raises(ValidationError):
        producer.put_records([("good", b"ok"), ProducerRecord("k" * 257, b"bad")])
    assert read_stream(aws) == []


def test_record_larger_than_max_batch_bytes_is_sent_alone_or_rejected_up_front(
    aws: AwsEnv, observed: Observed
) -> None:
    producer = Producer(
        aws.config.stream_name, observed.clients, max_batch_bytes=1000, clock=ManualClock()
    )
    records = [("a", b"x" * 10), ("b", b"x" * 2000)]
    try:
        results = producer.put_records(records)
    except ValidationError:
        assert read_stream(aws) == []
    else:
        assert len(results) == 2
        assert sorted(r.data for r in read_stream(aws)) == sorted(d for _, d in records)


def test_one_key_is_never_twice_in_one_call_and_keeps_its_order(
    aws: AwsEnv, observed: Observed
) -> None:
    records = keyed_records(keys=5, per_key=20)
    records += [("solo", b"solo#0"), ("k0", b"k0#20"), ("k0", b"k0#21")]
    producer = Producer(aws.config.stream_name, observed.clients, clock=ManualClock())

    results = producer.put_records(records)

    assert len(observed.calls) >= 22  # k0 has 22 records, at most one per call
    for call in observed.calls:
        keys = [entry["PartitionKey"] for entry in call]
        assert len(keys) == len(set(keys)), keys
    assert per_key_order(read_stream(aws)) == expected_order(records)
    for key in expected_order(records):
        numbers = [
            int(r.sequence_number) for r, (k, _) in zip(results, records, strict=True) if k == key
        ]
        assert numbers == sorted(numbers)


def test_max_batch_records_bounds_each_call(aws: AwsEnv, observed: Observed) -> None:
    records = [(f"k{i}", b"x") for i in range(25)]
    producer = Producer(
        aws.config.stream_name, observed.clients, max_batch_records=10, clock=ManualClock()
    )
    producer.put_records(records)
    assert [len(call) for call in observed.calls] == [10, 10, 5]


# --- retries of failed entries ------------------------------------------------------------


class TopOfJitter(random.Random):
    """Backoff jitter that always takes the cap, so the sleeps show the exponential bound."""

    def uniform(self, a: float, b: float) -> float:
        return b


def second_half_of_the_first(calls: int) -> Picker:
    """Kinesis fails the second half of the entries of the first ``calls`` calls."""
    remaining = [calls]

    def pick(entries: Sequence[Entry]) -> range:
        if remaining[0] <= 0:
            return range(0)
        remaining[0] -= 1
        return range(len(entries) // 2, len(entries))

    return pick


def test_failed_entries_are_retried_exactly_once_in_key_order(
    aws: AwsEnv, observed: Observed, clock: ManualClock
) -> None:
    records = keyed_records(keys=6, per_key=10)
    producer = FaultyProducer(
        aws.config.stream_name, observed.clients, fail=second_half_of_the_first(3), clock=clock
    )

    results = producer.put_records(records)

    assert len(producer.injected) >= 9  # three calls of 6 records, half of each failed
    assert len(clock.slept) == 3
    assert all(0 <= s <= producer.max_backoff_s for s in clock.slept)
    assert len(results) == len(records)
    stream = read_stream(aws)
    assert Counter((r.partition_key, r.data) for r in stream) == Counter(records)
    assert max(Counter((r.partition_key, r.data) for r in stream).values()) == 1
    assert per_key_order(stream) == expected_order(records)
    assert observed.requests.by_operation["kinesis.PutRecords"] == producer.calls


def test_backoff_grows_while_the_same_entry_keeps_failing(
    aws: AwsEnv, observed: Observed, clock: ManualClock
) -> None:
    producer = FaultyProducer(
        aws.config.stream_name,
        observed.clients,
        fail=second_half_of_the_first(4),
        max_attempts=5,
        base_backoff_s=0.05,
        max_backoff_s=0.3,
        clock=clock,
        rng=TopOfJitter(),
    )
    start = clock.now_ms()

    results = producer.put_records([("a", b"a#0"), ("b", b"b#0")])

    # "b" failed on attempts 1..4: the cap doubles from 0.05 s until max_backoff_s.
    assert clock.slept == [0.05, 0.1, 0.2, 0.3]
    assert clock.now_ms() - start == 650
    assert len(results) == 2
    assert sorted(r.data for r in read_stream(aws)) == [b"a#0", b"b#0"]


def test_persistent_failure_raises_with_unsent_records_in_order(
    aws: AwsEnv, observed: Observed, clock: ManualClock
) -> None:
    records = [("k0", b"k0a"), ("k1", b"k1a"), ("k2", b"k2a")]
    records += [("k0", b"k0b"), ("k1", b"k1b"), ("k2", b"k2b")]
    producer = FaultyProducer(
        aws.config.stream_name,
        observed.clients,
        fail=second_half_of_the_first(99),
        max_attempts=2,
        clock=clock,
    )

    with pytest.raises(ProducerError) as caught:
        producer.put_records(records)

    error = caught.value
    # Call 1 holds k0a, k1a, k2a and really sends k0a; call 2 holds k1a, k2a, k0b and
    # really sends k1a; k2a then failed its second attempt.
    assert [(r.partition_key, r.data) for r in error.unsent] == records[2:]
    # k2a ended the put; k0b was in flight with it; k1b and k2b were held back.
    assert [getattr(o, "error_code", "put") for o in error.outcomes] == [
        "put", "put", THROTTLED, THROTTLED, NOT_SENT, NOT_SENT,
    ]  # fmt: skip
    assert all(o.kind is not FailureKind.UNKNOWN for o in error.outcomes[2:])  # type: ignore[union-attr]
    assert error.aws_error_code == THROTTLED
    assert "'k2'" in str(error) and "after 2 attempts" in str(error)
    sent = [r for r in error.results if r is not None]
    assert [i for i, r in enumerate(error.results) if r is not None] == [0, 1]
    assert len(clock.slept) == 1
    stream = read_stream(aws)
    assert sorted(r.data for r in stream) == [b"k0a", b"k1a"]
    located = {(r.shard_id, r.sequence_number): r.data for r in stream}
    assert [located[(r.shard_id, r.sequence_number)] for r in sent] == [b"k0a", b"k1a"]


def test_aws_fixture_request_counter_counts_requests_through_aws_clients(aws: AwsEnv) -> None:
    aws.clients.kinesis.put_record(StreamName=aws.config.stream_name, PartitionKey="k", Data=b"x")
    assert aws.requests.by_operation["kinesis.PutRecord"] == 1


def test_the_error_names_the_record_that_stopped_the_put_not_one_held_back(
    aws: AwsEnv, observed: Observed, clock: ManualClock
) -> None:
    # a1 waits for a0 (one record of a key per call); b0 is refused in the first call.
    producer = FaultyProducer(
        aws.config.stream_name,
        observed.clients,
        fail=entries_where(lambda entry: entry.partition_key == "b"),
        code="InvalidArgumentException",
        clock=clock,
    )

    with pytest.raises(ProducerError) as caught:
        producer.put_records([("a", b"a0"), ("a", b"a1"), ("b", b"b0")])

    error = caught.value
    assert [getattr(o, "error_code", "put") for o in error.outcomes] == [
        "put", NOT_SENT, "InvalidArgumentException",
    ]  # fmt: skip
    assert error.aws_error_code == "InvalidArgumentException"
    assert "key 'b'" in str(error) and "2 of 3" in str(error)
    assert clock.slept == []  # invalid: never retried
    assert [r.data for r in read_stream(aws)] == [b"a0"]


def test_records_with_their_own_ids_go_in_wrapped_and_come_back_whole(
    aws: AwsEnv, observed: Observed
) -> None:
    producer = Producer(aws.config.stream_name, observed.clients)
    results = producer.put_records(
        [
            ProducerRecord("k", b"one", record_id="id-1"),
            ("k", b"plain"),
            ("k", b"two", None, "id-2"),
        ]
    )
    assert len(results) == 3
    assert [unwrap(r.data) for r in read_stream(aws)] == [
        ("id-1", b"one"), (None, b"plain"), ("id-2", b"two"),
    ]  # fmt: skip
