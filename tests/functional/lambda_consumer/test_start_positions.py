"""A Lambda group's start position is fixed when the group is created (registered at
deploy or `shardlog local up`), per partition, as for worker groups; a partition that
appears later is read from its start once its parents are consumed."""

from __future__ import annotations

import pytest

from shardlog import constants as C
from shardlog.clock import ManualClock
from shardlog.consumer.creation import read_group
from shardlog.dal.partitions import close
from shardlog.exceptions import ConfigurationError
from shardlog.lambda_consumer.runner import Outcome
from shardlog.lease import LeaseManager
from shardlog.tables import Tables, consumer_key
from tests.functional.lambda_consumer.conftest import Start
from tests.support.aws import AwsEnv
from tests.support.factories import append, end_partition, incoming_records, register_partition
from tests.support.lambda_consumers import Recorder, drive, plenty_of_time, runner_for

P = "shardId-000000000000"
PARENT, LEFT, RIGHT = "parent", "left", "right"
GROUP = "starts"  # its own queues: runner_for's "billing" queues have other attributes


def checkpoint(aws: AwsEnv, partition_id: str, group: str = GROUP) -> str | None:
    lease = Tables(aws.clients, aws.config.tables).get_lease(group, partition_id)
    return lease.checkpoint if lease else None


OLD_MS = 1_600_000_000_000  # long before the tests' clock


def split(aws: AwsEnv, *, ended: bool) -> None:
    """PARENT (5 records) split into LEFT and RIGHT (3 records each), all of them older than
    the group; PARENT CLOSED, or ENDED."""
    register_partition(aws, PARENT, ())
    append(aws, PARENT, incoming_records(5, start=0, keys=["a", "b"], arrival_ms=OLD_MS))
    close(aws.clients, aws.config.partitions_table, PARENT, "9" * 70)
    for child, start in ((LEFT, 5), (RIGHT, 8)):
        register_partition(aws, child, (PARENT,))
        append(aws, child, incoming_records(3, start=start, keys=["a"], arrival_ms=OLD_MS))
    if ended:
        end_partition(aws, PARENT)


def test_latest_delivers_what_was_committed_after_creation_before_the_first_run(
    aws: AwsEnv, clock: ManualClock, start_group: Start
) -> None:
    """The records that wake a new LATEST group are its first records (the runner used to
    fix LATEST at its own first run, after them, and checkpoint past them)."""
    append(aws, P, incoming_records(4, start=0, arrival_ms=clock.now_ms() - 10_000))
    recorder = Recorder()
    group = start_group(recorder, GROUP, starting_position="LATEST")  # created (registered) now
    clock.advance(1_000)
    append(aws, P, incoming_records(3, start=4, arrival_ms=clock.now_ms() - 500))
    clock.advance(1_000)  # the first run comes later still
    drive(group, clock)
    assert recorder.seqs(P) == [4, 5, 6]
    record = read_group(aws.clients, aws.config.consumers_table, GROUP)
    assert record is not None and record.positions == {P: "4"}


@pytest.mark.parametrize("position", ["LATEST", "AT_TIMESTAMP"])
def test_a_group_created_after_a_split_starts_the_children_at_its_position(
    aws: AwsEnv, clock: ManualClock, start_group: Start, position: str
) -> None:
    """Children that exist at creation start at the group's position, not at seq 0."""
    split(aws, ended=True)
    recorder = Recorder()
    settings = {"starting_position": position}
    if position == "AT_TIMESTAMP":
        settings["starting_position_timestamp_ms"] = clock.now_ms()  # type: ignore[assignment]
    group = start_group(recorder, GROUP, **settings)
    clock.advance(1_000)
    append(aws, LEFT, incoming_records(2, start=11, keys=["a"], arrival_ms=clock.now_ms()))
    drive(group, clock)
    assert recorder.seqs(PARENT) == [] and recorder.seqs(RIGHT) == []
    assert recorder.seqs(LEFT) == [3, 4]
    assert checkpoint(aws, PARENT) == C.SHARD_END


def test_a_latest_group_created_mid_reshard_skips_the_closed_parent_and_waits_for_its_end(
    aws: AwsEnv, clock: ManualClock, start_group: Start
) -> None:
    """A CLOSED parent at creation is done for LATEST (all of it arrived before the group),
    even the records ingest commits to it later; its children start at their head, after
    the parent ENDED (parents first)."""
    split(aws, ended=False)
    recorder = Recorder()
    group = start_group(recorder, GROUP, starting_position="LATEST")
    record = read_group(aws.clients, aws.config.consumers_table, GROUP)
    assert record is not None
    assert record.positions == {PARENT: C.SHARD_END, LEFT: "3", RIGHT: "3"}
    append(aws, PARENT, incoming_records(2, start=20, keys=["b"]))  # ingest catching up
    append(aws, RIGHT, incoming_records(1, start=30, keys=["b"]))
    drive(group, clock)
    assert recorder.calls == []  # the children wait for their parent's end
    end_partition(aws, PARENT)
    drive(group, clock)
    assert recorder.seqs(PARENT) == [] and recorder.seqs(LEFT) == []
    assert recorder.seqs(RIGHT) == [3]


