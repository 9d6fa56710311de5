"""The synthesized stack deployed through the embedded AWS's CloudFormation, and every Lambda
function of it run from its asset alone, with only what Lambda provides.

The deploy: the template as synthesized, its assets published as cdk-assets publishes them
(shardlog.local.deploy); what the embedded CloudFormation skips is listed with its reason
(shardlog.local.cloudformation.SKIPPED_TYPES). The functions: each one's handler imported in
a fresh interpreter that sees the asset directory of the cloud assembly, the pinned runtime
SDK and the pinned Powertools layer (infra/lambda-runtime.txt), and nothing else; its cold
start with the settings the deployed function has, then one invocation against the
embedded AWS.
"""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from infra import constants as IC
from infra.lambda_runtime import runtime_site
from shardlog import constants as C
from shardlog.config import ShardlogConfig
from shardlog.consumer.creation import read_group
from shardlog.local import cloudformation
from shardlog.local.deploy import Deployment
from shardlog.local.embedded import resource_specs
from shardlog.local.http_api import to_proxy_event
from shardlog.stack import DeployedStack
from tests.infra.cdk_synth import TEST_LAMBDA_CONSUMERS, Synthesized
from tests.infra.shipped import run_shipped, shardlog_asset_dirs

RESPONSES_BUCKET = "shipped-cloudformation-responses"
# The deployment (tests/infra/conftest.py) is shared: the ingest event names a shard the
# stream does not have, so its made-up sequence number never becomes the checkpoint of a
# shard that other tests ingest from.
SHARD = "shardId-000000000099"
SEQUENCE = "49590338271490256608559692538361571095921575989136588898"
TRACE_ID = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1"


@pytest.fixture(scope="module")
def config(stack: DeployedStack) -> ShardlogConfig:
    """The deployed stack's embedded AWS and region (tests/infra/conftest.py)."""
    return ShardlogConfig(endpoint_url=stack.endpoint_url, region=stack.region)


def test_the_stack_deploys_and_every_skipped_type_is_explained(
    deployment: Deployment, config: ShardlogConfig
) -> None:
    cfn = config.clients().client("cloudformation")
    described = cfn.describe_stacks(StackName=deployment.stack_name)["Stacks"][0]
    assert described["StackStatus"] == "CREATE_COMPLETE"
    listed = cfn.get_paginator("list_stack_resources").paginate(StackName=deployment.stack_name)
    logical = {r["LogicalResourceId"] for page in listed for r in page["StackResourceSummaries"]}
    assert logical == set(deployment.template["Resources"])
    types = {r["Type"] for r in deployment.template["Resources"].values()}
    skipped = cloudformation.unsupported_types(types)
    assert skipped <= set(cloudformation.SKIPPED_TYPES), (
        f"resource types the embedded CloudFormation skips without a reason: "
        f"{sorted(skipped - set(cloudformation.SKIPPED_TYPES))}"
    )
    # The ones the code needs are created, not skipped.
    needed = {
        "AWS::DynamoDB::Table",
        "AWS::Kinesis::Stream",
        "AWS::S3::Bucket",
        "AWS::SQS::Queue",
        "AWS::Lambda::Function",
        "AWS::Lambda::EventSourceMapping",
        "AWS::EMRServerless::Application",
        "AWS::Glue::Database",
        "AWS::Athena::WorkGroup",
    }
    assert needed <= types and not needed & skipped


