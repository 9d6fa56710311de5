"""The live set (shardlog/retirement.py): retired partitions leave the hot paths, history
stays readable with `status --all`, and nothing a group or the lake still needs is retired."""

from __future__ import annotations

import json

from shardlog import constants as C
from shardlog.clock import ManualClock
from shardlog.consumer.creation import GroupCreator
from shardlog.consumer.positions import StartPosition
from shardlog.consumer.seek import GroupSeek
from shardlog.dal.consumers import LAMBDA, WORKERS, create_group
from shardlog.dal.partitions import PartitionsTable, retire
from shardlog.lambda_consumer.wake import sweep
from shardlog.lease import LeaseManager
from shardlog.reader import LogReader
from shardlog.retirement import Retirement
from shardlog.shardsync import ShardSync
from shardlog.status_rows import ingest_rows
from shardlog.tables import Tables
from tests.support.aws import AwsEnv
from tests.support.cli import run_cli
from tests.support.factories import end_partition, register_partition


def _group(aws: AwsEnv, group: str, checkpoints: dict[str, str], kind: str = WORKERS) -> None:
    """A group (its "$group" item) with these lease checkpoints."""
    create_group(aws.clients, aws.config.consumers_table, group, kind, 0, "TRIM_HORIZON", {})
    leases = LeaseManager(aws.clients, aws.config.consumers_table)
    for partition_id, checkpoint in checkpoints.items():
        leases.ensure(group, partition_id, checkpoint=checkpoint)


def _ended(aws: AwsEnv, partition_id: str, head: int, parents: tuple[str, ...] = ()) -> None:
    register_partition(aws, partition_id, parents)
    PartitionsTable(aws.clients, aws.config.tables).set_head(partition_id, head)
    end_partition(aws, partition_id)


def _live(aws: AwsEnv) -> list[str]:
    return [p.partition_id for p in Tables(aws.clients, aws.config.tables).live_partitions()]


def _retirement(aws: AwsEnv, clock: ManualClock, *, lake: bool = False) -> Retirement:
    return Retirement(aws.clients, aws.config.tables, lake=lake, clock=clock)


def test_a_retired_partition_leaves_the_hot_paths_and_status_all_shows_it(
    aws: AwsEnv, clock: ManualClock
) -> None:
    _ended(aws, "old-0", 5)
    register_partition(aws, "new-0", ("old-0",))
    _group(aws, "billing", {"old-0": C.SHARD_END, "new-0": "0"})
    _group(aws, "audit", {"old-0": C.SHARD_END}, kind=LAMBDA)

    assert _retirement(aws, clock).run().retired == ["old-0"]

    assert _live(aws) == ["new-0"]
    rows = ingest_rows(aws.clients, aws.config.stream_name, aws.config.tables, with_lag=False)
    assert [r["partitionId"] for r in rows] == ["new-0"]
    every = ingest_rows(
        aws.clients, aws.config.stream_name, aws.config.tables, with_lag=False, history=True
    )
    assert {r["partitionId"]: r["retired"] for r in every} == {"new-0": False, "old-0": True}
    cli = run_cli(aws, "status", "--all", "--json")
    assert cli.exit_code == 0, cli.output
    assert [r["partitionId"] for r in json.loads(cli.output)] == ["new-0", "old-0"]
    group_cli = run_cli(aws, "status", "--group", "billing", "--all", "--json")
    assert [r["partitionId"] for r in json.loads(group_cli.output)] == ["new-0", "old-0"]
    # A second pass changes nothing (idempotent).
    assert _retirement(aws, clock).run().retired == []


def test_a_partition_a_lagging_group_or_the_lake_still_needs_is_never_retired(
    aws: AwsEnv, clock: ManualClock
) -> None:
    """The safety check: every group must be at SHARD_END (a checkpoint at the head is not
    the end a child waits for; a missing lease item is a group being created), and with a
    lake its watermark at the head."""
    for pid in ("lag-0", "none-0", "lake-0"):
        _ended(aws, pid, 5)
    _group(aws, "fast", {"lag-0": C.SHARD_END, "none-0": C.SHARD_END, "lake-0": C.SHARD_END})
    _group(aws, "slow", {"lag-0": "3", "lake-0": C.SHARD_END})  # none-0: no lease item yet
    leases = LeaseManager(aws.clients, aws.config.consumers_table)
    leases.ensure(C.COMPACTION_GROUP, "lag-0", checkpoint="5")
    leases.ensure(C.COMPACTION_GROUP, "lake-0", checkpoint="4")  # one record not in the lake

    result = _retirement(aws, clock, lake=True).run()

    assert result.retired == []
    assert result.held == {"lag-0": "slow", "none-0": "slow", "lake-0": C.COMPACTION_GROUP}
    assert _live(aws) == ["lag-0", "lake-0", "none-0"]


