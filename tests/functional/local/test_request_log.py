"""The embedded AWS records who made each request (shardlog/local/request_log.py), and the IAM
replay reads each back into the authorizations AWS makes (tests/support/iam)."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest
from botocore.exceptions import ClientError

from shardlog import constants as C
from shardlog.config import principal_key, principal_of_key
from shardlog.local import principals, request_log
from tests.support.aws import AwsEnv
from tests.support.iam.audit import audit
from tests.support.iam.authorize import Scope, UnknownOperation, needs
from tests.support.iam.calls import read_call
from tests.support.iam.deployment import Deployment

INGEST = principals.function("lambdas.ingest.handler")
ROLE = "arn:aws:iam::123456789012:role/ingest"


def test_a_principal_key_names_its_principal_and_nothing_else() -> None:
    key = principal_key("function:lambdas.x.handler#group/with:odd chars")
    assert key.isalnum() and key.isupper()
    assert principal_of_key(key) == "function:lambdas.x.handler#group/with:odd chars"
    assert principal_of_key("testing") is None
    assert principal_of_key("SHARDLOGASnothex") is None


def test_only_named_principals_are_recorded_with_their_calls(aws: AwsEnv) -> None:
    named = aws.config.clients(INGEST)
    with request_log.recording() as recording:
        aws.clients.s3.list_objects_v2(Bucket=aws.config.bucket)  # a test's own: not recorded
        named.s3.list_objects_v2(Bucket=aws.config.bucket, Prefix="events/")
    (record,) = recording.records
    assert record["principal"] == INGEST
    assert record["host"] == urlparse(aws.config.endpoint_url or "").netloc  # which server
    call = read_call(record)
    assert (call.service, call.operation, call.status) == ("s3", "ListObjectsV2", 200)
    assert call.params["Prefix"] == "events/"


def test_the_audit_directory_gets_every_record_as_a_json_line(aws: AwsEnv, tmp_path: Path) -> None:
    listener = request_log.JsonLinesFile(tmp_path / "requests-1.jsonl")
    request_log.add_listener(listener)
    try:
        aws.config.clients(INGEST).kinesis.list_shards(StreamName=aws.config.stream_name)
    finally:
        request_log.remove_listener(listener)
    (record,) = request_log.read_json_lines(tmp_path)
    assert read_call(record).name == "kinesis:ListShards"


def recorded(aws: AwsEnv, act: Any) -> list[dict[str, Any]]:
    # The outcome (an error too) is recorded either way.
    with request_log.recording() as recording, contextlib.suppress(ClientError):
        act(aws.config.clients(INGEST))
    return recording.records


def authorizations(deployment: Deployment, records: list[dict[str, Any]]) -> list[Any]:
    scope = Scope(deployment, ROLE)
    return [need for record in records for need in needs(read_call(record), scope)]


@pytest.fixture
def deployment(aws: AwsEnv) -> Deployment:
    """A template of one bucket and the consumers table, both under one key."""
    key = {"Fn::GetAtt": ["Key", "Arn"]}
    template = {
        "Resources": {
            "Key": {"Type": "AWS::KMS::Key", "Properties": {"KeyPolicy": {"Statement": []}}},
            "Bucket": {
                "Type": "AWS::S3::Bucket",
                "Properties": {
                    "BucketName": aws.config.bucket,
                    "BucketEncryption": {
                        "ServerSideEncryptionConfiguration": [
                            {
                                "ServerSideEncryptionByDefault": {
                                    "SSEAlgorithm": "aws:kms",
                                    "KMSMasterKeyID": key,
                                },
                                "BucketKeyEnabled": True,
                            }
                        ]
                    },
                },
            },
            "Consumers": {
                "Type": "AWS::DynamoDB::Table",
                "Properties": {
                    "TableName": aws.config.consumers_table,
                    "KeySchema": [
                        {"AttributeName": C.ATTR_CONSUMER_GROUP, "KeyType": "HASH"},
                        {"AttributeName": C.ATTR_PARTITION_ID, "KeyType": "RANGE"},
                    ],
                    "SSESpecification": {"SSEEnabled": True, "KMSMasterKeyId": key},
                },
            },
        }
    }
    return Deployment(template)


def test_a_transaction_is_authorized_item_by_item_with_its_leading_keys(
    aws: AwsEnv, deployment: Deployment
) -> None:
    def act(clients: Any) -> None:
        item = {C.ATTR_CONSUMER_GROUP: {"S": "$ingest"}, C.ATTR_PARTITION_ID: {"S": "p0"}}
        clients.dynamodb.transact_write_items(
            TransactItems=[
                {"Put": {"TableName": aws.config.consumers_table, "Item": item}},
                {
                    "Update": {
                        "TableName": aws.config.consumers_table,
                        "Key": {**item, C.ATTR_PARTITION_ID: {"S": "p1"}},
                        "UpdateExpression": "SET #c = :c",
                        "ExpressionAttributeNames": {"#c": "checkpoint"},
                        "ExpressionAttributeValues": {":c": {"S": "1"}},
                    }
                },
            ]
        )

    found = authorizations(deployment, recorded(aws, act))
    table = deployment.get_att("Consumers", "Arn")
    key = deployment.get_att("Key", "Arn")
    assert [(n.action, n.resource) for n in found] == [
        ("dynamodb:PutItem", table),
        ("dynamodb:UpdateItem", table),
        ("kms:Decrypt", key),
    ]
    assert found[0].context["dynamodb:LeadingKeys"] == ["$ingest"]
    assert found[2].key_policy and found[2].context["kms:ViaService"] == (
        "dynamodb.us-east-1.amazonaws.com"
    )


def test_a_query_names_its_partition_key_value(aws: AwsEnv, deployment: Deployment) -> None:
    def act(clients: Any) -> None:
        clients.dynamodb.query(
            TableName=aws.config.consumers_table,
            KeyConditionExpression="#g = :g",
            ExpressionAttributeNames={"#g": C.ATTR_CONSUMER_GROUP},
            ExpressionAttributeValues={":g": {"S": "billing"}},
        )

    (query, _decrypt) = authorizations(deployment, recorded(aws, act))
    assert query.action == "dynamodb:Query"
    assert query.context["dynamodb:LeadingKeys"] == ["billing"]


def test_a_conditional_create_carries_if_none_match_and_needs_a_data_key(
    aws: AwsEnv, deployment: Deployment
) -> None:
    def act(clients: Any) -> None:
        clients.s3.put_object(
            Bucket=aws.config.bucket, Key="events/p/0", Body=b"x", IfNoneMatch="*"
        )

    put, generate = authorizations(deployment, recorded(aws, act))
    assert (put.action, put.resource) == (
        "s3:PutObject",
        f"arn:aws:s3:::{aws.config.bucket}/events/p/0",
    )
    assert put.context["s3:if-none-match"] == "*"
    assert put.context["s3:ObjectCreationOperation"] == "true"
    assert put.context["aws:SecureTransport"] == "true"
    assert generate.action == "kms:GenerateDataKey"
    # with an S3 Bucket Key, the encryption context is the bucket's ARN
    assert (
        generate.context["kms:EncryptionContext:aws:s3:arn"] == f"arn:aws:s3:::{aws.config.bucket}"
    )


def test_a_copy_is_not_taken_for_a_put(aws: AwsEnv, deployment: Deployment) -> None:
    aws.clients.s3.put_object(Bucket=aws.config.bucket, Key="a", Body=b"x")

    def act(clients: Any) -> None:
        clients.s3.copy_object(
            Bucket=aws.config.bucket, Key="b", CopySource={"Bucket": aws.config.bucket, "Key": "a"}
        )

    (record,) = recorded(aws, act)
    assert read_call(record).operation == "CopyObject"
    with pytest.raises(UnknownOperation, match="s3:CopyObject"):
        authorizations(deployment, [record])


def test_a_missing_key_needs_list_bucket_to_be_a_404(aws: AwsEnv, deployment: Deployment) -> None:
    def act(clients: Any) -> None:
        clients.s3.get_object(Bucket=aws.config.bucket, Key="events/p/missing")

    get, listing = authorizations(deployment, recorded(aws, act))
    assert get.action == "s3:GetObject"
    assert (listing.action, listing.resource) == (
        "s3:ListBucket",
        f"arn:aws:s3:::{aws.config.bucket}",
    )
    assert "s3:prefix" not in listing.context and "404" in listing.why


def test_the_audit_of_a_test_run_names_an_action_no_statement_allows(aws: AwsEnv) -> None:
    """The whole-run audit checks actions only: a runner of a group the stack does not have
    stands for the stack's group; an action none of its statements allows is reported."""
    role = {"Type": "AWS::IAM::Role", "Properties": {"AssumeRolePolicyDocument": {}}}
    policy = {
        "Type": "AWS::IAM::Policy",
        "Properties": {
            "Roles": [{"Ref": "RunnerRole"}],
            "PolicyDocument": {
                "Statement": [{"Effect": "Allow", "Action": "s3:ListBucket", "Resource": "*"}]
            },
        },
    }
    runner = {
        "Type": "AWS::Lambda::Function",
        "Properties": {
            "Handler": "lambdas.lambda_consumer.handler.handler",
            "Role": {"Fn::GetAtt": ["RunnerRole", "Arn"]},
        },
    }
    groups = {"Value": {"Fn::Join": ["", ['{"billing":{"runner":"', {"Ref": "Runner"}, '"}}']]}}
    deployment = Deployment(
        {
            "Resources": {"RunnerRole": role, "RunnerPolicy": policy, "Runner": runner},
            "Outputs": {"LambdaConsumerGroups": groups},
        }
    )
    principal = principals.function("lambdas.lambda_consumer.handler", "some-test-group")
    clients = aws.config.clients(principal)
    with request_log.recording() as recording:
        clients.s3.list_objects_v2(Bucket=aws.config.bucket, Prefix="events/")
        clients.s3.put_object(Bucket=aws.config.bucket, Key="x", Body=b"x")
    report, problems = audit(recording.records, deployment)
    assert "s3:ListBucket (1x)" in report and "s3:PutObject (1x)" in report
    (problem,) = problems
    assert problem.startswith(f"- {principal}: s3:PutObject is allowed by none of its statements")