def test_tables_streams_and_queues_are_the_ones_the_code_needs(
    stack: DeployedStack, config: ShardlogConfig
) -> None:
    clients = config.clients()
    deployed = stack.config()
    wanted = resource_specs(deployed, shard_count=1)
    ddb = clients.dynamodb
    for table in ("partitions_table", "consumers_table"):
        spec = wanted[table]
        got = ddb.describe_table(TableName=spec["TableName"])["Table"]
        assert got["KeySchema"] == spec["KeySchema"], table
        assert {(a["AttributeName"], a["AttributeType"]) for a in spec["AttributeDefinitions"]} <= {
            (a["AttributeName"], a["AttributeType"]) for a in got["AttributeDefinitions"]
        }
        # No TTL: nothing of the log's state may expire (trim horizons are explicit).
        ttl = ddb.describe_time_to_live(TableName=spec["TableName"])["TimeToLiveDescription"]
        assert ttl["TimeToLiveStatus"] == "DISABLED", table
    partitions = ddb.describe_table(TableName=deployed.partitions_table)["Table"]
    assert partitions["StreamSpecification"] == wanted["partitions_table"]["StreamSpecification"]
    assert clients.kinesis.describe_stream_summary(StreamName=deployed.stream_name)
    # The ingest event source as the poller applies it locally.
    ingest = stack.outputs[IC.OUTPUT_INGEST_FUNCTION]
    (mapping,) = [
        m
        for m in clients.client("lambda").list_event_source_mappings(FunctionName=ingest)[
            "EventSourceMappings"
        ]
        if m["EventSourceArn"].endswith(f"/{deployed.stream_name}")
    ]
    for key, value in wanted["event_source"].items():
        assert mapping[key] == value, key
    # Each Lambda consumer group's wake queue: FIFO, outliving a runner's timeout.
    sqs = clients.client("sqs")
    spec = wanted["lambda_consumers"]["wake_queue"]
    groups = stack.lambda_consumer_groups
    assert set(groups) == {"invoices", "audit"}
    for group in groups.values():
        attrs = sqs.get_queue_attributes(QueueUrl=group["wakeQueueUrl"], AttributeNames=["All"])[
            "Attributes"
        ]
        assert attrs["FifoQueue"] == "true"
        # High throughput: per message group (one per partition), docs/SCALE.md.
        assert attrs["DeduplicationScope"] == spec["DeduplicationScope"]
        assert attrs["FifoThroughputLimit"] == spec["FifoThroughputLimit"]
        assert int(attrs["VisibilityTimeout"]) >= spec["VisibilityTimeout"]
        assert json.loads(attrs["RedrivePolicy"])["maxReceiveCount"] == spec["maxReceiveCount"]


def test_every_function_names_the_stacks_own_resources(
    stack: DeployedStack, deployment: Deployment, config: ShardlogConfig, synth: Synthesized
) -> None:
    deployed = stack.config()
    names = {
        C.ENV_STREAM_NAME: deployed.stream_name,
        C.ENV_BUCKET_NAME: deployed.bucket,
        C.ENV_PARTITIONS_TABLE: deployed.partitions_table,
        C.ENV_CONSUMERS_TABLE: deployed.consumers_table,
    }
    lam = config.clients().client("lambda")
    functions = shardlog_asset_dirs(deployment, synth.outdir)
    assert len(functions) >= 6
    for logical_id in functions:
        physical = _physical(config, deployment, logical_id)
        env = lam.get_function_configuration(FunctionName=physical)["Environment"]["Variables"]
        for var, value in names.items():
            if var in env:
                assert env[var] == value, (logical_id, var)


def _physical(config: ShardlogConfig, deployment: Deployment, logical_id: str) -> str:
    cfn = config.clients().client("cloudformation")
    detail = cfn.describe_stack_resource(
        StackName=deployment.stack_name, LogicalResourceId=logical_id
    )["StackResourceDetail"]
    return str(detail["PhysicalResourceId"])


