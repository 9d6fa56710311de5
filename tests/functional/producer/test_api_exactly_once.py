"""Property: every record the API answered with a sequence number is in the S3 log after
ingest exactly once, in its key's order, and no record it answered with an error is.

One LocalRuntime (embedded AWS, ingest handler, producer API over HTTP) for the module;
hypothesis sends random batches through ApiClient while Kinesis fails a random subset of
entries (injected at the SDK's call seam, tests/support/faults.py: those entries are
reported failed and never sent), and
after each batch the poller is driven until ingest has caught up.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lambdas.producer_api.handler import create_handler
from shardlog.api_client import ApiClient
from shardlog.clock import ManualClock
from shardlog.function_settings import ProducerApiSettings
from shardlog.local.poller import EventSourceSettings
from shardlog.local.runtime import LocalRuntime
from shardlog.outcomes import PutFailure, PutResult
from shardlog.reader import LogReader
from shardlog.tables import Tables
from tests.support.aws import unique_config
from tests.support.faults import Entry, FaultyProducer

KEYS = [f"user-{i}" for i in range(6)]


class Failing:
    """The payloads Kinesis keeps failing (at every attempt) in the current example."""

    payloads: frozenset[bytes] = frozenset()

    def pick(self, entries: Sequence[Entry]) -> list[int]:
        return [i for i, entry in enumerate(entries) if entry.data in self.payloads]


@dataclass
class World:
    runtime: LocalRuntime
    client: ApiClient
    failing: Failing
    reader: LogReader
    counter: Iterator[int] = field(default_factory=itertools.count)
    acknowledged: list[tuple[str, str, str, bytes]] = field(default_factory=list)
    refused: set[bytes] = field(default_factory=set)


@pytest.fixture(scope="module")
def world() -> Iterator[World]:
    runtime = LocalRuntime(
        unique_config(),
        shard_count=2,
        api_port=0,
        event_source=EventSourceSettings(batching_window_ms=0),
    )
    with runtime:
        assert runtime.api is not None
        clock = ManualClock()
        failing = Failing()
        producer = FaultyProducer(
            runtime.config.stream_name,
            runtime.config.clients(),
            fail=failing.pick,
            max_attempts=3,
            clock=clock,
        )
        settings_ = ProducerApiSettings(stream_name=runtime.config.stream_name)
        runtime.api.handler = create_handler(settings_, producer=producer)
        client = ApiClient(runtime.config.extra["apiUrl"], clock=clock)
        reader = LogReader(runtime.clients, runtime.config.bucket, runtime.config.tables)
        yield World(runtime, client, failing, reader)


batches = st.lists(
    # (key, payload, whether Kinesis keeps failing it): about one entry in ten fails.
    st.tuples(
        st.sampled_from(KEYS), st.binary(max_size=48), st.integers(0, 9).map(lambda n: n == 0)
    ),
    min_size=5,
    max_size=60,
)


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(batch=batches)
def test_acknowledged_records_are_in_the_log_exactly_once(
    world: World, batch: list[tuple[str, bytes, bool]]
) -> None:
    # Unique payloads, so a record in the log names the request record it came from.
    records = [(key, b"%d:" % next(world.counter) + payload) for key, payload, _ in batch]
    world.failing.payloads = frozenset(
        body for (_, body), (_, _, fails) in zip(records, batch, strict=True) if fails
    )
    results = world.client.put_records(records)

    assert len(results) == len(records)
    assert not any(isinstance(r, PutFailure) and r.may_be_in_the_stream for r in results)
    for (key, body), result in zip(records, results, strict=True):
        if isinstance(result, PutResult):
            world.acknowledged.append((result.shard_id, result.sequence_number, key, body))
        else:
            world.refused.add(body)
    assert {body for (_, body), r in zip(records, results, strict=True)
            if isinstance(r, PutResult)}.isdisjoint(world.failing.payloads)  # fmt: skip

    runtime = world.runtime
    assert runtime.wait_until(
        lambda: runtime.committed_records() >= len(world.acknowledged), timeout_s=30
    )
    log = [
        (r.partition_id, r.kinesis_sequence_number, r.partition_key, r.data)
        for p in Tables(runtime.clients, runtime.config.tables).list_partitions()
        for r in world.reader.records(p.partition_id)
    ]
    assert Counter(log) == Counter(world.acknowledged)  # each exactly once, nothing else
    assert max(Counter(log).values(), default=1) == 1
    assert world.refused.isdisjoint(body for *_, body in log)
    for key in KEYS:  # in the log, each key's records are in the order they were answered
        mine = sorted((int(seq), body) for _, seq, k, body in log if k == key)
        answered = [body for _, _, k, body in world.acknowledged if k == key]
        assert [body for _, body in mine] == answered
