"""The local runtime in end-to-end tests: fresh resource names, traffic produced with the
SDK across a split and a merge (each key's records carry their per-key counter), and the
wait until ingest has committed all of it."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from typing import Any

from shardlog import constants as C
from shardlog.config import ShardlogConfig
from shardlog.local.demo import reshard
from shardlog.local.poller import EventSourceSettings
from shardlog.local.runtime import LocalRuntime
from shardlog.producer import Producer
from shardlog.records import ProducerRecord
from shardlog.tables import Tables

KEYS = [f"user-{i}" for i in range(12)]


def e2e_runtime(prefix: str, **options: Any) -> LocalRuntime:
    """A LocalRuntime with unique names, 2 shards, small segments, no batching window."""
    suffix = uuid.uuid4().hex[:8]
    config = ShardlogConfig(
        stream_name=f"{prefix}-{suffix}",
        bucket=f"shardlog-{prefix}-{suffix}",
        partitions_table=f"{prefix}-partitions-{suffix}",
        consumers_table=f"{prefix}-consumers-{suffix}",
    )
    defaults: dict[str, Any] = {
        "shard_count": 2,
        "segment_max_records": 7,
        "event_source": EventSourceSettings(batch_size=25, batching_window_ms=0),
    }
    return LocalRuntime(config, **{**defaults, **options})


def produce_across_split_and_merge(
    runtime: LocalRuntime,
    keys: Sequence[str] = KEYS,
    per_step: int = 120,
    between: Callable[[], object] = lambda: None,
) -> dict[str, int]:
    """Three rounds of ``per_step`` records over ``keys`` (data ``<key>:<n>``, n counting
    per key), a split after the first and a merge after the second; ``between`` runs after
    each round. Returns how many records each key got."""
    counts = dict.fromkeys(keys, 0)
    producer = Producer(runtime.config.stream_name, runtime.clients)
    for step in ("split", "merge", None):
        batch = []
        for i in range(per_step):
            key = keys[i % len(keys)]
            batch.append(ProducerRecord(key, f"{key}:{counts[key]}".encode()))
            counts[key] += 1
        producer.put_records(batch)
        between()
        if step:
            reshard(runtime.clients.kinesis, runtime.config.stream_name, step)
    return counts


def wait_until_ingested(runtime: LocalRuntime, total: int, timeout_s: float = 60) -> Tables:
    """Run shard sync until no partition is CLOSED (every closed one ended) and the log
    holds ``total`` records; the tables to read it with. Fails after ``timeout_s``."""
    tables = Tables(runtime.clients, runtime.config.tables)

    def ingested() -> bool:
        runtime.shard_sync.sync()
        partitions = tables.list_partitions()
        closed = [p for p in partitions if p.state == C.STATE_CLOSED]
        return not closed and sum(p.next_seq for p in partitions) == total

    assert runtime.wait_until(ingested, timeout_s=timeout_s), f"not all {total} records ingested"
    return tables
