"""Retention against the embedded AWS: segments below the lake watermark and every group's
checkpoint expire, others never do; reads below the horizon get TrimmedError; the horizon
is written before any segment is tagged, and an interrupted trim is finished by the next."""

from __future__ import annotations

from typing import Any

import pytest

from lambdas.retention.handler import create_handler
from shardlog.clock import ManualClock, SystemClock
from shardlog.consumer.cursor import PartitionCursor
from shardlog.dal.consumers import WatermarkItems
from shardlog.dal.partitions import PartitionsTable
from shardlog.exceptions import ConfigurationError, CorruptLogError, TrimmedError
from shardlog.function_settings import TrimmerSettings
from shardlog.local.lambda_context import LambdaContext
from shardlog.local.lifecycle import expire_now
from shardlog.reader import LogReader
from shardlog.retention import DAY_MS, RetentionPolicy, Trimmer, expiry_rule
from shardlog.segments import segment_key
from shardlog.tables import Tables
from tests.support.aws import AwsEnv
from tests.support.factories import append, incoming_records

P = "shardId-000000000000"
WEEK = RetentionPolicy(days=7)


def write_log(aws: AwsEnv, sizes: list[int], partition_id: str = P) -> list[int]:
    """Consecutive segments of these sizes from seq 0, each committed by the write path."""
    starts, seq = [], 0
    for size in sizes:
        append(aws, partition_id, incoming_records(size, start=seq), segment_max_records=size)
        starts.append(seq)
        seq += size
    return starts


def set_checkpoint(aws: AwsEnv, group: str, checkpoint: str, partition_id: str = P) -> None:
    """A group's checkpoint (``$compaction``: the lake watermark) through the fenced write."""
    items = WatermarkItems(aws.clients, aws.config.tables.consumers, group)
    items.write_checkpoint(items.read(partition_id), checkpoint)


def later(days: float) -> ManualClock:
    return ManualClock(SystemClock().now_ms() + int(days * DAY_MS))


def trimmer(aws: AwsEnv, clock: ManualClock, policy: RetentionPolicy = WEEK) -> Trimmer:
    return Trimmer(aws.clients, aws.config.bucket, aws.config.tables, policy, clock)


def keys(aws: AwsEnv) -> list[str]:
    listed = aws.clients.s3.list_objects_v2(Bucket=aws.config.bucket, Prefix="events/")
    return [o["Key"] for o in listed.get("Contents", [])]


def tags(aws: AwsEnv, seq: int) -> list[dict[str, str]]:
    key = segment_key(P, seq)
    return aws.clients.s3.get_object_tagging(Bucket=aws.config.bucket, Key=key)["TagSet"]


@pytest.fixture
def lifecycle(aws: AwsEnv) -> None:
    """The bucket's lifecycle rule for trimmed segments, as the stack declares it."""
    aws.clients.s3.put_bucket_lifecycle_configuration(
        Bucket=aws.config.bucket, LifecycleConfiguration={"Rules": [expiry_rule(7)]}
    )


def test_segments_below_the_watermark_and_every_checkpoint_expire_a_lagging_group_holds_the_rest(
    aws: AwsEnv, lifecycle: None
) -> None:
    write_log(aws, [3, 3, 3, 3])
    set_checkpoint(aws, "$compaction", "9")
    set_checkpoint(aws, "done", "SHARD_END")
    set_checkpoint(aws, "lagging", "6")
    clock = later(8)

    [trim] = trimmer(aws, clock).run()

    assert (trim.horizon_before, trim.horizon, trim.tagged) == (0, 6, [0, 3])
    assert trim.reason == "segment 6: group lagging has read up to 6"
    partition = Tables(aws.clients, aws.config.tables).get_partition(P)
    assert partition is not None and (partition.trim_horizon, partition.trim_tagged) == (6, 6)
    assert tags(aws, 6) == [] and tags(aws, 9) == []
    assert expire_now(aws.clients, aws.config.bucket, clock.now_ms()) == [
        segment_key(P, 0),
        segment_key(P, 3),
    ]
    assert keys(aws) == [segment_key(P, 6), segment_key(P, 9)]

    reader = LogReader(aws.clients, aws.config.bucket, aws.config.tables)
    with pytest.raises(TrimmedError, match=f"partition {P} is trimmed below seq 6") as caught:
        list(reader.records(P, 0))
    assert (caught.value.horizon, caught.value.asked) == (6, 0)
    with pytest.raises(TrimmedError):
        list(reader.segments(P, 5))
    assert [r.seq for r in reader.records(P, 6)] == list(range(6, 12))

    set_checkpoint(aws, "lagging", "12")  # the group catches up: the lake's watermark holds 9
    [trim] = trimmer(aws, clock).run()
    assert (trim.horizon_before, trim.horizon, trim.tagged) == (6, 9, [6])
    assert trim.reason.startswith("segment 9: the lake holds records below 9")