def test_a_partition_that_appears_after_creation_is_read_from_its_start(
    aws: AwsEnv, clock: ManualClock, start_group: Start
) -> None:
    register_partition(aws, PARENT, ())
    append(aws, PARENT, incoming_records(4, start=0, keys=["a"]))
    recorder = Recorder()
    group = start_group(recorder, GROUP, starting_position="LATEST")
    append(aws, PARENT, incoming_records(1, start=4, keys=["a"]))
    close(aws.clients, aws.config.partitions_table, PARENT, "9" * 70)
    register_partition(aws, LEFT, (PARENT,))
    append(aws, LEFT, incoming_records(2, start=5, keys=["a"]))
    end_partition(aws, PARENT)
    drive(group, clock)
    assert recorder.seqs(PARENT) == [4] and recorder.seqs(LEFT) == [0, 1]


def test_an_unregistered_group_reads_nothing_until_it_is_registered(
    aws: AwsEnv, clock: ManualClock
) -> None:
    append(aws, P, incoming_records(2, start=0))
    recorder = Recorder()
    runner, _ = runner_for(aws, clock, recorder, "unregistered", register_group=False)
    report = runner.run(P, request_id="r", remaining_ms=plenty_of_time)
    assert report.outcome is Outcome.NOT_READY and recorder.calls == []
    assert checkpoint(aws, P, "unregistered") is None
    runner_for(aws, clock, Recorder(), "unregistered", starting_position="LATEST")  # deploy
    append(aws, P, incoming_records(1, start=2))
    report = runner.run(P, request_id="r2", remaining_ms=plenty_of_time)  # the same warm runner
    assert report.outcome is Outcome.CAUGHT_UP and recorder.seqs(P) == [2]


def test_a_registered_group_keeps_its_positions_and_refuses_another_start(
    aws: AwsEnv, clock: ManualClock
) -> None:
    """Registering again (an update, a retried deploy) changes nothing; another starting
    position is refused, naming the one the group was created at."""
    append(aws, P, incoming_records(3, start=0))
    runner_for(aws, clock, Recorder(), "registered", starting_position="LATEST")
    append(aws, P, incoming_records(2, start=3))
    clock.advance(1_000)
    runner_for(aws, clock, Recorder(), "registered", starting_position="LATEST")
    record = read_group(aws.clients, aws.config.consumers_table, "registered")
    assert record is not None and record.positions == {P: "3"}
    assert checkpoint(aws, P, "registered") == "3"
    with pytest.raises(ConfigurationError, match="created at LATEST"):
        runner_for(aws, clock, Recorder(), "registered", starting_position="TRIM_HORIZON")


def test_a_group_registered_by_an_earlier_version_gets_its_positions_and_keeps_its_checkpoints(
    aws: AwsEnv, clock: ManualClock
) -> None:
    """Its `$group` item has no positions (its first runner wrote it): the next registration
    records them, from then; a partition it already has a checkpoint for keeps it."""
    append(aws, P, incoming_records(5, start=0))
    register_partition(aws, "q", ())
    append(aws, "q", incoming_records(3, start=0))
    aws.clients.dynamodb.put_item(
        TableName=aws.config.consumers_table,
        Item={
            **consumer_key("legacy", C.GROUP_ITEM_ID),
            C.ATTR_GROUP_KIND: {"S": "lambda"},
            C.ATTR_GROUP_CREATED_AT: {"N": "5"},
        },
    )
    LeaseManager(aws.clients, aws.config.consumers_table).ensure("legacy", P, checkpoint="2")
    runner, _ = runner_for(aws, clock, Recorder(), "legacy", starting_position="LATEST")
    record = read_group(aws.clients, aws.config.consumers_table, "legacy")
    assert record is not None and record.created_at_ms == 5
    assert record.positions == {P: "5", "q": "3"}
    assert (checkpoint(aws, P, "legacy"), checkpoint(aws, "q", "legacy")) == ("2", "3")
    report = runner.run(P, request_id="r", remaining_ms=plenty_of_time)
    assert report.delivered == 3
