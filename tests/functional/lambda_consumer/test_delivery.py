"""Lambda consumer groups on the embedded AWS: delivery in order, waking, retries, bisect,
partial batch responses, the on-failure destination, start positions, parents first."""

from __future__ import annotations

import json
from typing import Any

import pytest

from shardlog import constants as C
from shardlog.clock import ManualClock
from shardlog.tables import Tables
from tests.functional.lambda_consumer.conftest import Start
from tests.support.aws import AwsEnv
from tests.support.factories import append, end_partition, incoming_records, register_partition
from tests.support.lambda_consumers import Recorder, Seen, drive, received

P, Q = "shardId-000000000000", "shardId-000000000001"


def checkpoint(aws: AwsEnv, group: str, partition_id: str) -> str | None:
    lease = Tables(aws.clients, aws.config.tables).get_lease(group, partition_id)
    return lease.checkpoint if lease else None


def test_every_committed_record_is_delivered_once_in_order_per_partition(
    aws: AwsEnv, clock: ManualClock, start_group: Start
) -> None:
    recorder = Recorder()
    group = start_group(recorder, batch_size=4)
    append(aws, P, incoming_records(10, start=0), segment_max_records=3)
    append(aws, Q, incoming_records(6, start=100), segment_max_records=5)
    drive(group, clock)
    assert recorder.seqs(P) == list(range(10))
    assert recorder.seqs(Q) == list(range(6))
    assert all(len(batch) <= 4 for batch in recorder.calls)
    assert all(len({s.partition_id for s in batch}) == 1 for batch in recorder.calls)
    assert (checkpoint(aws, "billing", P), checkpoint(aws, "billing", Q)) == ("10", "6")


def test_new_commits_wake_the_group_through_the_partitions_stream(
    aws: AwsEnv, clock: ManualClock, start_group: Start
) -> None:
    recorder = Recorder()
    group = start_group(recorder, batch_size=100)
    append(aws, P, incoming_records(3, start=0))
    drive(group, clock)
    assert recorder.seqs(P) == [0, 1, 2]
    group.sweep_interval_ms = 10**9  # only the stream may wake it now
    append(aws, P, incoming_records(2, start=3))
    drive(group, clock)
    assert recorder.seqs(P) == [0, 1, 2, 3, 4]
    assert group.stream is not None and group.stream.invocations >= 2


def test_a_poison_record_is_retried_bisected_and_sent_to_the_on_failure_destination(
    aws: AwsEnv, clock: ManualClock, start_group: Start
) -> None:
    def answer(batch: list[Seen]) -> Any:
        if any(s.seq == 5 for s in batch):
            raise ValueError("poison")
        return None

    recorder = Recorder(answer)
    group = start_group(recorder, batch_size=8, maximum_retry_attempts=2)
    append(aws, P, incoming_records(12, start=0), segment_max_records=4)
    drive(group, clock)
    succeeded = [
        s.seq for batch in recorder.calls if not any(x.seq == 5 for x in batch) for s in batch
    ]
    assert sorted(set(succeeded)) == [s for s in range(12) if s != 5]  # the group moved on
    sizes = [len(batch) for batch in recorder.calls if any(s.seq == 5 for s in batch)]
    assert sizes[:3] == [8, 4, 2] and sizes[-3:] == [1, 1, 1]  # bisected, then 1 + 2 retries
    [failure] = [json.loads(b) for b in received(aws, group.failure_queues["billing"])]
    info = failure["shardlogBatchInfo"]
    assert (info["partitionId"], info["startSequenceNumber"], info["endSequenceNumber"]) == (
        P,
        5,
        5,
    )
    assert failure["requestContext"]["condition"] == "RetryAttemptsExhausted"
    assert failure["requestContext"]["approximateInvokeCount"] == 3
    assert info["replay"] == f"shardlog read --partition {P} --from-seq 5 --to-seq 6"
    assert checkpoint(aws, "billing", P) == "12"


def test_a_partial_batch_response_checkpoints_before_the_first_failed_record(
    aws: AwsEnv, clock: ManualClock, start_group: Start
) -> None:
    failed_once: set[int] = set()

    def answer(batch: list[Seen]) -> Any:
        if 5 in {s.seq for s in batch} and 5 not in failed_once:
            failed_once.add(5)
            return {"batchItemFailures": [{"itemIdentifier": "7"}, {"itemIdentifier": "5"}]}
        return {"batchItemFailures": []}

    recorder = Recorder(answer)
    group = start_group(recorder, batch_size=8, bisect_batch_on_function_error=False)
    append(aws, P, incoming_records(8, start=0))
    drive(group, clock)
    assert [[s.seq for s in batch] for batch in recorder.calls] == [list(range(8)), [5, 6, 7]]
    assert checkpoint(aws, "billing", P) == "8"


