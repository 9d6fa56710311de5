"""The local event-source mapping keeps Lambda's Kinesis semantics (driven by a manual clock)."""

from __future__ import annotations

from typing import Any

import pytest
from aws_lambda_powertools.utilities.data_classes import KinesisStreamEvent

from shardlog.aws import RequestCounter
from shardlog.clock import ManualClock
from shardlog.local.poller import MIN_SLEEP_S, EventSourcePoller, EventSourceSettings
from tests.support.aws import AwsEnv

SHARD0 = "shardId-000000000000"


class Recorder:
    """A handler that records each invocation and can fail on demand."""

    def __init__(self, fail: Any = None) -> None:
        self.calls: list[tuple[str, list[bytes]]] = []
        self.fail = fail or (lambda _call, _data: None)

    def __call__(self, event: dict[str, Any], context: Any) -> Any:
        parsed = KinesisStreamEvent(event)
        records = list(parsed.records)
        shard = records[0].event_id.split(":")[0]
        data = [r.kinesis.data_as_bytes() for r in records]
        assert context.get_remaining_time_in_millis() > 0
        self.calls.append((shard, data))
        return self.fail(len(self.calls), data)

    def delivered(self, shard: str | None = None) -> list[bytes]:
        return [d for s, batch in self.calls for d in batch if shard in (None, s)]


def _produce(aws: AwsEnv, count: int, hash_key: str = "1", prefix: str = "r") -> list[bytes]:
    data = [f"{prefix}{i}".encode() for i in range(count)]
    aws.clients.kinesis.put_records(
        StreamName=aws.config.stream_name,
        Records=[{"PartitionKey": "k", "Data": d, "ExplicitHashKey": hash_key} for d in data],
    )
    return data


def _poller(aws: AwsEnv, handler: Any, clock: ManualClock, **settings: Any) -> EventSourcePoller:
    options = {"batching_window_ms": 0, "retry_delay_ms": 100, **settings}
    return EventSourcePoller(
        aws.clients,
        aws.config.stream_name,
        handler,
        settings=EventSourceSettings(**options),
        clock=clock,
    )


def _drain(poller: EventSourcePoller, clock: ManualClock, steps: int = 50) -> None:
    for _ in range(steps):
        poller.poll_once()
        clock.advance(100)


def test_event_shape_and_batch_size(aws: AwsEnv, clock: ManualClock) -> None:
    produced = _produce(aws, 25)
    recorder = Recorder()
    _drain(_poller(aws, recorder, clock, batch_size=10), clock)
    assert [len(batch) for _, batch in recorder.calls] == [10, 10, 5]
    assert recorder.delivered() == produced


def test_batching_window_waits_to_fill_a_batch(aws: AwsEnv, clock: ManualClock) -> None:
    _produce(aws, 3)
    recorder = Recorder()
    poller = _poller(aws, recorder, clock, batch_size=10, batching_window_ms=1000)
    poller.poll_once()
    assert recorder.calls == [], "3 < batch size and the window is still open"
    clock.advance(1000)
    poller.poll_once()
    assert len(recorder.calls) == 1 and len(recorder.calls[0][1]) == 3


def test_the_largest_batch_waits_the_longest_window(aws: AwsEnv, clock: ManualClock) -> None:
    """shardlog:ingestBatchingWindowMs's and ingestBatchSize's upper edges: 1,200 records
    wait a whole 300 s for a batch of 10,000, then go in one invocation."""
    produced = []
    for part in range(3):
        produced += _produce(aws, 400, prefix=f"p{part}-")
    recorder = Recorder()
    poller = _poller(aws, recorder, clock, batch_size=10_000, batching_window_ms=300_000)
    poller.poll_once()
    clock.advance(299_999)
    poller.poll_once()
    assert recorder.calls == [], "the window is still open"
    clock.advance(1)
    poller.poll_once()
    assert [len(batch) for _, batch in recorder.calls] == [1200]
    assert recorder.delivered() == produced


def _reads(counter: RequestCounter) -> int:
    return counter.by_operation["kinesis.GetRecords"]