def test_a_group_created_later_revives_the_history_it_reads(
    aws: AwsEnv, clock: ManualClock
) -> None:
    """Retired history comes back into the live set for a TRIM_HORIZON group created after
    the retirement, and a retirement judged before the group existed is refused."""
    _ended(aws, "old-0", 4)
    _group(aws, "first", {"old-0": C.SHARD_END})
    tables = Tables(aws.clients, aws.config.tables)
    judged = tables.live_partitions()  # a pass reads the revision, then...
    assert _retirement(aws, clock).run().retired == ["old-0"]
    assert _live(aws) == []

    creator = GroupCreator(
        aws.clients,
        tables,
        LogReader(aws.clients, aws.config.bucket, aws.config.tables),
        LeaseManager(aws.clients, aws.config.consumers_table),
    )
    creator.create("later", WORKERS, StartPosition.trim_horizon(), clock.now_ms(), strict=False)

    assert _live(aws) == ["old-0"]
    assert not retire(aws.clients, aws.config.partitions_table, judged[0], clock.now_ms())
    assert _retirement(aws, clock).run().held == {"old-0": "later"}
    wakes = sweep(tables, ["later"], clock.now_ms(), "s1")
    assert [w.partition_id for w in wakes] == ["old-0"]


def test_a_child_whose_parent_is_retired_is_served(aws: AwsEnv, clock: ManualClock) -> None:
    _ended(aws, "parent-0", 3)
    register_partition(aws, "child-0", ("parent-0",))
    PartitionsTable(aws.clients, aws.config.tables).set_head("child-0", 2)
    _group(aws, "billing", {"parent-0": C.SHARD_END})
    tables = Tables(aws.clients, aws.config.tables)
    assert _retirement(aws, clock).run().retired == ["parent-0"]

    wakes = sweep(tables, ["billing"], clock.now_ms(), "s1")

    assert [w.partition_id for w in wakes] == ["child-0"]
    assert tables.live_lineage().known["parent-0"].retired


def test_a_child_waits_for_a_parent_that_is_not_retired(aws: AwsEnv, clock: ManualClock) -> None:
    """The converse: a parent the group has not finished keeps its child waiting."""
    _ended(aws, "parent-0", 3)
    register_partition(aws, "child-0", ("parent-0",))
    PartitionsTable(aws.clients, aws.config.tables).set_head("child-0", 2)
    _group(aws, "billing", {"parent-0": "1"})
    tables = Tables(aws.clients, aws.config.tables)

    wakes = sweep(tables, ["billing"], clock.now_ms(), "s1")

    assert [w.partition_id for w in wakes] == ["parent-0"]


def test_shard_sync_skips_retired_shards_and_retires(aws: AwsEnv, clock: ManualClock) -> None:
    """A retired shard still in ListShards stays retired; the sync's last step retires."""
    sync = ShardSync(
        aws.clients, aws.config.stream_name, aws.config.tables, retirement=_retirement(aws, clock)
    )
    sync.sync()
    shard = sorted(_live(aws))[0]
    PartitionsTable(aws.clients, aws.config.tables).write_history([shard], 0, clock.now_ms())

    result = sync.sync()

    assert shard not in _live(aws) and result.created == []
    assert Tables(aws.clients, aws.config.tables).get_partition(shard).retired  # type: ignore[union-attr]