def test_segments_younger_than_the_retention_never_expire(aws: AwsEnv, lifecycle: None) -> None:
    write_log(aws, [2, 2])
    set_checkpoint(aws, "$compaction", "SHARD_END")
    clock = later(6.9)
    [trim] = trimmer(aws, clock).run()
    assert (trim.horizon, trim.tagged) == (0, [])
    assert trim.reason == "segment 0: younger than 7 days"
    assert expire_now(aws.clients, aws.config.bucket, later(400).now_ms()) == []
    assert len(keys(aws)) == 2


def test_keep_forever_by_default_and_the_dry_run_writes_nothing(aws: AwsEnv) -> None:
    write_log(aws, [2, 2])
    set_checkpoint(aws, "$compaction", "SHARD_END")
    assert trimmer(aws, later(400), RetentionPolicy()).run() == []
    [planned] = trimmer(aws, later(8)).run(dry_run=True)
    assert (planned.horizon, planned.tagged) == (4, [])
    partition = Tables(aws.clients, aws.config.tables).get_partition(P)
    assert partition is not None and partition.trim_horizon == 0
    assert tags(aws, 0) == []


def test_a_partition_all_below_the_horizon_is_trimmed_to_its_head(aws: AwsEnv) -> None:
    write_log(aws, [2, 3])
    set_checkpoint(aws, "$compaction", "SHARD_END")  # an ENDED partition all in the lake
    set_checkpoint(aws, "g", "SHARD_END")
    [trim] = trimmer(aws, later(8)).run()
    assert (trim.horizon, trim.tagged, trim.reason) == (
        5,
        [0, 2],
        "every committed segment is trimmed",
    )
    reader = LogReader(aws.clients, aws.config.bucket, aws.config.tables)
    assert list(reader.records(P, 5)) == []
    with pytest.raises(TrimmedError):
        list(reader.records(P, 4))


def test_a_group_with_no_checkpoint_on_the_partition_holds_it(aws: AwsEnv) -> None:
    write_log(aws, [2, 2])
    write_log(aws, [1], partition_id="shardId-000000000001")
    set_checkpoint(aws, "$compaction", "SHARD_END")
    set_checkpoint(aws, "$compaction", "SHARD_END", partition_id="shardId-000000000001")
    set_checkpoint(aws, "g", "SHARD_END", partition_id="shardId-000000000001")
    trims = {t.partition_id: t for t in trimmer(aws, later(8)).run()}
    assert trims[P].horizon == 0 and trims[P].reason == "segment 0: group g has read up to 0"
    assert trims["shardId-000000000001"].horizon == 1


def test_the_horizon_is_written_before_any_segment_is_tagged(aws: AwsEnv) -> None:
    write_log(aws, [2, 2, 2])
    set_checkpoint(aws, "$compaction", "SHARD_END")
    tables = Tables(aws.clients, aws.config.tables)
    seen: list[tuple[str, int]] = []

    def horizon_at_tagging(params: dict[str, Any], **_: Any) -> None:
        partition = tables.get_partition(P)
        seen.append((params["Key"], partition.trim_horizon if partition else 0))

    aws.clients.s3.meta.events.register(
        "provide-client-params.s3.PutObjectTagging", horizon_at_tagging
    )
    trimmer(aws, later(8)).run()
    assert seen == [(segment_key(P, 0), 6), (segment_key(P, 2), 6), (segment_key(P, 4), 6)]


def test_a_trim_stopped_while_tagging_is_finished_by_the_next(aws: AwsEnv) -> None:
    write_log(aws, [2, 2, 2])
    set_checkpoint(aws, "$compaction", "SHARD_END")
    calls: list[str] = []

    def fail_the_second(params: dict[str, Any], **_: Any) -> None:
        calls.append(params["Key"])
        if len(calls) == 2:
            raise ConnectionError("the trimmer stopped here")

    events = aws.clients.s3.meta.events
    events.register("provide-client-params.s3.PutObjectTagging", fail_the_second)
    with pytest.raises(ConnectionError):
        trimmer(aws, later(8)).run()
    events.unregister("provide-client-params.s3.PutObjectTagging", fail_the_second)
    partition = Tables(aws.clients, aws.config.tables).get_partition(P)
    assert partition is not None and (partition.trim_horizon, partition.trim_tagged) == (6, 0)

    [trim] = trimmer(aws, later(8)).run()
    assert (trim.horizon_before, trim.horizon, trim.tagged) == (6, 6, [0, 2, 4])
    assert all(tags(aws, seq) for seq in (0, 2, 4))
    partition = Tables(aws.clients, aws.config.tables).get_partition(P)
    assert partition is not None and partition.trim_tagged == 6


