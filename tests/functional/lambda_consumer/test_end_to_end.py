"""End to end on the local runtime: records produced into Kinesis while the stream splits
and merges, ingested by the ingest handler, and delivered to a Lambda consumer group woken
by the partitions table's stream: every record once, each key in produce order."""

from __future__ import annotations

from collections import defaultdict

from shardlog import constants as C
from shardlog.clock import ManualClock
from shardlog.lambda_consumer.settings import LambdaConsumerSettings
from shardlog.local.lambda_consumers import LocalGroup, LocalLambdaConsumers
from shardlog.tables import Tables
from tests.support.lambda_consumers import Recorder
from tests.support.runtime import e2e_runtime, produce_across_split_and_merge


def test_a_lambda_group_gets_every_record_once_in_key_order_across_split_and_merge() -> None:
    runtime = e2e_runtime("lc")
    recorder = Recorder()
    clock = ManualClock()
    with runtime:
        group = LambdaConsumerSettings(group="e2e", function_name="recorder", batch_size=10)
        consumers = LocalLambdaConsumers(
            runtime.clients,
            runtime.config,
            [LocalGroup(group, recorder, "tests:recorder")],
            clock=clock,
        ).start()

        def ingest_and_consume_while_producing() -> None:
            runtime.poller.poll_once()
            consumers.poll_once()

        counts = produce_across_split_and_merge(runtime, between=ingest_and_consume_while_producing)
        total = sum(counts.values())
        tables = Tables(runtime.clients, runtime.config.tables)

        def done() -> bool:
            runtime.shard_sync.sync()
            consumers.poll_once()
            clock.advance(1_000)
            partitions = tables.list_partitions()
            closed = [p for p in partitions if p.state == C.STATE_CLOSED]
            delivered = {(s.partition_id, s.seq) for batch in recorder.calls for s in batch}
            return not closed and len(delivered) == total

        assert runtime.wait_until(done, timeout_s=120)
        partitions = tables.list_partitions()
        assert len(partitions) == 5  # 2 roots, 2 children of the split, 1 of the merge

    firsts: dict[str, list[int]] = defaultdict(list)
    seen: set[tuple[str, int]] = set()
    for batch in recorder.calls:
        for s in batch:
            if (s.partition_id, s.seq) in seen:
                continue
            seen.add((s.partition_id, s.seq))
            key, number = s.data.decode().split(":")
            firsts[key].append(int(number))
    assert {key: len(numbers) for key, numbers in firsts.items()} == counts
    for key, numbers in firsts.items():
        assert numbers == list(range(counts[key])), f"{key} out of order"
    deliveries = sum(len(batch) for batch in recorder.calls)
    assert deliveries == total  # no failure, so no redelivery: exactly once
