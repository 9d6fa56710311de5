"""The embedded AWS keeps an event source mapping from taking its source's records: a
DynamoDB stream keeps its records and an SQS queue its messages (unreceived) for the local
event sources, while the mapping itself is still there to describe."""

from __future__ import annotations

import io
import json
import uuid
import zipfile

from tests.support.aws import AwsEnv

ROLE = {
    "Version": "2012-10-17",
    "Statement": [
        {
            "Effect": "Allow",
            "Principal": {"Service": "lambda.amazonaws.com"},
            "Action": "sts:AssumeRole",
        }
    ],
}


def function(aws: AwsEnv) -> str:
    """A function moto can hold (it would run it only in Docker)."""
    name = f"mapped-{uuid.uuid4().hex[:8]}"
    role = aws.clients.client("iam").create_role(
        RoleName=name, AssumeRolePolicyDocument=json.dumps(ROLE)
    )["Role"]["Arn"]
    code = io.BytesIO()
    with zipfile.ZipFile(code, "w") as archive:
        archive.writestr("handler.py", "def handler(event, context):\n    return {}\n")
    aws.clients.client("lambda").create_function(
        FunctionName=name,
        Runtime="python3.12",
        Role=role,
        Handler="handler.handler",
        Code={"ZipFile": code.getvalue()},
    )
    return name


def test_a_mapped_dynamodb_stream_keeps_its_records(aws: AwsEnv) -> None:
    ddb = aws.clients.dynamodb
    table = f"mapped-{uuid.uuid4().hex[:8]}"
    stream_arn = ddb.create_table(
        TableName=table,
        KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
        StreamSpecification={"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"},
    )["TableDescription"]["LatestStreamArn"]
    lam = aws.clients.client("lambda")
    mapping = lam.create_event_source_mapping(
        EventSourceArn=stream_arn, FunctionName=function(aws), StartingPosition="LATEST"
    )
    for i in range(3):
        ddb.put_item(TableName=table, Item={"id": {"S": f"item-{i}"}})
    streams = aws.clients.client("dynamodbstreams")
    (shard,) = streams.describe_stream(StreamArn=stream_arn)["StreamDescription"]["Shards"]
    iterator = streams.get_shard_iterator(
        StreamArn=stream_arn, ShardId=shard["ShardId"], ShardIteratorType="TRIM_HORIZON"
    )["ShardIterator"]
    records = streams.get_records(ShardIterator=iterator)["Records"]
    assert [r["dynamodb"]["Keys"]["id"]["S"] for r in records] == ["item-0", "item-1", "item-2"]
    assert lam.get_event_source_mapping(UUID=mapping["UUID"])["EventSourceArn"] == stream_arn


def test_a_mapped_queue_keeps_its_messages_unreceived(aws: AwsEnv) -> None:
    sqs = aws.clients.client("sqs")
    url = sqs.create_queue(QueueName=f"mapped-{uuid.uuid4().hex[:8]}")["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    aws.clients.client("lambda").create_event_source_mapping(
        EventSourceArn=arn, FunctionName=function(aws), BatchSize=1
    )
    for i in range(3):
        sqs.send_message(QueueUrl=url, MessageBody=f"wake-{i}")
    got = sqs.receive_message(
        QueueUrl=url, MaxNumberOfMessages=10, AttributeNames=["ApproximateReceiveCount"]
    )["Messages"]
    assert sorted(m["Body"] for m in got) == ["wake-0", "wake-1", "wake-2"]
    assert {m["Attributes"]["ApproximateReceiveCount"] for m in got} == {"1"}
