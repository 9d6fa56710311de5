"""One way to build a shardlog Lambda: shared asset, pinned Powertools layer, own encrypted
log group, own role with only the log-writing permissions; each domain adds its named grants."""

from __future__ import annotations

from dataclasses import dataclass, field

import jsii
from aws_cdk import Aws, Duration, RemovalPolicy, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from infra import constants as IC
from shardlog import constants as C


def powertools_layer(scope: Construct) -> lambda_.ILayerVersion:
    """The official public Powertools layer at the pinned version (one per stack)."""
    stack = Stack.of(scope)
    existing = stack.node.try_find_child("PowertoolsLayer")
    if existing is not None:
        return existing  # type: ignore[return-value]
    # The publishing account is the one for the `aws` partition (Powertools docs).
    arn = (
        f"arn:{Aws.PARTITION}:lambda:{Aws.REGION}:{IC.POWERTOOLS_LAYER_ACCOUNT}:layer:"
        f"{IC.POWERTOOLS_LAYER_NAME}:{IC.POWERTOOLS_LAYER_VERSION}"
    )
    return lambda_.LayerVersion.from_layer_version_arn(stack, "PowertoolsLayer", arn)


def logs_key(scope: Construct) -> kms.Key:
    """The key that encrypts every shardlog log group (one per stack).

    Retained, like the API's access logs: a log group outliving the stack stays readable.
    """
    stack = Stack.of(scope)
    existing = stack.node.try_find_child("LogsKey")
    if isinstance(existing, kms.Key):
        return existing
    key = kms.Key(
        stack,
        "LogsKey",
        description="shardlog: encrypts the Lambda and API access log groups",
        enable_key_rotation=True,
        removal_policy=RemovalPolicy.RETAIN,
    )
    # CloudWatch Logs encrypts with the key on behalf of the log groups of this account and
    # region only (the encryption context names the log group).
    key.add_to_resource_policy(
        iam.PolicyStatement(
            principals=[iam.ServicePrincipal(f"logs.{Aws.REGION}.amazonaws.com")],
            actions=[
                "kms:Encrypt*",
                "kms:Decrypt*",
                "kms:ReEncrypt*",
                "kms:GenerateDataKey*",
                "kms:Describe*",
            ],
            resources=["*"],  # in a key policy, "*" means this key
            conditions={
                "ArnLike": {
                    "kms:EncryptionContext:aws:logs:arn": (
                        f"arn:{Aws.PARTITION}:logs:{Aws.REGION}:{Aws.ACCOUNT_ID}:log-group:*"
                    )
                }
            },
        )
    )
    return key


def encrypted_log_group(scope: Construct, construct_id: str, retention_days: int) -> logs.LogGroup:
    """A log group encrypted with the stack's logs key, kept with its retention period."""
    group = logs.LogGroup(
        scope, construct_id, encryption_key=logs_key(scope), removal_policy=RemovalPolicy.RETAIN
    )
    # RetentionDays is an enum; the validated day count goes straight to CloudFormation.
    resource = group.node.default_child
    assert isinstance(resource, logs.CfnLogGroup)
    resource.retention_in_days = retention_days
    return group


@jsii.implements(lambda_.IDestination)
class QueueDestination:
    """An SQS on-failure destination for asynchronous invocations, without CDK's implicit
    wildcard KMS grant (aws_lambda_destinations.SqsDestination grants kms:ReEncrypt* and
    kms:GenerateDataKey*); the function's role gets named actions from its construct."""

    def __init__(self, queue: sqs.IQueue) -> None:
        self._queue = queue

    def bind(
        self, _scope: Construct, _fn: lambda_.IFunction, *, type: lambda_.DestinationType
    ) -> lambda_.DestinationConfig:
        return lambda_.DestinationConfig(destination=self._queue.queue_arn)


@dataclass(frozen=True)
class FunctionSpec:
    handler: str
    description: str
    timeout_s: int
    memory_mb: int = 256
    environment: dict[str, str] = field(default_factory=dict)
    reserved_concurrency: int | None = None  # None: the account's unreserved pool


class ShardlogFunction(Construct):
    """A Python Lambda with a dedicated role and log group (no managed policies)."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        spec: FunctionSpec,
        code: lambda_.Code,
        log_retention_days: int,
    ) -> None:
        super().__init__(scope, construct_id)
        self.log_group = encrypted_log_group(self, "Logs", log_retention_days)

        self.role = iam.Role(
            self,
            "Role",
            assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
            description=f"shardlog {construct_id}: {spec.description}",
        )
        # Instead of AWSLambdaBasicExecutionRole (logs:* on every log group): this group only.
        self.role.add_to_policy(
            iam.PolicyStatement(
                actions=["logs:CreateLogStream", "logs:PutLogEvents"],
                resources=[self.log_group.log_group_arn],
            )
        )
        self.function = lambda_.Function(
            self,
            "Function",
            runtime=lambda_.Runtime(IC.LAMBDA_PYTHON_RUNTIME, lambda_.RuntimeFamily.PYTHON),
            architecture=lambda_.Architecture.X86_64,  # the pinned layer is the x86_64 build
            code=code,
            handler=spec.handler,
            description=spec.description,
            timeout=Duration.seconds(spec.timeout_s),
            memory_size=spec.memory_mb,
            role=self.role,
            log_group=self.log_group,
            reserved_concurrent_executions=spec.reserved_concurrency,
            layers=[powertools_layer(self)],
            tracing=lambda_.Tracing.ACTIVE,
            environment={
                C.ENV_POWERTOOLS_SERVICE_NAME: C.POWERTOOLS_SERVICE_NAME,
                C.ENV_POWERTOOLS_METRICS_NAMESPACE: C.METRICS_NAMESPACE,
                **spec.environment,
            },
        )
