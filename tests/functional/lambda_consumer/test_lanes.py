"""Lambda consumer groups with a parallelization factor above 1: records of a partition in
lanes by partition key, up to ``factor`` invocations in flight at once, each key in order,
the checkpoint the lowest seq not delivered over the lanes, a failing lane retried, bisected
and given up on by itself."""

from __future__ import annotations

import json
import threading
from collections import defaultdict
from typing import Any

import pytest

from shardlog import constants as C
from shardlog.clock import ManualClock
from shardlog.format import IncomingRecord
from shardlog.lambda_consumer.lanes import lane_of
from shardlog.lambda_consumer.runner import Outcome
from shardlog.lambda_consumer.settings import LambdaConsumerSettings
from shardlog.local.lambda_consumers import LocalGroup, LocalLambdaConsumers
from shardlog.tables import Tables, consumer_key
from tests.support import powertools_consumer, powertools_sink
from tests.support.aws import AwsEnv
from tests.support.factories import append, end_partition, incoming_records, register_partition
from tests.support.lambda_consumers import Recorder, Seen, drive, received, runner_for

P = "shardId-000000000000"


def key_in(lane: int, factor: int, *, skip: int = 0) -> str:
    found = (f"key-{i}" for i in range(1_000) if lane_of(f"key-{i}", factor) == lane)
    for _ in range(skip):
        next(found)
    return next(found)


class Producer:
    """Records whose data is ``<key>:<n>``, n counting each key's records in produce order."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = defaultdict(int)

    def records(self, keys: list[str]) -> list[IncomingRecord]:
        out = []
        for template, key in zip(incoming_records(len(keys)), keys, strict=True):
            data = f"{key}:{self.counts[key]}".encode()
            self.counts[key] += 1
            out.append(IncomingRecord(key, data, template.kinesis_sequence_number, template[3]))
        return out


def in_produce_order(data: list[bytes]) -> dict[str, list[int]]:
    """Each key's numbers in the order first processed."""
    firsts: dict[str, list[int]] = defaultdict(list)
    for item in dict.fromkeys(data):  # first occurrences, in order
        key, number = item.decode().split(":")
        firsts[key].append(int(number))
    return firsts


def stored_checkpoint(aws: AwsEnv, group: str, partition_id: str) -> str | None:
    lease = Tables(aws.clients, aws.config.tables).get_lease(group, partition_id)
    return lease.checkpoint if lease else None


def test_a_powertools_handler_at_factor_4_gets_every_record_across_a_split_and_a_merge(
    aws: AwsEnv, clock: ManualClock
) -> None:
    keys = [f"user-{i}" for i in range(12)]
    assert {lane_of(k, 4) for k in keys} == {0, 1, 2, 3}
    left, right = keys[::2], keys[1::2]  # the split sends each key to one child
    producer = Producer()
    register_partition(aws, "root", ())
    for child in ("left", "right"):
        register_partition(aws, child, ("root",))
    register_partition(aws, "merged", ("left", "right"))
    append(aws, "root", producer.records(keys * 3))
    append(aws, "left", producer.records(left * 2))
    append(aws, "right", producer.records(right * 2))
    append(aws, "merged", producer.records(keys))
    for ended in ("root", "left", "right"):
        end_partition(aws, ended)
    poison = b"user-5:1"  # in the root partition
    powertools_sink.reset(poison)
    settings = LambdaConsumerSettings(
        group="billing",
        function_name="powertools",
        batch_size=3,
        maximum_retry_attempts=1,
        parallelization_factor=4,
    )
    function = LocalGroup(settings, powertools_consumer.handler, "tests:powertools")
    group = LocalLambdaConsumers(aws.clients, aws.config, [function], clock=clock).start()
    drive(group, clock, max_steps=400)

    everything = {f"{k}:{n}".encode() for k, count in producer.counts.items() for n in range(count)}
    assert set(powertools_sink.processed) == everything - {poison}
    for key, numbers in in_produce_order(powertools_sink.processed).items():
        # each key in produce order, across the split and the merge
        expected = [n for n in range(producer.counts[key]) if f"{key}:{n}".encode() != poison]
        assert numbers == expected, key
    [failure] = [json.loads(b) for b in received(aws, group.failure_queues["billing"])]
    info = failure["shardlogBatchInfo"]
    poison_seq = (keys * 3).index("user-5", 12)  # its second record in the root
    assert (info["partitionId"], info["startSequenceNumber"], info["batchSize"]) == (
        "root",
        poison_seq,
        1,
    )
    assert failure["requestContext"]["condition"] == "RetryAttemptsExhausted"
    for ended in ("root", "left", "right"):
        assert stored_checkpoint(aws, "billing", ended) == C.SHARD_END
    assert stored_checkpoint(aws, "billing", "merged") == str(len(keys))


