"""Producer API: IAM auth on every method, throttling, access logs, request size limits."""

from __future__ import annotations

import base64
import json
from typing import Any

from aws_cdk.assertions import Match, Template

from infra import constants as IC
from shardlog import constants as C
from tests.infra.cdk_synth import Synthesized


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
            "MethodSettings": [
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
            ],
        },
    )


def test_api_is_regional(template: Template) -> None:
    template.has_resource_properties(
        "AWS::ApiGateway::RestApi", {"EndpointConfiguration": {"Types": ["REGIONAL"]}}
    )
