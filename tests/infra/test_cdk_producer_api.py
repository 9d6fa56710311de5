"""Producer API: IAM auth on every method, throttling, access logs, request size limits."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

from aws_cdk import App, Stack
from aws_cdk import aws_lambda as lambda_
from aws_cdk.assertions import Match, Template

from infra import constants as IC
from infra.producer_api import ProducerApi
from infra.settings import StackSettings
from infra.storage import Storage
from shardlog import constants as C
from tests.infra.cdk_synth import Synthesized, cdk_context


def test_every_method_requires_iam_auth(synth: Synthesized) -> None:
    methods = synth.resources("AWS::ApiGateway::Method")
    assert methods
    for logical_id, method in methods.items():
        assert method["Properties"]["AuthorizationType"] == "AWS_IAM", logical_id


def _route(synth: Synthesized, path: str, http_method: str) -> dict[str, Any]:
    resources = synth.resources("AWS::ApiGateway::Resource")
    parts = path.strip("/").split("/")
    parent: Any = None
    for part in parts:
        matches = [
            logical_id
            for logical_id, r in resources.items()
            if r["Properties"]["PathPart"] == part
            and (parent is None or r["Properties"]["ParentId"] == {"Ref": parent})
        ]
        assert len(matches) == 1, f"{path}: no unique resource for {part}"
        parent = matches[0]
    (method,) = [
        m["Properties"]
        for m in synth.resources("AWS::ApiGateway::Method").values()
        if m["Properties"]["ResourceId"] == {"Ref": parent}
        and m["Properties"]["HttpMethod"] == http_method
    ]
    return method


def _invokes_producer(synth: Synthesized, method: dict[str, Any]) -> bool:
    function_id = synth.logical_id(synth.stack.producer_api.function)
    integration = method["Integration"]
    return integration["Type"] == "AWS_PROXY" and function_id in json.dumps(integration["Uri"])


def test_records_and_health_routes_reach_the_producer(synth: Synthesized) -> None:
    records = _route(synth, "/v1/records", "POST")
    health = _route(synth, "/v1/health", "GET")
    assert _invokes_producer(synth, records)
    assert _invokes_producer(synth, health)
    function = synth.resources("AWS::Lambda::Function")[
        synth.logical_id(synth.stack.producer_api.function)
    ]
    assert function["Properties"]["Handler"] == IC.PRODUCER_API_HANDLER


def test_records_body_is_validated_against_the_kinesis_limits(synth: Synthesized) -> None:
    records = _route(synth, "/v1/records", "POST")
    validator_id = records["RequestValidatorId"]["Ref"]
    validator = synth.resources("AWS::ApiGateway::RequestValidator")[validator_id]
    assert validator["Properties"]["ValidateRequestBody"] is True
    model_id = records["RequestModels"]["application/json"]["Ref"]
    schema = synth.resources("AWS::ApiGateway::Model")[model_id]["Properties"]["Schema"]
    array = schema["properties"]["records"]
    assert array["maxItems"] == C.KINESIS_MAX_RECORDS_PER_PUT
    item = array["items"]["properties"]
    assert item["partitionKey"]["maxLength"] == C.PARTITION_KEY_MAX_CHARS
    # the base64 length of the largest record Kinesis accepts
    assert item["data"]["maxLength"] == len(base64.b64encode(bytes(C.KINESIS_MAX_RECORD_BYTES)))
    # API Gateway lets through every field the handler takes (it forbids others itself).
    from lambdas.producer_api.models import RecordIn

    assert set(item) == set(RecordIn.model_fields)
    assert item["recordId"]["maxLength"] == 64 and item["resent"]["type"] == "boolean"


def test_stage_throttles_and_writes_access_logs(synth: Synthesized, template: Template) -> None:
    access_logs = synth.logical_id(synth.stack.producer_api.access_logs)
    (stage,) = synth.resources("AWS::ApiGateway::Stage").values()
    log_setting = stage["Properties"]["AccessLogSetting"]
    assert access_logs in json.dumps(log_setting["DestinationArn"])
    assert "$context.identity.caller" in log_setting["Format"]
    template.has_resource_properties(
        "AWS::ApiGateway::Stage",
        {
            "TracingEnabled": True,
            "MethodSettings": Match.array_with(
                [
                    Match.object_like(
                        {
                            "HttpMethod": "*",
                            "ResourcePath": "/*",
                            "ThrottlingRateLimit": IC.DEFAULT_API_RATE_LIMIT,
                            "ThrottlingBurstLimit": IC.DEFAULT_API_BURST_LIMIT,
                            "LoggingLevel": "ERROR",
                            "DataTraceEnabled": False,
                        }
                    )
                ]
            ),
        },
    )


def test_health_is_throttled_apart_from_writes(synth: Synthesized) -> None:
    (stage,) = synth.resources("AWS::ApiGateway::Stage").values()
    settings = {
        (m["ResourcePath"], m["HttpMethod"]): m for m in stage["Properties"]["MethodSettings"]
    }
    # API Gateway escapes the path's slashes in method settings.
    health = settings[("/~1v1~1health", "GET")]
    assert health["ThrottlingRateLimit"] == IC.HEALTH_RATE_LIMIT
    assert health["ThrottlingBurstLimit"] == IC.HEALTH_BURST_LIMIT
    assert IC.HEALTH_RATE_LIMIT < IC.DEFAULT_API_RATE_LIMIT
    assert ("/~1v1~1records", "POST") not in settings, "writes keep the stage's limits"


def test_access_logs_are_kept_a_year(synth: Synthesized) -> None:
    group = synth.resources("AWS::Logs::LogGroup")[
        synth.logical_id(synth.stack.producer_api.access_logs)
    ]
    assert group["Properties"]["RetentionInDays"] == 365
    assert group["DeletionPolicy"] == "Retain"
    assert "KmsKeyId" in group["Properties"]


def test_throttled_requests_are_counted_from_the_access_logs(synth: Synthesized) -> None:
    (metric_filter,) = synth.resources("AWS::Logs::MetricFilter").values()
    props = metric_filter["Properties"]
    assert props["LogGroupName"] == {"Ref": synth.logical_id(synth.stack.producer_api.access_logs)}
    assert props["FilterPattern"] == '{ $.status = "429" }'
    (transformation,) = props["MetricTransformations"]
    assert transformation["MetricName"] == IC.METRIC_API_THROTTLED
    assert transformation["MetricNamespace"] == C.METRICS_NAMESPACE
    # the access log format writes the status as a string: the pattern must compare strings
    (stage,) = synth.resources("AWS::ApiGateway::Stage").values()
    assert '"status":"$context.status"' in stage["Properties"]["AccessLogSetting"]["Format"]


def test_resource_policy_admits_only_this_accounts_principals(synth: Synthesized) -> None:
    (api,) = synth.resources("AWS::ApiGateway::RestApi").values()
    statements = {s["Sid"]: s for s in api["Properties"]["Policy"]["Statement"]}
    deny = statements["DenyEveryoneElse"]
    assert deny["Effect"] == "Deny" and deny["Action"] == "execute-api:Invoke"
    assert deny["Resource"] == "execute-api:/*"
    assert deny["Condition"] == {
        "StringNotEquals": {"aws:PrincipalAccount": {"Ref": "AWS::AccountId"}}
    }
    assert statements["AllowProducers"]["Effect"] == "Allow"


def test_resource_policy_names_the_producer_roles_when_given(tmp_path: Path) -> None:
    producers = ["arn:aws:iam::123456789012:role/producer-a", "arn:aws:iam::123456789012:user/b"]
    app = App(context=cdk_context(**{IC.CTX_PRODUCER_PRINCIPAL_ARNS: producers}))
    stack = Stack(app, "ApiOnly")
    settings = StackSettings.from_context(stack.node)
    storage = Storage(stack, "Storage", settings=settings)
    (tmp_path / "handler.py").write_text("def handler(event, context): pass\n")
    code = lambda_.Code.from_asset(str(tmp_path))  # a stand-in: nothing to bundle
    ProducerApi(stack, "ProducerApi", storage=storage, settings=settings, code=code)
    (api,) = Template.from_stack(stack).find_resources("AWS::ApiGateway::RestApi").values()
    statements = {s["Sid"]: s for s in api["Properties"]["Policy"]["Statement"]}
    assert statements["DenyEveryoneElse"]["Condition"] == {
        "ArnNotEquals": {"aws:PrincipalArn": producers}
    }
    assert statements["AllowProducers"]["Principal"] == {"AWS": producers}


def test_api_is_regional(template: Template) -> None:
    template.has_resource_properties(
        "AWS::ApiGateway::RestApi", {"EndpointConfiguration": {"Types": ["REGIONAL"]}}
    )
