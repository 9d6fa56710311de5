"""The IAM replay of the record-retention trimmer: its calls, checked against its role.

The trimmer exists only with ``shardlog:recordRetentionDays`` set, which the shared test stack
(``tests/infra/cdk_synth.py``) leaves unset, so ``test_iam_replay.py`` never drives it. Here
the stack is synthesized once with retention on; on the local runtime a few records are
produced and ingested, the lake watermark (the ``$compaction`` mirror) is put at each head
as compaction leaves it, no consumer group holds anything, and the scheduled handler
(``lambdas/retention/handler.py``) runs with clients signing as the trimmer function and a
clock past the retention: it advances each horizon, tags the segments below and marks them
tagged. Every request of that principal is then evaluated against the template, both
directions as in ``test_iam_replay.py``: no call denied, every allowed action used (or
needed by AWS: logs, traces, the table key's DescribeKey). The test also checks that the
trim really happened, so a trimmer that did nothing cannot pass it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

import pytest

from infra import constants as IC
from lambdas.retention.handler import create_handler
from shardlog import constants as C
from shardlog.clock import ManualClock, SystemClock
from shardlog.dal.consumers import WatermarkItems
from shardlog.function_settings import TrimmerSettings
from shardlog.local import principals, request_log
from shardlog.local.lambda_context import LambdaContext
from shardlog.local.runtime import LocalRuntime
from shardlog.producer import Producer
from shardlog.records import ProducerRecord
from shardlog.retention import DAY_MS
from shardlog.segments import SegmentStore, segment_key
from shardlog.tables import PartitionInfo, Tables
from tests.infra.cdk_synth import Synthesized, cdk_context, synthesize
from tests.support.iam.binding import bind_storage
from tests.support.iam.replay import TRIMMER, ReplayResult, replay
from tests.support.iam.workload import LocalNames
from tests.support.runtime import e2e_runtime

DAYS = 7
RECORDS = 12  # over 2 shards and segments of at most 7 records: a few segments per shard


@dataclass(frozen=True)
class Trimmed:
    """What the trimmer's run did and what the replay made of its requests."""

    replayed: ReplayResult
    answer: dict[str, Any]
    heads: dict[str, int]
    after: list[PartitionInfo]
    expiry_tags: dict[str, list[dict[str, str]]]  # segment key -> its tags after the run


@pytest.fixture(scope="module")
def retention_synth(tmp_path_factory: pytest.TempPathFactory) -> Synthesized:
    context = cdk_context(**{IC.CTX_RECORD_RETENTION_DAYS: str(DAYS)})
    return synthesize(tmp_path_factory.mktemp("cdk.out"), context=context)


@pytest.fixture(scope="module")
def trimmed(retention_synth: Synthesized) -> Trimmed:
    assert retention_synth.stack.retention is not None
    runtime = e2e_runtime("trimiam", api_port=None)
    with request_log.recording() as recording, runtime:
        heads = _ingest_and_compact(runtime)
        answer = _trim(runtime)
        tables = Tables(runtime.clients, runtime.config.tables)
        after = tables.list_partitions()
        expiry_tags = _segment_tags(runtime, after)
        names = _names(runtime)
    # Only the trimmer's requests to this test's own embedded AWS.
    records = [
        r
        for r in recording.records
        if r.get("host") == names.endpoint and r.get("principal") == TRIMMER
    ]
    replayed = replay(records, bind_storage(retention_synth, names))
    return Trimmed(replayed, answer, heads, after, expiry_tags)


def _ingest_and_compact(runtime: LocalRuntime) -> dict[str, int]:
    """A few records committed; the lake watermark at every head (compaction holds it all)."""
    producer = Producer(runtime.config.stream_name, runtime.clients)
    producer.put_records([ProducerRecord(f"k{i % 5}", f"{i}".encode()) for i in range(RECORDS)])
    assert runtime.wait_until(lambda: runtime.committed_records() == RECORDS, timeout_s=60)
    partitions = Tables(runtime.clients, runtime.config.tables).list_partitions()
    mirror = WatermarkItems(runtime.clients, runtime.config.tables.consumers)
    for partition in partitions:
        mirror.write_checkpoint(mirror.read(partition.partition_id), str(partition.next_seq))
    return {p.partition_id: p.next_seq for p in partitions}


