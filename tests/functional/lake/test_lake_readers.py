"""Lake tables as readers of the log (shardlog/retirement.py, ``LakeReader``): a declared
table holds its partitions from retirement until it has them, plans over every partition
until it is caught up (history retired before it existed included), then over the live set.
"""

from __future__ import annotations

from shardlog import constants as C
from shardlog.clock import ManualClock
from shardlog.dal.consumers import (
    LAKE,
    WORKERS,
    WatermarkItems,
    create_group,
    lake_reader,
    read_group,
)
from shardlog.dal.partitions import PartitionsTable
from shardlog.lease import LeaseManager
from shardlog.retirement import LakeReader, Retirement
from shardlog.tables import Tables
from tests.support.aws import AwsEnv
from tests.support.factories import end_partition, register_partition

ORDERS = lake_reader("orders")


def _ended(aws: AwsEnv, partition_id: str, head: int) -> None:
    register_partition(aws, partition_id, ())
    PartitionsTable(aws.clients, aws.config.tables).set_head(partition_id, head)
    end_partition(aws, partition_id)


def _done_for_group_and_raw_lake(aws: AwsEnv, *partition_ids: str) -> None:
    """A worker group and the raw lake table both finished these partitions."""
    create_group(aws.clients, aws.config.consumers_table, "billing", WORKERS, 0, "TRIM_HORIZON", {})
    leases = LeaseManager(aws.clients, aws.config.consumers_table)
    for pid in partition_ids:
        leases.ensure("billing", pid, checkpoint=C.SHARD_END)
        leases.ensure(C.COMPACTION_GROUP, pid, checkpoint=C.SHARD_END)


def _retire(aws: AwsEnv, clock: ManualClock) -> Retirement:
    return Retirement(aws.clients, aws.config.tables, lake=True, clock=clock)


def _ids(reader: LakeReader) -> list[str]:
    return sorted(p.partition_id for p in reader.partitions)


def test_a_declared_table_holds_a_partition_until_its_watermark_reaches_the_head(
    aws: AwsEnv, clock: ManualClock
) -> None:
    _ended(aws, "old-0", 5)
    _done_for_group_and_raw_lake(aws, "old-0")
    reader = LakeReader.open(aws.clients, aws.config.tables, ORDERS, clock)
    assert _ids(reader) == ["old-0"] and not reader.caught_up

    # Registered, with no mirror item yet: it holds the partition.
    assert _retire(aws, clock).run().held == {"old-0": ORDERS}
    mirror = WatermarkItems(aws.clients, aws.config.consumers_table, ORDERS)
    mirror.write_checkpoint(mirror.read("old-0"), "4")  # one record short of the head
    assert _retire(aws, clock).run().held == {"old-0": ORDERS}
    mirror.write_checkpoint(mirror.read("old-0"), "5")
    assert _retire(aws, clock).run().retired == ["old-0"]


def test_a_new_table_reads_the_retired_history_until_it_is_caught_up_then_the_live_set(
    aws: AwsEnv, clock: ManualClock
) -> None:
    """History retired before the table existed is planned (a Scan) until the table holds
    every ENDED partition of that read; from then on the live set is enough."""
    _ended(aws, "old-0", 4)
    register_partition(aws, "new-0", ("old-0",))
    _done_for_group_and_raw_lake(aws, "old-0")
    assert _retire(aws, clock).run().retired == ["old-0"]  # before "orders" was declared

    first = LakeReader.open(aws.clients, aws.config.tables, ORDERS, clock)
    assert _ids(first) == ["new-0", "old-0"] and not first.caught_up
    record = read_group(aws.clients, aws.config.consumers_table, ORDERS)
    assert record is not None and (record.kind, record.positioned) == (LAKE, False)
    assert not first.finish({"old-0": 3})  # a record of the retired parent still to come

    second = LakeReader.open(aws.clients, aws.config.tables, ORDERS, clock)
    assert _ids(second) == ["new-0", "old-0"] and not second.caught_up
    assert second.finish({"old-0": 4})

    caught_up = LakeReader.open(aws.clients, aws.config.tables, ORDERS, clock)
    assert caught_up.caught_up and _ids(caught_up) == ["new-0"]
    live = Tables(aws.clients, aws.config.tables).live_partitions()
    assert [p.partition_id for p in live] == ["new-0"]
    assert caught_up.finish({})  # caught up stays caught up


def test_registration_is_idempotent_and_keeps_the_first_creation_time(
    aws: AwsEnv, clock: ManualClock
) -> None:
    LakeReader.open(aws.clients, aws.config.tables, ORDERS, clock)
    created = clock.now_ms()
    clock.advance(60_000)
    again = LakeReader.open(aws.clients, aws.config.tables, ORDERS, clock)
    assert again.record.created_at_ms == created
    assert again.finish({})  # nothing ENDED: caught up at once
    clock.advance(60_000)
    assert LakeReader.open(aws.clients, aws.config.tables, ORDERS, clock).record.created_at_ms == (
        created
    )