def _produce_everywhere(aws: AwsEnv, prefix: str) -> dict[str, list[bytes]]:
    """One record on every shard (at its starting hash key): every shard has a window."""
    shards = aws.clients.kinesis.list_shards(StreamName=aws.config.stream_name)["Shards"]
    return {
        shard["ShardId"]: _produce(aws, 1, shard["HashKeyRange"]["StartingHashKey"], prefix)
        for shard in shards
    }


def test_an_open_window_reads_its_shard_at_the_interval_and_at_its_end(
    aws: AwsEnv, clock: ManualClock
) -> None:
    """Polled every 50 ms through a 1,000 ms window: each shard is read when its window
    opens, every 250 ms while it is open (is the batch full?) and when it ends, and the batch
    holds every record put before the end, as when it was read at every poll."""
    first = _produce_everywhere(aws, "a")
    recorder = Recorder()
    poller = _poller(
        aws, recorder, clock, batch_size=100, batching_window_ms=1000, window_read_interval_ms=250
    )
    counter = RequestCounter().attach(aws.clients)
    poller.poll_once()  # t = 0: every window opens
    opened = _reads(counter)
    assert opened == len(first)
    later: dict[str, list[bytes]] = {}
    for step in range(1, 20):  # t = 50 .. 950 ms: the windows are open
        clock.advance(50)
        if step == 13:
            later = _produce_everywhere(aws, "b")
        poller.poll_once()
    assert recorder.calls == [], "the windows are open and the batches not full"
    assert _reads(counter) - opened == 3 * len(first)  # at 250, 500 and 750 ms
    clock.advance(50)
    poller.poll_once()  # t = 1,000 ms: each window ends with a read
    assert _reads(counter) - opened == 4 * len(first)
    assert sorted(recorder.calls) == sorted((s, first[s] + later[s]) for s in first)


def test_a_batch_filled_in_an_open_window_goes_at_the_next_look(
    aws: AwsEnv, clock: ManualClock
) -> None:
    """Before its window ends, a full batch is invoked within one interval."""
    produced = _produce(aws, 3)
    recorder = Recorder()
    poller = _poller(
        aws, recorder, clock, batch_size=5, batching_window_ms=1000, window_read_interval_ms=250
    )
    poller.poll_once()
    produced += _produce(aws, 2, prefix="more")  # the batch is full from now on
    clock.advance(249)
    poller.poll_once()
    assert recorder.calls == [], "not looked at again yet"
    clock.advance(1)
    poller.poll_once()
    assert recorder.calls == [(SHARD0, produced)]


def test_run_waits_for_the_next_window_end_or_retry_not_longer(
    aws: AwsEnv, clock: ManualClock
) -> None:
    _produce(aws, 3)

    def fail_once(call: int, _data: list[bytes]) -> None:
        if call == 1:
            raise RuntimeError("transient")

    poller = _poller(aws, Recorder(fail_once), clock, batch_size=10, batching_window_ms=1000)
    assert poller.sleep_s(0.05) == 0.05, "nothing buffered: the idle poll"
    poller.poll_once()
    clock.advance(970)
    assert poller.sleep_s(0.05) == pytest.approx(0.03), "the window ends in 30 ms"
    clock.advance(30)
    poller.poll_once()  # the batch fails: its retry is due in retry_delay_ms (100)
    clock.advance(60)
    assert poller.sleep_s(0.05) == pytest.approx(0.04)
    clock.advance(40)
    assert poller.sleep_s(0.05) == MIN_SLEEP_S, "due now: never a busy loop"


def test_past_the_edges_the_poller_is_refused() -> None:
    for bad in ({"batch_size": 0}, {"batch_size": 10_001}, {"batching_window_ms": 300_001}):
        with pytest.raises(ValueError, match="outside"):
            EventSourceSettings(**bad)  # type: ignore[arg-type]
    assert EventSourceSettings(batch_size=1, batching_window_ms=0).batch_size == 1