def _trim(runtime: LocalRuntime) -> dict[str, Any]:
    """The scheduled handler, signing as the trimmer, on a clock past the retention."""
    settings = TrimmerSettings(
        bucket=runtime.config.bucket, tables=runtime.config.tables, days=DAYS
    )
    clock = ManualClock(SystemClock().now_ms() + (DAYS + 1) * DAY_MS)
    handle = create_handler(settings, runtime.config.clients(TRIMMER), clock)
    return dict(handle({}, LambdaContext("shardlog-retention-trimmer")))


def _segment_tags(runtime: LocalRuntime, partitions: list[PartitionInfo]) -> dict[str, Any]:
    s3, bucket = runtime.clients.s3, runtime.config.bucket
    store = SegmentStore(runtime.clients, bucket)
    tags = {}
    for partition in partitions:
        for segment in store.aged_starts(partition.partition_id, 0, partition.next_seq):
            key = segment_key(partition.partition_id, segment.start)
            tags[key] = s3.get_object_tagging(Bucket=bucket, Key=key)["TagSet"]
    return tags


def _names(runtime: LocalRuntime) -> LocalNames:
    config = runtime.config
    return LocalNames(
        endpoint=urlparse(config.endpoint_url).netloc,
        bucket=config.bucket,
        partitions_table=config.partitions_table,
        consumers_table=config.consumers_table,
        stream=config.stream_name,
    )


def test_the_trimmer_advanced_every_horizon_and_tagged_what_lies_below(trimmed: Trimmed) -> None:
    """The run the replay checks did the whole trim: not a vacuous pass."""
    busy = {pid: head for pid, head in trimmed.heads.items() if head}
    assert busy, "no records were committed"
    assert trimmed.answer["horizons"] == trimmed.heads
    assert trimmed.answer["tagged"] == len(trimmed.expiry_tags) > 0
    assert {p.partition_id: (p.trim_horizon, p.trim_tagged) for p in trimmed.after} == {
        pid: (head, head) for pid, head in trimmed.heads.items()
    }
    expire = {"Key": C.EXPIRY_TAG_KEY, "Value": C.EXPIRY_TAG_VALUE}
    assert all(expire in tags for tags in trimmed.expiry_tags.values()), trimmed.expiry_tags
    assert trimmed.replayed.principals == [TRIMMER]


def test_no_call_of_the_trimmer_is_denied(trimmed: Trimmed) -> None:
    replayed = trimmed.replayed
    assert not replayed.denied, (
        "requests AWS would refuse (call, role, reason):\n"
        + replayed.denied_report()
        + "\n\nwhat the trimmer used:\n"
        + replayed.report()
    )


def test_every_allowed_action_of_the_trimmer_is_used_or_needed_by_aws(trimmed: Trimmed) -> None:
    replayed = trimmed.replayed
    unused = replayed.unused_grants([TRIMMER])
    assert not unused, (
        "allowed, never used, no reason listed (remove or explain):\n"
        + "\n".join(unused)
        + "\n\nwhat the trimmer used:\n"
        + replayed.report()
    )


def test_the_replayed_role_is_the_trimmer_function_s(
    trimmed: Trimmed, retention_synth: Synthesized
) -> None:
    """The principal resolves to the role of the stack's trimmer, not another function's."""
    assert principals.function(create_handler.__module__) == TRIMMER
    retention = retention_synth.stack.retention
    assert retention is not None
    role = retention_synth.logical_id(retention.trimmer.role)
    deployment = trimmed.replayed.deployment
    assert deployment.identity(TRIMMER).arn == deployment.get_att(role, "Arn")
