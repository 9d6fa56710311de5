"""One way to build a shardlog Lambda: shared asset, pinned Powertools layer, own log group,
own role with only the log-writing permissions; each domain adds its named grants."""

from __future__ import annotations

from dataclasses import dataclass, field

from aws_cdk import Aws, Duration, RemovalPolicy, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
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


@dataclass(frozen=True)
class FunctionSpec:
    handler: str
    description: str
    timeout_s: int
    memory_mb: int = 256
    environment: dict[str, str] = field(default_factory=dict)


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
        self.log_group = logs.LogGroup(self, "Logs", removal_policy=RemovalPolicy.DESTROY)
        # RetentionDays is an enum; the validated day count goes straight to CloudFormation.
        log_group_resource = self.log_group.node.default_child
        assert isinstance(log_group_resource, logs.CfnLogGroup)
        log_group_resource.retention_in_days = log_retention_days

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
            layers=[powertools_layer(self)],
            tracing=lambda_.Tracing.ACTIVE,
            environment={
                "POWERTOOLS_SERVICE_NAME": C.POWERTOOLS_SERVICE_NAME,
                "POWERTOOLS_METRICS_NAMESPACE": C.METRICS_NAMESPACE,
                **spec.environment,
            },
        )