def test_failed_batch_is_retried_with_bisect_in_order(aws: AwsEnv, clock: ManualClock) -> None:
    produced = _produce(aws, 8)

    def fail_first(call: int, _data: list[bytes]) -> None:
        if call == 1:
            raise RuntimeError("transient")

    recorder = Recorder(fail_first)
    poller = _poller(aws, recorder, clock, batch_size=8)
    _drain(poller, clock)
    sizes = [len(batch) for _, batch in recorder.calls]
    assert sizes == [8, 4, 4], "bisected after the failure"
    assert [d for _, b in recorder.calls[1:] for d in b] == produced
    assert poller.stats.failures == 1 and poller.stats.records_dropped == 0


def test_partial_batch_response_retries_from_the_first_failure(
    aws: AwsEnv, clock: ManualClock
) -> None:
    produced = _produce(aws, 6)
    sequence_numbers: list[str] = []

    def fail_at_fourth(call: int, data: list[bytes]) -> dict[str, Any]:
        if call == 1:
            return {"batchItemFailures": [{"itemIdentifier": sequence_numbers[3]}]}
        return {"batchItemFailures": []}

    page = aws.clients.kinesis.get_records(
        ShardIterator=aws.clients.kinesis.get_shard_iterator(
            StreamName=aws.config.stream_name, ShardId=SHARD0, ShardIteratorType="TRIM_HORIZON"
        )["ShardIterator"]
    )
    sequence_numbers += [r["SequenceNumber"] for r in page["Records"]]
    recorder = Recorder(fail_at_fourth)
    _drain(_poller(aws, recorder, clock, batch_size=6, bisect_on_error=False), clock)
    assert recorder.calls[1][1] == produced[3:], "retried from the failed record on"


def test_records_past_their_retries_go_to_on_failure(aws: AwsEnv, clock: ManualClock) -> None:
    produced = _produce(aws, 3)
    failed: list[tuple[str, int]] = []

    def poison(_call: int, data: list[bytes]) -> None:
        if b"r1" in data:
            raise RuntimeError("poison")

    recorder = Recorder(poison)
    poller = _poller(aws, recorder, clock, batch_size=1, maximum_retry_attempts=2)
    poller.on_failure = lambda shard, records: failed.append((shard, len(records)))
    _drain(poller, clock)
    assert failed == [(SHARD0, 1)]
    assert [b for _, (b,) in recorder.calls].count(b"r1") == 3, "first try + 2 retries"
    assert produced[2] in recorder.delivered(), "the shard moves on after the poison record"


def test_children_start_only_after_their_parents(aws: AwsEnv, clock: ManualClock) -> None:
    parent_data = _produce(aws, 5, hash_key="1", prefix="p")
    aws.clients.kinesis.split_shard(
        StreamName=aws.config.stream_name, ShardToSplit=SHARD0, NewStartingHashKey="1000"
    )
    child_data = _produce(aws, 5, hash_key="1", prefix="c")
    recorder = Recorder()
    ended: list[str] = []
    poller = _poller(aws, recorder, clock, batch_size=2)
    poller.on_shard_end = ended.append
    _drain(poller, clock)
    order = [shard for shard, _ in recorder.calls]
    children = {"shardId-000000000002", "shardId-000000000003"}
    last_parent_call = max(i for i, shard in enumerate(order) if shard == SHARD0)
    first_child_call = min(i for i, shard in enumerate(order) if shard in children)
    assert last_parent_call < first_child_call
    assert recorder.delivered(SHARD0) == parent_data
    assert [d for d in recorder.delivered() if d.startswith(b"c")] == child_data
    assert ended == [SHARD0]


def test_start_after_resumes_past_a_checkpoint(aws: AwsEnv, clock: ManualClock) -> None:
    produced = _produce(aws, 4)
    first = aws.clients.kinesis.get_records(
        ShardIterator=aws.clients.kinesis.get_shard_iterator(
            StreamName=aws.config.stream_name, ShardId=SHARD0, ShardIteratorType="TRIM_HORIZON"
        )["ShardIterator"]
    )["Records"]
    recorder = Recorder()
    poller = _poller(aws, recorder, clock)
    poller.start_after = lambda shard: first[1]["SequenceNumber"] if shard == SHARD0 else None
    _drain(poller, clock)
    assert recorder.delivered(SHARD0) == produced[2:]