def test_a_missing_segment_above_the_horizon_is_still_corruption(
    aws: AwsEnv, lifecycle: None
) -> None:
    write_log(aws, [2, 2, 2])
    set_checkpoint(aws, "$compaction", "2")
    trimmer(aws, later(8)).run()
    aws.clients.s3.delete_object(Bucket=aws.config.bucket, Key=segment_key(P, 4))
    reader = LogReader(aws.clients, aws.config.bucket, aws.config.tables)
    with pytest.raises(CorruptLogError):
        list(reader.records(P, 2))


def test_a_gap_the_horizon_passed_during_a_read_is_trimmed_not_corrupt(
    aws: AwsEnv, lifecycle: None
) -> None:
    write_log(aws, [2, 2, 2])
    set_checkpoint(aws, "$compaction", "SHARD_END")
    reader = LogReader(aws.clients, aws.config.bucket, aws.config.tables, prefetch=1)
    records = reader.records(P, 0)
    assert next(records).seq == 0  # the read has begun, from horizon 0
    clock = later(8)
    trimmer(aws, clock).run()
    expire_now(aws.clients, aws.config.bucket, clock.now_ms())
    with pytest.raises(TrimmedError, match="trimmed below seq 6"):
        list(records)


def test_a_worker_cursor_below_the_horizon_continues_at_it_and_counts_the_gap(
    aws: AwsEnv, lifecycle: None
) -> None:
    write_log(aws, [2, 2, 2])
    set_checkpoint(aws, "$compaction", "4")
    set_checkpoint(aws, "slow", "0")
    clock = later(8)
    trimmer(aws, clock, RetentionPolicy(days=7, hold_for_groups=False)).run()
    expire_now(aws.clients, aws.config.bucket, clock.now_ms())
    reader = LogReader(aws.clients, aws.config.bucket, aws.config.tables)
    cursor = PartitionCursor(reader, P, 1)
    assert [r.seq for r in cursor.next_batch(10)] == [4, 5]
    assert cursor.trimmed_unread == 3


def test_the_horizon_only_moves_up_never_past_the_head_and_tags_never_past_it(
    aws: AwsEnv,
) -> None:
    write_log(aws, [2, 2])
    table = PartitionsTable(aws.clients, aws.config.tables)
    assert not table.mark_tagged(P, 2)  # no horizon yet
    assert table.advance_horizon(P, 2)
    assert not table.advance_horizon(P, 2) and not table.advance_horizon(P, 0)
    assert not table.advance_horizon(P, 5)  # the head is 4
    assert table.advance_horizon(P, 4)
    assert not table.mark_tagged(P, 5)
    assert table.mark_tagged(P, 4) and not table.mark_tagged(P, 2)
    partition = Tables(aws.clients, aws.config.tables).get_partition(P)
    assert partition is not None and (partition.trim_horizon, partition.trim_tagged) == (4, 4)


def test_the_scheduled_handler_trims_with_its_validated_settings(aws: AwsEnv) -> None:
    write_log(aws, [2, 2])
    set_checkpoint(aws, "$compaction", "SHARD_END")
    env = {
        "SHARDLOG_BUCKET_NAME": aws.config.bucket,
        "SHARDLOG_PARTITIONS_TABLE": aws.config.partitions_table,
        "SHARDLOG_CONSUMERS_TABLE": aws.config.consumers_table,
        "SHARDLOG_RECORD_RETENTION_DAYS": "7",
    }
    settings = TrimmerSettings.from_env(env)
    assert (settings.days, settings.hold_for_groups) == (7, True)
    handle = create_handler(settings, aws.clients, later(8))
    assert handle({}, LambdaContext("trim")) == {"horizons": {P: 4}, "tagged": 2}
    with pytest.raises(ConfigurationError, match="SHARDLOG_RECORD_RETENTION_DAYS"):
        TrimmerSettings.from_env({**env, "SHARDLOG_RECORD_RETENTION_DAYS": "0"})