def _events(stack: DeployedStack) -> dict[str, dict[str, Any]]:
    """One event per handler, of the shape its trigger sends."""
    body = json.dumps(
        {"records": [{"partitionKey": "shipped", "data": base64.b64encode(b"api").decode()}]}
    )
    return {
        IC.INGEST_HANDLER: {
            "Records": [
                {
                    "eventID": f"{SHARD}:{SEQUENCE}",
                    "eventSource": "aws:kinesis",
                    "kinesis": {
                        "partitionKey": "shipped",
                        "data": base64.b64encode(b"as shipped").decode(),
                        "sequenceNumber": SEQUENCE,
                        "approximateArrivalTimestamp": 1_767_225_600.0,
                    },
                }
            ]
        },
        IC.SHARD_SYNC_HANDLER: {"source": "aws.events", "detail-type": "Scheduled Event"},
        IC.PRODUCER_API_HANDLER: to_proxy_event(
            "POST", "/v1/records", [("Content-Type", "application/json")], body.encode()
        ),
        IC.CONSUMER_WAKER_HANDLER: {"source": "aws.scheduler"},
        IC.LAMBDA_CONSUMER_HANDLER: {
            "Records": [
                {
                    "messageId": "m-1",
                    "receiptHandle": "r-1",
                    "body": json.dumps(
                        {"group": "{group}", "partitionId": "shardId-000000000099", "reason": "t"}
                    ),
                    "attributes": {"MessageGroupId": "shardId-000000000099"},
                    "messageAttributes": {},
                    "eventSource": "aws:sqs",
                }
            ]
        },
        IC.GROUP_REGISTRATION_HANDLER: {  # CloudFormation's request; the answer goes to S3
            "RequestType": "Create",
            "ResponseURL": "{endpoint}/" + RESPONSES_BUCKET + "/answer",
            "StackId": "shipped",
            "RequestId": "r-1",
            "LogicalResourceId": "Registration",
            "ResourceType": "Custom::ShardlogConsumerGroup",
            "ResourceProperties": {"Group": "shipped-group", "StartingPosition": "LATEST"},
        },
        IC.SPARK_TRIGGER_HANDLER: {
            "job": "analytics",
            "scheduledTime": datetime(2026, 1, 1, tzinfo=UTC).isoformat(),
        },
    }


def test_every_function_runs_from_its_asset_alone(
    stack: DeployedStack, deployment: Deployment, config: ShardlogConfig, synth: Synthesized
) -> None:
    runtime = runtime_site()
    events = _events(stack)
    where = {} if config.region == "us-east-1" else {"LocationConstraint": config.region}
    config.clients().s3.create_bucket(  # where CloudFormation's pre-signed ResponseURL points
        Bucket=RESPONSES_BUCKET, **({"CreateBucketConfiguration": where} if where else {})
    )
    lam = config.clients().client("lambda")
    ran: dict[str, Any] = {}
    for logical_id, asset in shardlog_asset_dirs(deployment, synth.outdir).items():
        function = lam.get_function_configuration(
            FunctionName=_physical(config, deployment, logical_id)
        )
        handler = function["Handler"]
        assert handler in events, f"{logical_id}: no event for handler {handler}: add one"
        variables = function["Environment"]["Variables"]
        event = json.loads(
            json.dumps(events[handler])
            .replace("{group}", _group_of(variables))
            .replace("{endpoint}", str(config.endpoint_url))
        )
        env = {
            "PATH": "/usr/bin:/bin",
            "LANG": "C.UTF-8",
            C.ENV_ENDPOINT_URL: str(config.endpoint_url),
            "AWS_ACCESS_KEY_ID": "shipped",
            "AWS_SECRET_ACCESS_KEY": "shipped",
            C.ENV_REGION: config.region,
            "AWS_DEFAULT_REGION": config.region,
            # What the Lambda runtime sets: the cold start builds the handler at import.
            "AWS_LAMBDA_RUNTIME_API": "127.0.0.1:9001",
            "AWS_LAMBDA_FUNCTION_NAME": function["FunctionName"],
            "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": str(function["MemorySize"]),
            "LAMBDA_TASK_ROOT": str(asset),
            "_X_AMZN_TRACE_ID": TRACE_ID,
            "AWS_XRAY_DAEMON_ADDRESS": "127.0.0.1:2000",
            "AWS_XRAY_CONTEXT_MISSING": "LOG_ERROR",
            **variables,
        }
        outcome = run_shipped(
            asset, runtime, handler, event, env, timeout_ms=1000 * int(function["Timeout"])
        )
        assert outcome["outside"] == [], f"{handler} loaded modules Lambda does not have"
        ran[handler] = outcome["result"]
    _cancel_started_runs(config, ran)
    assert set(ran) == set(events)
    assert ran[IC.INGEST_HANDLER] == {"batchItemFailures": []}
    assert ran[IC.PRODUCER_API_HANDLER]["statusCode"] == 200, ran[IC.PRODUCER_API_HANDLER]
    assert ran[IC.SHARD_SYNC_HANDLER]["shards"] >= 1
    assert ran[IC.SPARK_TRIGGER_HANDLER]["started"] is True
    assert ran[IC.LAMBDA_CONSUMER_HANDLER] == {"batchItemFailures": []}
    assert ran[IC.CONSUMER_WAKER_HANDLER]["source"] == "sweep"
    registered = ran[IC.GROUP_REGISTRATION_HANDLER]
    assert registered["Status"] == "SUCCESS", registered
    answer = config.clients().s3.get_object(Bucket=RESPONSES_BUCKET, Key="answer")["Body"].read()
    assert json.loads(answer) == registered  # what CloudFormation reads
    # The ingest invocation committed its record to the deployed log.
    heads = config.clients().dynamodb.scan(TableName=stack.config().partitions_table)["Items"]
    assert sum(int(i.get("nextSequenceNumber", {"N": "0"})["N"]) for i in heads) >= 1