@pytest.mark.parametrize("factor", [4, 10])
def test_up_to_factor_invocations_are_in_flight_at_once(
    aws: AwsEnv, clock: ManualClock, factor: int
) -> None:
    keys = [key_in(lane, factor) for lane in range(factor)]
    append(aws, P, Producer().records(keys * 2))
    together = threading.Barrier(factor, timeout=30)
    lock = threading.Lock()
    active = [0, 0]  # now, most

    def answer(batch: list[Seen]) -> Any:
        with lock:
            active[0] += 1
            active[1] = max(active)
            first_round = len(recorder.calls) <= factor
        try:
            if first_round:  # passes only when every lane's first batch is in flight at once
                together.wait()
        finally:
            with lock:
                active[0] -= 1
        return None

    recorder = Recorder(answer)
    runner, _ = runner_for(aws, clock, recorder, batch_size=1, parallelization_factor=factor)
    report = runner.run(P, request_id="r1", remaining_ms=lambda: 900_000)
    assert (report.outcome, report.failed_invocations, report.delivered) == (
        Outcome.CAUGHT_UP,
        0,
        2 * factor,
    )
    assert active[1] == factor
    for batch in recorder.calls:  # a batch holds one lane's records, in log order
        assert len({lane_of(s.key, factor) for s in batch}) == 1
    assert stored_checkpoint(aws, "billing", P) == str(2 * factor)


def test_a_failing_lane_holds_the_checkpoint_while_the_other_lanes_deliver(
    aws: AwsEnv, clock: ManualClock
) -> None:
    stuck, free = key_in(0, 2), key_in(1, 2)
    append(aws, P, Producer().records([stuck] + [free] * 8 + [stuck]))
    succeeded: set[int] = set()
    passed: list[tuple[str | None, int]] = []  # the stored checkpoint past a record not done
    fail_stuck = [True]

    def answer(batch: list[Seen]) -> Any:
        # The checkpoint first: another lane may succeed (and the runner store a checkpoint
        # past it) while this one reads; read in the other order, that lane's success would
        # look like a checkpoint past a record not done.
        checkpoint = stored_checkpoint(aws, "billing", P)
        lowest_not_done = min(set(range(10)) - succeeded, default=10)
        if checkpoint is not None and int(checkpoint) > lowest_not_done:
            passed.append((checkpoint, lowest_not_done))
        if fail_stuck[0] and batch[0].key == stuck:
            raise RuntimeError("the stuck lane's function fails")
        succeeded.update(s.seq for s in batch)
        return None

    recorder = Recorder(answer)
    runner, _ = runner_for(
        aws,
        clock,
        recorder,
        batch_size=2,
        parallelization_factor=2,
        bisect_batch_on_function_error=False,
        maximum_retry_attempts=-1,
        retry_base_delay_ms=60_000,
        retry_max_delay_ms=60_000,
    )
    report = runner.run(P, request_id="r1", remaining_ms=lambda: 100_000)
    # The free lane delivered all its records; the stuck one waits out its backoff past the
    # runner's time, so the runner stops with the checkpoint at the stuck lane's record.
    assert report.outcome is Outcome.STOPPED
    assert succeeded == set(range(1, 9))
    assert passed == []
    assert stored_checkpoint(aws, "billing", P) == "0"
    item = aws.clients.dynamodb.get_item(
        TableName=aws.config.consumers_table, Key=consumer_key("billing", P), ConsistentRead=True
    )["Item"]
    lanes = item[C.ATTR_LANE_PROGRESS]["M"]
    assert lanes["factor"] == {"N": "2"}
    assert lanes["lanes"]["M"]["0"]["M"]["retry"]["M"]["start"] == {"N": "0"}
    assert C.ATTR_RETRY_START not in item  # factor 2 keeps it per lane only

    fail_stuck[0] = False
    clock.advance(60_000)
    before = len(recorder.calls)
    report = runner.run(P, request_id="r2", remaining_ms=lambda: 900_000)
    assert report.outcome is Outcome.CAUGHT_UP and passed == []
    assert stored_checkpoint(aws, "billing", P) == "10"
    again = [s.seq for b in recorder.calls[before:] for s in b]
    # From the checkpoint: the stuck lane resumes its retry, the free lane (no progress of
    # its own past the checkpoint) delivers its records again, at least once.
    assert sorted(again) == list(range(10))
    order = in_produce_order([s.data for b in recorder.calls for s in b])
    assert order == {stuck: [0, 1], free: list(range(8))}