def test_the_sweep_costs_the_same_with_200_retired_partitions(
    aws: AwsEnv, clock: ManualClock
) -> None:
    """The budget: a sweep's requests do not grow with retired history."""
    for pid in ("live-0", "live-1"):
        register_partition(aws, pid)
    _group(aws, "billing", {"live-0": "0"})
    tables = Tables(aws.clients, aws.config.tables)

    def sweep_requests() -> dict[str, int]:
        aws.requests.reset()
        sweep(tables, ["billing", "audit"], clock.now_ms(), "s")
        return dict(aws.requests.snapshot())

    before = sweep_requests()
    history = [f"old-{i:04d}" for i in range(200)]
    PartitionsTable(aws.clients, aws.config.tables).write_history(history, 7, clock.now_ms())
    leases = LeaseManager(aws.clients, aws.config.consumers_table)
    for pid in history[:50]:  # the group's finished leases stay in the consumers table
        leases.ensure("billing", pid, checkpoint=C.SHARD_END)

    assert sweep_requests() == before
    assert sum(before.values()) == 3  # the live Query, one BatchGetItem per group


def test_a_parent_the_index_does_not_show_is_read_by_key(aws: AwsEnv, clock: ManualClock) -> None:
    """A parent absent from the live index but not retired (the index not caught up yet, or
    an item from before the index) is no finished parent: its child waits."""
    _ended(aws, "parent-0", 3)
    aws.clients.dynamodb.update_item(
        TableName=aws.config.partitions_table,
        Key={C.ATTR_PARTITION_ID: {"S": "parent-0"}},
        UpdateExpression="REMOVE #live",
        ExpressionAttributeNames={"#live": C.ATTR_LIVE},
    )
    register_partition(aws, "child-0", ("parent-0",))
    PartitionsTable(aws.clients, aws.config.tables).set_head("child-0", 2)
    _group(aws, "billing", {"parent-0": "1", "child-0": "0"})
    tables = Tables(aws.clients, aws.config.tables)

    assert sweep(tables, ["billing"], clock.now_ms(), "s1") == []


def test_a_seek_back_revives_the_history_it_reads_again(aws: AwsEnv, clock: ManualClock) -> None:
    _ended(aws, "old-0", 4)
    _group(aws, "billing", {"old-0": C.SHARD_END})
    assert _retirement(aws, clock).run().retired == ["old-0"]
    tables = Tables(aws.clients, aws.config.tables)
    reader = LogReader(aws.clients, aws.config.bucket, aws.config.tables)

    GroupSeek(tables, reader, clock=clock).seek(
        "billing", StartPosition.at_sequence({"old-0": 2}), "tester"
    )

    assert _live(aws) == ["old-0"]
    assert _retirement(aws, clock).run().held == {"old-0": "billing"}


def test_sync_index_history_brings_items_written_before_the_index_into_the_live_set(
    aws: AwsEnv, clock: ManualClock
) -> None:
    """An upgrade: ENDED items of shards Kinesis no longer lists, written before the live
    index, carry neither ``live`` nor ``retiredAt``: invisible to the hot paths and never
    retired. `shardlog sync --index-history` indexes them once (a retired one stays out);
    the next retirement pass retires those done for everyone."""
    _ended(aws, "pre-0", 4)
    _ended(aws, "pre-1", 6)
    _ended(aws, "gone-0", 2)
    _group(aws, "billing", {"pre-0": C.SHARD_END, "pre-1": "3", "gone-0": C.SHARD_END})
    LeaseManager(aws.clients, aws.config.consumers_table).ensure(
        C.COMPACTION_GROUP, "pre-0", checkpoint=C.SHARD_END
    )  # the CLI's shard sync waits for the lake too
    for pid in ("pre-0", "pre-1"):  # as a version without the index wrote them
        aws.clients.dynamodb.update_item(
            TableName=aws.config.partitions_table,
            Key={C.ATTR_PARTITION_ID: {"S": pid}},
            UpdateExpression="REMOVE #live",
            ExpressionAttributeNames={"#live": C.ATTR_LIVE},
        )
    assert _retirement(aws, clock).run().retired == ["gone-0"]  # the others are invisible
    assert _live(aws) == []

    first = run_cli(aws, "sync", "--index-history", "--json")
    assert first.exit_code == 0, first.output
    result = json.loads(first.output)
    # indexed, then shard sync's retirement pass retired what billing finished
    assert (result["indexed"], result["retired"]) == (["pre-0", "pre-1"], ["pre-0"])
    assert [p for p in _live(aws) if not p.startswith("shardId-")] == ["pre-1"]  # + the stream's
    again = json.loads(run_cli(aws, "sync", "--index-history", "--json").output)
    assert again["indexed"] == []
    plain = run_cli(aws, "sync")
    assert plain.exit_code == 0 and "indexed" not in plain.output, plain.output