def _group_of(variables: dict[str, str]) -> str:
    raw = variables.get(C.ENV_LAMBDA_CONSUMER)
    return str(json.loads(raw)["consumer"]["group"]) if raw else "none"


def _cancel_started_runs(config: ShardlogConfig, ran: dict[str, Any]) -> None:
    """The trigger's run would start a local spark-submit: not this test's business."""
    result = ran.get(IC.SPARK_TRIGGER_HANDLER) or {}
    if result.get("jobRunId"):
        emr = config.clients().client("emr-serverless")
        for app in emr.list_applications()["applications"]:
            try:
                emr.cancel_job_run(applicationId=app["id"], jobRunId=result["jobRunId"])
            except Exception:  # another application's run id
                continue


def test_a_module_the_asset_lacks_fails_the_check(
    stack: DeployedStack,
    deployment: Deployment,
    config: ShardlogConfig,
    synth: Synthesized,
    tmp_path: Path,
) -> None:
    """The check can fail: the same asset without shardlog/idempotence.py (which the ingest
    handler imports) does not start."""
    import shutil

    (ingest_id,) = [
        k
        for k, r in deployment.template["Resources"].items()
        if r["Type"] == "AWS::Lambda::Function"
        and r["Properties"].get("Handler") == IC.INGEST_HANDLER
    ]
    asset = tmp_path / "asset"
    shutil.copytree(shardlog_asset_dirs(deployment, synth.outdir)[ingest_id], asset)
    (asset / "shardlog" / "idempotence.py").unlink()
    with pytest.raises(AssertionError, match=r"No module named 'shardlog\.idempotence'"):
        run_shipped(
            asset,
            runtime_site(),
            IC.INGEST_HANDLER,
            {"Records": []},
            {
                "PATH": "/usr/bin:/bin",
                "AWS_LAMBDA_RUNTIME_API": "127.0.0.1:9001",
                C.ENV_BUCKET_NAME: "b-b-b",
                C.ENV_PARTITIONS_TABLE: "ppp",
                C.ENV_CONSUMERS_TABLE: "ccc",
            },
            timeout_ms=30_000,
        )


def test_the_deploy_registered_each_lambda_consumer_group(
    stack: DeployedStack, config: ShardlogConfig
) -> None:
    """The custom resources ran (their handler, as the deployer runs it): each group exists,
    created at its start position, before any of its runners is woken."""
    consumers = stack.config().consumers_table
    for group in TEST_LAMBDA_CONSUMERS:
        record = read_group(config.clients(), consumers, group["group"])
        assert record is not None and record.kind == "lambda" and record.positioned, group