@pytest.mark.parametrize(
    ("result", "log_line"),
    [
        (
            lambda _batch: {"batchItemFailures": [{"itemIdentifier": "99"}]},
            "not a record of the batch",
        ),
        (lambda _batch: {"batchItemFailures": [{"id": "1"}]}, "has no itemIdentifier"),
        (lambda _batch: {1, 2}, "Runtime.MarshalError"),
    ],
    ids=["unknown-identifier", "missing-identifier", "not-json"],
)
def test_a_malformed_answer_fails_the_whole_batch_with_a_clear_log_line(
    aws: AwsEnv,
    clock: ManualClock,
    start_group: Start,
    caplog: pytest.LogCaptureFixture,
    result: Any,
    log_line: str,
) -> None:
    recorder = Recorder(result)
    group = start_group(
        recorder, batch_size=10, maximum_retry_attempts=0, bisect_batch_on_function_error=False
    )
    append(aws, P, incoming_records(3, start=0))
    drive(group, clock)
    assert [len(b) for b in recorder.calls] == [3]
    assert any(log_line in r.getMessage() for r in caplog.records), caplog.text
    assert len(received(aws, group.failure_queues["billing"])) == 1


def test_records_past_the_maximum_age_go_to_the_destination_uninvoked(
    aws: AwsEnv, clock: ManualClock, start_group: Start
) -> None:
    recorder = Recorder()
    group = start_group(recorder, maximum_record_age_s=60)
    old = incoming_records(3, start=0, arrival_ms=clock.now_ms() - 120_000)
    fresh = incoming_records(2, start=3, arrival_ms=clock.now_ms())
    append(aws, P, old + fresh)
    drive(group, clock)
    assert recorder.seqs(P) == [3, 4]
    [failure] = [json.loads(b) for b in received(aws, group.failure_queues["billing"])]
    assert failure["requestContext"]["condition"] == "RecordAgeExceeded"
    assert (
        failure["shardlogBatchInfo"]["startSequenceNumber"],
        failure["shardlogBatchInfo"]["endSequenceNumber"],
    ) == (0, 2)


def test_latest_delivers_what_arrived_after_the_group_was_created(
    aws: AwsEnv, clock: ManualClock, start_group: Start
) -> None:
    append(aws, P, incoming_records(4, start=0, arrival_ms=clock.now_ms() - 10_000))
    recorder = Recorder()
    group = start_group(recorder, starting_position="LATEST")
    drive(group, clock)
    assert recorder.calls == []
    append(aws, P, incoming_records(3, start=4, arrival_ms=clock.now_ms() + 1))
    drive(group, clock)
    assert recorder.seqs(P) == [4, 5, 6]


def test_parents_first_then_shard_end_wakes_the_children(
    aws: AwsEnv, clock: ManualClock, start_group: Start
) -> None:
    register_partition(aws, "parent", ())
    for child in ("left", "right"):
        register_partition(aws, child, ("parent",))
    append(aws, "parent", incoming_records(5, start=0, keys=["a", "b"]))
    append(aws, "left", incoming_records(3, start=5, keys=["a"]))
    append(aws, "right", incoming_records(3, start=8, keys=["b"]))
    recorder = Recorder()
    group = start_group(recorder, batch_size=2)
    group.sweep_interval_ms = 10**9  # no sweep: the children wait for their parent's wake
    drive(group, clock)
    assert recorder.seqs("parent") == [0, 1, 2, 3, 4]
    assert recorder.seqs("left") == recorder.seqs("right") == []  # the parent is not ENDED
    end_partition(aws, "parent")  # the stream wakes the group: SHARD_END, then the children
    drive(group, clock)
    assert checkpoint(aws, "billing", "parent") == C.SHARD_END
    assert recorder.seqs("left") == [0, 1, 2] and recorder.seqs("right") == [0, 1, 2]
    order = [s.partition_id for batch in recorder.calls for s in batch]
    assert order.index("left") > order.index("parent") and max(
        i for i, p in enumerate(order) if p == "parent"
    ) < min(i for i, p in enumerate(order) if p != "parent")
    for key in ("a", "b"):  # each key in produce order across the split
        data = [s.data for batch in recorder.calls for s in batch if s.key == key]
        numbers = [int(d.decode().split(":")[1]) for d in data]
        assert numbers == sorted(numbers)


def test_the_sweep_wakes_a_group_whose_wake_was_lost(
    aws: AwsEnv, clock: ManualClock, start_group: Start
) -> None:
    recorder = Recorder()
    group = start_group(recorder)
    group.sweep_interval_ms = 60_000
    append(aws, P, incoming_records(3, start=0))
    # Lose the commit's wake: drop the stream's records and purge the wake queue.
    assert group.stream is not None
    group.stream.poll_once()
    aws.clients.client("sqs").purge_queue(QueueUrl=group.wake_queues["billing"])
    group.poll_once()  # the first poll sweeps at once
    assert recorder.seqs(P) in ([], [0, 1, 2])
    clock.advance(60_000)
    drive(group, clock)
    assert recorder.seqs(P) == [0, 1, 2]
