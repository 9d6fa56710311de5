"""The embedded DynamoDB applies a transaction whole or not at all, without copying tables, and
a cancelled one leaves nothing in the table's stream (plain boto3, over HTTP)."""

from __future__ import annotations

from typing import Any

import pytest
from botocore.exceptions import ClientError

from shardlog import constants as C
from tests.support.aws import AwsEnv


def _partition(aws: AwsEnv, pid: str) -> dict[str, Any] | None:
    return aws.clients.dynamodb.get_item(
        TableName=aws.config.partitions_table,
        Key={C.ATTR_PARTITION_ID: {"S": pid}},
        ConsistentRead=True,
    ).get("Item")


def _lease(aws: AwsEnv, group: str, pid: str) -> dict[str, Any] | None:
    return aws.clients.dynamodb.get_item(
        TableName=aws.config.consumers_table,
        Key={C.ATTR_CONSUMER_GROUP: {"S": group}, C.ATTR_PARTITION_ID: {"S": pid}},
        ConsistentRead=True,
    ).get("Item")


def _put_partition(aws: AwsEnv, pid: str, head: int) -> None:
    aws.clients.dynamodb.put_item(
        TableName=aws.config.partitions_table,
        Item={C.ATTR_PARTITION_ID: {"S": pid}, "head": {"N": str(head)}},
    )


def _mixed_transaction(aws: AwsEnv, condition_holds: bool) -> list[dict[str, Any]]:
    """An update, a put of a new item, a delete and a range-key put, then a condition check
    that holds or not."""
    partitions, consumers = aws.config.partitions_table, aws.config.consumers_table
    return [
        {
            "Update": {
                "TableName": partitions,
                "Key": {C.ATTR_PARTITION_ID: {"S": "p-updated"}},
                "UpdateExpression": "SET head = head + :one",
                "ExpressionAttributeValues": {":one": {"N": "1"}},
            }
        },
        {"Put": {"TableName": partitions, "Item": {C.ATTR_PARTITION_ID: {"S": "p-new"}}}},
        {"Delete": {"TableName": partitions, "Key": {C.ATTR_PARTITION_ID: {"S": "p-deleted"}}}},
        {
            "Put": {
                "TableName": consumers,
                "Item": {C.ATTR_CONSUMER_GROUP: {"S": "g"}, C.ATTR_PARTITION_ID: {"S": "p-new"}},
            }
        },
        {
            "ConditionCheck": {
                "TableName": partitions,
                "Key": {C.ATTR_PARTITION_ID: {"S": "p-check"}},
                "ConditionExpression": "head = :expected",
                "ExpressionAttributeValues": {":expected": {"N": "7" if condition_holds else "8"}},
            }
        },
    ]


def _seed(aws: AwsEnv) -> None:
    _put_partition(aws, "p-updated", 1)
    _put_partition(aws, "p-deleted", 5)
    _put_partition(aws, "p-check", 7)


def _stream_iterator(aws: AwsEnv) -> tuple[Any, str]:
    streams = aws.clients.client("dynamodbstreams")
    arn = aws.clients.dynamodb.describe_table(TableName=aws.config.partitions_table)["Table"][
        "LatestStreamArn"
    ]
    shard = streams.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"][0]["ShardId"]
    iterator = streams.get_shard_iterator(StreamArn=arn, ShardId=shard, ShardIteratorType="LATEST")[
        "ShardIterator"
    ]
    return streams, iterator


def _stream_keys(streams: Any, iterator: str) -> tuple[list[tuple[str, str]], str]:
    page = streams.get_records(ShardIterator=iterator, Limit=100)
    keys = [
        (r["eventName"], r["dynamodb"]["Keys"][C.ATTR_PARTITION_ID]["S"]) for r in page["Records"]
    ]
    return keys, page["NextShardIterator"]


def test_a_cancelled_transaction_changes_no_item_in_any_table(aws: AwsEnv) -> None:
    _seed(aws)
    with pytest.raises(ClientError) as error:
        aws.clients.dynamodb.transact_write_items(TransactItems=_mixed_transaction(aws, False))
    assert error.value.response["Error"]["Code"] == "TransactionCanceledException"
    assert _partition(aws, "p-updated") == {
        C.ATTR_PARTITION_ID: {"S": "p-updated"},
        "head": {"N": "1"},
    }
    assert _partition(aws, "p-new") is None
    assert _partition(aws, "p-deleted") == {
        C.ATTR_PARTITION_ID: {"S": "p-deleted"},
        "head": {"N": "5"},
    }
    assert _lease(aws, "g", "p-new") is None


