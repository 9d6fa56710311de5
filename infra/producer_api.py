"""Producer API: a regional REST API with IAM (SigV4) auth in front of the producer Lambda.

`POST /v1/records` puts records on the stream, `GET /v1/health` answers liveness. The
producer handler (lambdas/producer_api/handler.py) owns the request semantics; API Gateway
rejects unsigned callers, requests over the stage rate, and bodies that break the size
limits below before the Lambda is invoked.
"""

from __future__ import annotations

import math
from typing import Any

from aws_cdk import Aws, Stack
from aws_cdk import aws_apigateway as apigw
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Construct

from infra import constants as IC
from infra.functions import FunctionSpec, ShardlogFunction, encrypted_log_group
from infra.settings import StackSettings
from infra.storage import Storage, name_in_key_policy
from shardlog import constants as C
from shardlog import idempotence
from shardlog.function_settings import ProducerApiSettings

STAGE_NAME = "api"
# The handler puts every request's records with one PutRecords (never PutRecord).
PRODUCER_KINESIS_ACTIONS = ["kinesis:PutRecords"]
# Writing to a KMS-encrypted stream needs a data key; reads of it are not the producer's job.
PRODUCER_KMS_ACTIONS = ["kms:GenerateDataKey"]
INVOKE = "execute-api:Invoke"
EVERY_METHOD = "execute-api:/*"  # in an API's resource policy: every stage, method and path
HEALTH = "health"  # GET /v1/health
# Base64 grows data by 4/3: the longest `data` string that can decode to one Kinesis record.
MAX_DATA_BASE64_CHARS = 4 * math.ceil(C.KINESIS_MAX_RECORD_BYTES / 3)

# The body of POST /v1/records, checked by API Gateway (JSON Schema draft 4). The limits are
# Kinesis PutRecords' own, so a request that passes here can only fail in Kinesis for
# throughput, never for shape.
RECORDS_REQUEST_SCHEMA = apigw.JsonSchema(
    schema=apigw.JsonSchemaVersion.DRAFT4,
    title="PutRecordsRequest",
    type=apigw.JsonSchemaType.OBJECT,
    required=["records"],
    additional_properties=False,
    properties={
        "records": apigw.JsonSchema(
            type=apigw.JsonSchemaType.ARRAY,
            min_items=1,
            max_items=C.KINESIS_MAX_RECORDS_PER_PUT,
            items=apigw.JsonSchema(
                type=apigw.JsonSchemaType.OBJECT,
                required=["partitionKey", "data"],
                additional_properties=False,
                properties={
                    "partitionKey": apigw.JsonSchema(
                        type=apigw.JsonSchemaType.STRING,
                        min_length=1,
                        max_length=C.PARTITION_KEY_MAX_CHARS,
                    ),
                    "data": apigw.JsonSchema(
                        type=apigw.JsonSchemaType.STRING, max_length=MAX_DATA_BASE64_CHARS
                    ),
                    "explicitHashKey": apigw.JsonSchema(
                        type=apigw.JsonSchemaType.STRING,
                        pattern=C.EXPLICIT_HASH_KEY_PATTERN,
                    ),
                    # Idempotent produce (docs/API.md): the handler checks the rest.
                    "recordId": apigw.JsonSchema(
                        type=apigw.JsonSchemaType.STRING,
                        min_length=1,
                        max_length=idempotence.RECORD_ID_MAX_BYTES,
                        pattern=idempotence.RECORD_ID_PATTERN,
                    ),
                    "resent": apigw.JsonSchema(type=apigw.JsonSchemaType.BOOLEAN),
                },
            ),
        )
    },
)


