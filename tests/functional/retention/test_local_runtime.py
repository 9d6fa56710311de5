"""`shardlog local up` with record retention: the runtime declares the bucket's expiry rule
and trims on its own clock, then expires as S3's lifecycle would."""

from __future__ import annotations

import pytest

from shardlog.clock import ManualClock, SystemClock
from shardlog.dal.consumers import WatermarkItems
from shardlog.exceptions import TrimmedError
from shardlog.local.lifecycle import rules
from shardlog.producer import Producer
from shardlog.reader import LogReader
from shardlog.records import ProducerRecord
from shardlog.retention import DAY_MS, RetentionPolicy, expiry_rule
from shardlog.tables import Tables
from tests.support.runtime import e2e_runtime


def test_local_up_trims_on_its_clock_what_the_lake_and_groups_have() -> None:
    clock = ManualClock(SystemClock().now_ms())
    runtime = e2e_runtime("trim", api_port=None, clock=clock, retention=RetentionPolicy(days=7))
    with runtime:
        assert expiry_rule(7) in rules(runtime.clients, runtime.config.bucket)
        Producer(runtime.config.stream_name, runtime.clients).put_records(
            [ProducerRecord("k", f"{i}".encode()) for i in range(10)]
        )
        assert runtime.wait_until(lambda: runtime.committed_records() == 10, timeout_s=60)
        partitions = Tables(runtime.clients, runtime.config.tables).list_partitions()
        mirror = WatermarkItems(runtime.clients, runtime.config.tables.consumers)
        for partition in partitions:  # the lake holds all of it
            mirror.write_checkpoint(mirror.read(partition.partition_id), str(partition.next_seq))

        assert runtime.trim_once()[1] == []  # nothing is a week old yet
        clock.advance(8 * DAY_MS)
        trims, expired = runtime.trim_once()

        heads = {p.partition_id: p.next_seq for p in partitions}
        assert {t.partition_id: t.horizon for t in trims} == heads
        assert len(expired) == sum(p.segment_count for p in partitions)
        reader = LogReader(runtime.clients, runtime.config.bucket, runtime.config.tables)
        (busy,) = [p for p, head in heads.items() if head]
        with pytest.raises(TrimmedError, match="trimmed below seq 10"):
            list(reader.records(busy, 0))
