"""A writer that committed a partition's previous batch itself skips the state read, and
only then (shardlog/writer.py, step 2): 3 requests per batch instead of 4."""

from __future__ import annotations

from collections import Counter

import pytest
from botocore.exceptions import BotoCoreError, ClientError

from shardlog import constants as C
from shardlog.clock import ManualClock
from shardlog.dal.partitions import close
from shardlog.exceptions import CommitConflictError
from shardlog.tables import Tables
from shardlog.writer import LogWriter
from tests.support.aws import AwsEnv
from tests.support.factories import incoming_records, kinesis_seqs, register_partition, writer_for
from tests.support.readback import log_kinesis_seqs
from tests.support.schedules import ANSWER_LOST, CallFault

P = "shardId-000000000000"
WARM = Counter({"dynamodb.UpdateItem": 1, "s3.PutObject": 1, "dynamodb.TransactWriteItems": 1})
COLD = WARM + Counter({"dynamodb.TransactGetItems": 1})


def _counted(aws: AwsEnv, clock: ManualClock | None = None) -> LogWriter:
    writer = writer_for(aws, clock)
    aws.requests.attach(writer.clients)
    return writer


def _requests_of(aws: AwsEnv, writer: LogWriter, start: int, count: int) -> Counter[str]:
    aws.requests.reset()
    result = writer.append(P, incoming_records(count, start=start))
    assert result.committed == count
    return aws.requests.snapshot()


def test_a_warm_writer_skips_the_state_read(aws: AwsEnv) -> None:
    register_partition(aws, P)  # shard sync recorded the lineage
    writer = _counted(aws)
    assert _requests_of(aws, writer, 0, 10) == COLD  # nothing remembered yet
    assert writer.remembers(P)
    assert _requests_of(aws, writer, 10, 10) == WARM
    assert _requests_of(aws, writer, 20, 1000) == WARM
    assert log_kinesis_seqs(aws, P) == kinesis_seqs(incoming_records(1020, start=0))
    lease = Tables(aws.clients, aws.config.tables).get_lease(C.INGEST_GROUP, P)
    last = kinesis_seqs(incoming_records(1, start=1019))[0]
    assert lease is not None and lease.checkpoint == last


def test_a_partition_whose_lineage_is_unknown_is_read_every_batch(aws: AwsEnv) -> None:
    """Shard sync may still add its parents (which deduplication reads): never remembered."""
    writer = _counted(aws)
    assert _requests_of(aws, writer, 0, 10) == COLD
    assert not writer.remembers(P)
    assert _requests_of(aws, writer, 10, 10) == COLD


@pytest.mark.parametrize("other_appends", [0, 3], ids=["redelivery-only", "new-records"])
def test_another_writers_lease_write_makes_the_warm_writer_read_again(
    aws: AwsEnv, clock: ManualClock, other_appends: int
) -> None:
    """Another container wrote the lease since (even without moving the head): the memory
    is refused, the state read, and the warm writer's batch commits exactly once."""
    register_partition(aws, P)
    warm = _counted(aws, clock)
    warm.append(P, incoming_records(5, start=0))
    writer_for(aws, clock).append(P, incoming_records(2 + other_appends, start=3))
    aws.requests.reset()
    result = warm.append(P, incoming_records(6, start=4))
    assert result.state_read and aws.requests.snapshot() == COLD
    assert (result.redelivered, result.committed) == (1 + other_appends, 5 - other_appends)
    assert log_kinesis_seqs(aws, P) == kinesis_seqs(incoming_records(10, start=0))


def test_a_remembered_partition_closed_meanwhile_is_read_again_and_ended(aws: AwsEnv) -> None:
    """Shard sync closed the shard between two batches (no lease write): the commit made
    from memory is refused on the state, read again, and the batch that reaches the end
    marks the partition ENDED, so its children are not kept waiting for the next sync."""
    register_partition(aws, P)
    writer = _counted(aws)
    writer.append(P, incoming_records(5, start=0))
    ending = kinesis_seqs(incoming_records(1, start=9))[0]
    assert close(aws.clients, aws.config.partitions_table, P, ending)
    aws.requests.reset()
    result = writer.append(P, incoming_records(5, start=5))
    assert result.ended and result.committed == 5
    assert aws.requests.snapshot() == COLD + Counter({"dynamodb.TransactWriteItems": 1})
    partition = Tables(aws.clients, aws.config.tables).get_partition(P)
    assert partition is not None and (partition.state, partition.next_seq) == (C.STATE_ENDED, 10)
    assert not writer.remembers(P), "an ended partition is never remembered"


def test_a_commit_whose_answer_was_lost_is_not_remembered(aws: AwsEnv) -> None:
    """The commit applied, its answer lost: the writer cannot know, so the retry reads."""
    register_partition(aws, P)
    writer = _counted(aws)
    writer.append(P, incoming_records(5, start=0))
    fault = CallFault(writer.clients)
    fault.arm(ANSWER_LOST, "TransactWriteItems")
    with pytest.raises((BotoCoreError, ClientError)):
        writer.append(P, incoming_records(5, start=5))
    assert fault.disarm() == "answer lost on TransactWriteItems"
    assert not writer.remembers(P)
    retry = writer.append(P, incoming_records(5, start=5))
    assert retry.state_read and (retry.redelivered, retry.committed) == (5, 0)
    assert log_kinesis_seqs(aws, P) == kinesis_seqs(incoming_records(10, start=0))


def test_a_partition_item_without_a_state_is_open_to_a_commit_from_memory(aws: AwsEnv) -> None:
    """An item written before partitions had a state reads as OPEN; the commit made from
    memory holds for it as well, without a read and a second commit every batch."""
    register_partition(aws, P)
    aws.clients.dynamodb.update_item(
        TableName=aws.config.partitions_table,
        Key={C.ATTR_PARTITION_ID: {"S": P}},
        UpdateExpression="REMOVE #state",
        ExpressionAttributeNames={"#state": C.ATTR_STATE},
    )
    writer = _counted(aws)
    assert _requests_of(aws, writer, 0, 5) == COLD
    assert _requests_of(aws, writer, 5, 5) == WARM
    assert log_kinesis_seqs(aws, P) == kinesis_seqs(incoming_records(10, start=0))


def test_a_head_moved_without_a_lease_write_fails_the_remembered_commit(aws: AwsEnv) -> None:
    """Nothing in shardlog moves a head without the lease; if something did, the commit from
    memory is refused, the state read shows the head moved, and nothing of the batch counts
    (the batch comes again and is read afresh)."""
    register_partition(aws, P)
    writer = _counted(aws)
    writer.append(P, incoming_records(5, start=0))
    aws.clients.dynamodb.update_item(
        TableName=aws.config.partitions_table,
        Key={C.ATTR_PARTITION_ID: {"S": P}},
        UpdateExpression="SET #next = :moved",
        ExpressionAttributeNames={"#next": C.ATTR_NEXT_SEQUENCE_NUMBER},
        ExpressionAttributeValues={":moved": {"N": "6"}},
    )
    aws.requests.reset()
    with pytest.raises(CommitConflictError, match="head moved from 5"):
        writer.append(P, incoming_records(5, start=5))
    assert aws.requests.snapshot() == COLD  # the refused commit, then the read: no retry
    partition = Tables(aws.clients, aws.config.tables).get_partition(P)
    assert partition is not None and partition.next_seq == 6
    lease = Tables(aws.clients, aws.config.tables).get_lease(C.INGEST_GROUP, P)
    assert lease is not None and lease.checkpoint == kinesis_seqs(incoming_records(1, start=4))[0]
