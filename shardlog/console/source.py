"""Where the console reads: one deployment, through the caller's own credentials.

A ``Deployment`` is the same whether it came from a stack's CloudFormation outputs
(``--stack-name``) or from the local runtime's state file / the global options: the names
of the stream, bucket and tables, the Lambda consumer groups and their on-failure
destinations, the lake table and the EMR Serverless application. Nothing here calls AWS
except ``from_stack`` (one DescribeStacks).

Against the embedded AWS the console signs as a principal of its own (``CONSOLE_PRINCIPAL``),
as every local component does, so the embedded AWS records its requests apart
(``shardlog.local.request_log``); against AWS it signs with the caller's credentials.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from shardlog.aws import Clients
from shardlog.config import ShardlogConfig, local_credentials, principal_key
from shardlog.lake.settings import LakeSettings

CONSOLE_PRINCIPAL = "shardlog-console"
_KEY_PROPERTIES = ("glue.access-key-id", "s3.access-key-id")
_SECRET_PROPERTIES = ("glue.secret-access-key", "s3.secret-access-key")


@dataclass(frozen=True)
class LambdaGroupInfo:
    """Where a Lambda consumer group's given-up batches go (a queue URL or a destination ARN)."""

    group: str
    on_failure_queue_url: str | None = None
    on_failure_destination: str | None = None


@dataclass(frozen=True)
class Deployment:
    config: ShardlogConfig
    stack_name: str | None = None
    lambda_groups: dict[str, LambdaGroupInfo] = field(default_factory=dict)
    emr_application_id: str | None = None
    lake_table: str | None = None

    @classmethod
    def from_config(cls, config: ShardlogConfig) -> Deployment:
        """From the state file / options: `shardlog local up`'s groups and lake."""
        groups = {
            name: LambdaGroupInfo(name, on_failure_queue_url=state.get("onFailureQueueUrl"))
            for name, state in (config.extra.get("lambdaConsumers") or {}).items()
        }
        return cls(config=config, lambda_groups=groups)

    @classmethod
    def from_stack(cls, clients: Clients, stack_name: str) -> Deployment:
        """From a deployed stack's outputs (one DescribeStacks)."""
        from shardlog import constants as C
        from shardlog.stack import DeployedStack

        stack = DeployedStack.describe(clients.client("cloudformation"), stack_name)
        groups = {
            name: LambdaGroupInfo(name, on_failure_destination=info.get("onFailureDestination"))
            for name, info in stack.lambda_consumer_groups.items()
        }
        return cls(
            config=stack.config(),
            stack_name=stack_name,
            lambda_groups=groups,
            emr_application_id=stack.outputs.get(C.OUTPUT_EMR_APPLICATION_ID),
            lake_table=stack.lake_table,
        )

    def clients(self) -> Clients:
        return self.config.clients(CONSOLE_PRINCIPAL)

    def lake_settings(self) -> LakeSettings:
        """The lake table's catalog settings; against the embedded AWS signed as the console."""
        settings = LakeSettings.from_config(self.config, self.lake_table)
        named = local_credentials(CONSOLE_PRINCIPAL) if self.config.is_local else None
        if named is None or not any(k in settings.properties for k in _KEY_PROPERTIES):
            return settings
        properties: dict[str, Any] = dict(settings.properties)
        for key in _KEY_PROPERTIES:
            properties[key] = principal_key(CONSOLE_PRINCIPAL)
        for key in _SECRET_PROPERTIES:
            properties[key] = named[1]
        return replace(settings, properties=properties)

    @property
    def where(self) -> str:
        """What the pages say they show (never a credential)."""
        place = self.config.endpoint_url or f"AWS {self.config.region}"
        stack = f"stack {self.stack_name}, " if self.stack_name else ""
        return f"{stack}stream {self.config.stream_name} at {place}"
