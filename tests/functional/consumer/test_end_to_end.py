"""End to end on the local runtime: records produced into Kinesis across a split and a merge,
ingested by the ingest handler (event-source poller, shard sync), then consumed by a group
of two workers: every record once, each key in produce order across the reshards."""

from __future__ import annotations

from collections import defaultdict

from shardlog import constants as C
from shardlog.clock import ManualClock
from shardlog.consumer import Checkpointer, ConsumerSettings, Worker
from shardlog.format import LogRecord
from tests.support.runtime import (
    e2e_runtime,
    produce_across_split_and_merge,
    wait_until_ingested,
)


def test_a_group_consumes_what_ingest_wrote_in_key_order_across_split_and_merge() -> None:
    runtime = e2e_runtime("e2e")
    with runtime:
        counts = produce_across_split_and_merge(runtime)
        total = sum(counts.values())
        tables = wait_until_ingested(runtime, total)
        partitions = tables.list_partitions()
        assert len(partitions) == 5 and sum(p.state == C.STATE_ENDED for p in partitions) == 3

        delivered: dict[str, list[int]] = defaultdict(list)

        def handle(records: list[LogRecord], checkpointer: Checkpointer) -> None:
            for record in records:
                key, number = record.data.decode().split(":")
                delivered[key].append(int(number))
            checkpointer.checkpoint()

        clock = ManualClock()
        settings = ConsumerSettings(take_interval_ms=1, idle_poll_interval_ms=0)
        workers = [
            Worker("e2e", handle, runtime.config, settings=settings, clock=clock, worker_id=w)
            for w in ("w1", "w2")
        ]
        for _ in range(200):
            for worker in workers:
                worker.run_once()
            clock.advance(1)
            leases = {lease.partition_id: lease.checkpoint for lease in tables.list_leases("e2e")}
            done = [
                leases.get(p.partition_id)
                == (C.SHARD_END if p.state == C.STATE_ENDED else str(p.next_seq))
                for p in partitions
            ]
            if all(done):
                break
        for worker in workers:
            worker.shutdown()
    assert all(done), leases
    assert dict(delivered) == {key: list(range(n)) for key, n in counts.items()}