def test_a_transaction_that_holds_applies_every_write(aws: AwsEnv) -> None:
    _seed(aws)
    aws.clients.dynamodb.transact_write_items(TransactItems=_mixed_transaction(aws, True))
    assert _partition(aws, "p-updated") == {
        C.ATTR_PARTITION_ID: {"S": "p-updated"},
        "head": {"N": "2"},
    }
    assert _partition(aws, "p-new") == {C.ATTR_PARTITION_ID: {"S": "p-new"}}
    assert _partition(aws, "p-deleted") is None
    assert _lease(aws, "g", "p-new") is not None


def test_a_stream_read_across_a_cancelled_transaction_sees_only_committed_writes(
    aws: AwsEnv,
) -> None:
    _seed(aws)
    streams, iterator = _stream_iterator(aws)
    with pytest.raises(ClientError):
        aws.clients.dynamodb.transact_write_items(TransactItems=_mixed_transaction(aws, False))
    _put_partition(aws, "p-after", 1)
    keys, iterator = _stream_keys(streams, iterator)
    # Nothing of the cancelled transaction, and the next write on the same iterator.
    assert keys == [("INSERT", "p-after")]
    aws.clients.dynamodb.transact_write_items(TransactItems=_mixed_transaction(aws, True))
    keys, _ = _stream_keys(streams, iterator)
    assert sorted(keys) == [("INSERT", "p-new"), ("MODIFY", "p-updated"), ("REMOVE", "p-deleted")]


def test_a_transaction_naming_one_item_twice_is_refused_and_changes_nothing(aws: AwsEnv) -> None:
    _seed(aws)
    key = {C.ATTR_PARTITION_ID: {"S": "p-updated"}}
    update = {
        "TableName": aws.config.partitions_table,
        "Key": key,
        "UpdateExpression": "SET head = :v",
        "ExpressionAttributeValues": {":v": {"N": "100"}},
    }
    with pytest.raises(ClientError) as error:
        aws.clients.dynamodb.transact_write_items(
            TransactItems=[
                {"Update": update},
                {"Delete": {"TableName": aws.config.partitions_table, "Key": key}},
            ]
        )
    assert error.value.response["Error"]["Code"] == "ValidationException"
    assert _partition(aws, "p-updated") == {**key, "head": {"N": "1"}}


def test_a_transaction_with_a_malformed_key_is_refused_and_changes_nothing(aws: AwsEnv) -> None:
    _seed(aws)
    with pytest.raises(ClientError):
        aws.clients.dynamodb.transact_write_items(
            TransactItems=[
                {
                    "Update": {
                        "TableName": aws.config.partitions_table,
                        "Key": {C.ATTR_PARTITION_ID: {"S": "p-updated"}},
                        "UpdateExpression": "SET head = :v",
                        "ExpressionAttributeValues": {":v": {"N": "100"}},
                    }
                },
                {"Put": {"TableName": aws.config.partitions_table, "Item": {"other": {"S": "x"}}}},
            ]
        )
    assert _partition(aws, "p-updated") == {
        C.ATTR_PARTITION_ID: {"S": "p-updated"},
        "head": {"N": "1"},
    }


def test_a_cancelled_transaction_puts_back_a_range_key_item_it_changed(aws: AwsEnv) -> None:
    key = {C.ATTR_CONSUMER_GROUP: {"S": "g"}, C.ATTR_PARTITION_ID: {"S": "p-held"}}
    aws.clients.dynamodb.put_item(
        TableName=aws.config.consumers_table, Item={**key, "leaseCounter": {"N": "3"}}
    )
    with pytest.raises(ClientError) as error:
        aws.clients.dynamodb.transact_write_items(
            TransactItems=[
                {
                    "Update": {
                        "TableName": aws.config.consumers_table,
                        "Key": key,
                        "UpdateExpression": "SET leaseCounter = leaseCounter + :one",
                        "ExpressionAttributeValues": {":one": {"N": "1"}},
                    }
                },
                {
                    "ConditionCheck": {
                        "TableName": aws.config.consumers_table,
                        "Key": {**key, C.ATTR_PARTITION_ID: {"S": "p-absent"}},
                        "ConditionExpression": "attribute_exists(leaseCounter)",
                    }
                },
            ]
        )
    assert error.value.response["Error"]["Code"] == "TransactionCanceledException"
    assert _lease(aws, "g", "p-held") == {**key, "leaseCounter": {"N": "3"}}