class ProducerApi(Construct):
    """Extend it by adding resources under `self.v1` with `self.integration`."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        storage: Storage,
        settings: StackSettings,
        code: lambda_.Code,
    ) -> None:
        super().__init__(scope, construct_id)
        self.storage = storage
        self.settings = settings
        self.producer = self._producer_function(code)
        self.access_logs = self._access_logs()
        self.throttled_filter = self._throttled_requests_metric()
        self.api = self._rest_api()
        self.integration = apigw.LambdaIntegration(self.producer.function)
        self.validator = self.api.add_request_validator(
            "Validator", validate_request_body=True, validate_request_parameters=True
        )
        self.v1 = self.api.root.add_resource("v1")
        self._routes()

    @property
    def function(self) -> lambda_.Function:
        return self.producer.function

    def _producer_function(self, code: lambda_.Code) -> ShardlogFunction:
        storage = self.storage
        fn = ShardlogFunction(
            self,
            "ProducerFunction",
            spec=FunctionSpec(
                handler=IC.PRODUCER_API_HANDLER,
                description="Puts records from the producer API onto the Kinesis stream",
                timeout_s=IC.PRODUCER_TIMEOUT_S,
                environment=ProducerApiSettings.for_stack(
                    stream_name=storage.stream.stream_name
                ).environment(),
            ),
            code=code,
            log_retention_days=self.settings.log_retention_days,
        )
        for actions, resources in (
            (PRODUCER_KINESIS_ACTIONS, [storage.stream.stream_arn]),
            (PRODUCER_KMS_ACTIONS, [storage.key.key_arn]),
        ):
            fn.role.add_to_principal_policy(
                iam.PolicyStatement(actions=actions, resources=resources)
            )
        name_in_key_policy(storage.key, fn.role, PRODUCER_KMS_ACTIONS, ["kinesis"])
        return fn

    def _access_logs(self) -> logs.LogGroup:
        # The API's audit trail: a year, whatever shardlog:logRetentionDays says.
        return encrypted_log_group(self, "AccessLogs", IC.API_ACCESS_LOG_RETENTION_DAYS)

    def _throttled_requests_metric(self) -> logs.MetricFilter:
        """API Gateway has no 429 metric of its own (4XXError counts them with the rest)."""
        return logs.MetricFilter(
            self,
            "ThrottledRequests",
            log_group=self.access_logs,
            metric_namespace=C.METRICS_NAMESPACE,
            metric_name=IC.METRIC_API_THROTTLED,
            # json_with_standard_fields writes the status as a string.
            filter_pattern=logs.FilterPattern.string_value("$.status", "=", "429"),
            metric_value="1",
            default_value=0,
        )

    @property
    def api_name(self) -> str:
        """Unique per stack, so the ApiName dimension of its metrics is too."""
        return f"{Stack.of(self).stack_name}-{IC.API_NAME_SUFFIX}"

    def _resource_policy(self) -> iam.PolicyDocument:
        """Who may call the API: the producer principals of shardlog:producerPrincipalArns,
        else principals of this account. With IAM auth in one account, an identity policy
        allowing execute-api:Invoke is enough on its own, so the limit is a Deny."""
        arns = list(self.settings.producer_principal_arns)
        outsiders: dict[str, dict[str, Any]]
        if arns:
            principals: list[iam.IPrincipal] = [iam.ArnPrincipal(a) for a in arns]
            outsiders = {"ArnNotEquals": {"aws:PrincipalArn": arns}}
        else:
            principals = [iam.AccountRootPrincipal()]
            outsiders = {"StringNotEquals": {"aws:PrincipalAccount": Aws.ACCOUNT_ID}}
        return iam.PolicyDocument(
            statements=[
                iam.PolicyStatement(
                    sid="AllowProducers",
                    principals=principals,
                    actions=[INVOKE],
                    resources=[EVERY_METHOD],
                ),
                iam.PolicyStatement(
                    sid="DenyEveryoneElse",
                    effect=iam.Effect.DENY,
                    principals=[iam.AnyPrincipal()],
                    actions=[INVOKE],
                    resources=[EVERY_METHOD],
                    conditions=outsiders,
                ),
            ]
        )

    def _rest_api(self) -> apigw.RestApi:
        s = self.settings
        return apigw.RestApi(
            self,
            "Api",
            rest_api_name=self.api_name,
            description="shardlog producer API (IAM auth)",
            policy=self._resource_policy(),
            endpoint_types=[apigw.EndpointType.REGIONAL],
            # Every method requires SigV4; there is no anonymous route.
            default_method_options=apigw.MethodOptions(
                authorization_type=apigw.AuthorizationType.IAM
            ),
            # Stage logging needs the account-level API Gateway CloudWatch role; CDK keeps it
            # (RETAIN) so another stack in the account never loses it.
            cloud_watch_role=True,
            deploy_options=apigw.StageOptions(
                stage_name=STAGE_NAME,
                throttling_rate_limit=s.api_rate_limit,
                throttling_burst_limit=s.api_burst_limit,
                # Liveness probes get their own, lower, limit and never use up the writes'.
                method_options={
                    f"/v1/{HEALTH}/GET": apigw.MethodDeploymentOptions(
                        throttling_rate_limit=IC.HEALTH_RATE_LIMIT,
                        throttling_burst_limit=IC.HEALTH_BURST_LIMIT,
                    )
                },
                access_log_destination=apigw.LogGroupLogDestination(self.access_logs),
                access_log_format=apigw.AccessLogFormat.json_with_standard_fields(
                    caller=True,
                    http_method=True,
                    ip=True,
                    protocol=True,
                    request_time=True,
                    resource_path=True,
                    response_length=True,
                    status=True,
                    user=True,
                ),
                logging_level=apigw.MethodLoggingLevel.ERROR,
                # Bodies are user data: never copy them into execution logs.
                data_trace_enabled=False,
                metrics_enabled=True,
                tracing_enabled=True,
            ),
        )

    def _routes(self) -> None:
        model = self.api.add_model(
            "PutRecordsModel", content_type="application/json", schema=RECORDS_REQUEST_SCHEMA
        )
        records = self.v1.add_resource("records")
        records.add_method(
            "POST",
            self.integration,
            request_validator=self.validator,
            request_models={"application/json": model},
        )
        health = self.v1.add_resource(HEALTH)
        health.add_method("GET", self.integration, request_validator=self.validator)

    def add_route(self, path: str, method: str, **options: Any) -> apigw.Method:
        """Route another method to the producer Lambda under /v1 (IAM auth and validation)."""
        resource = self.v1.resource_for_path(path)
        return resource.add_method(
            method, self.integration, request_validator=self.validator, **options
        )
