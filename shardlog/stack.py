"""A deployed shardlog stack, found by its CloudFormation outputs (infra/stack.py writes them,
under the stable names of shardlog/constants.py).

``DeployedStack.describe`` reads one ``DescribeStacks``; everything a tool needs to reach
the deployment (stream, bucket, tables, producer API, Spark application, Athena workgroup,
lake table, Lambda consumer groups) comes from the outputs, never from guessed names.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from shardlog import constants as C
from shardlog.config import ShardlogConfig
from shardlog.exceptions import ShardlogError
from shardlog.spark.jobs import ARCHIVE_NAME, DEPS_PREFIX, SCRIPTS_PREFIX
from shardlog.spark.trigger import SparkTarget

REQUIRED_OUTPUTS = (
    C.OUTPUT_STREAM_NAME,
    C.OUTPUT_BUCKET_NAME,
    C.OUTPUT_PARTITIONS_TABLE,
    C.OUTPUT_CONSUMERS_TABLE,
    C.OUTPUT_API_URL,
    C.OUTPUT_EMR_APPLICATION_ID,
    C.OUTPUT_EMR_EXECUTION_ROLE_ARN,
    C.OUTPUT_JOB_SCRIPTS_URI,
    C.OUTPUT_LAMBDA_CONSUMERS,
    C.OUTPUT_ATHENA_WORKGROUP,
    C.OUTPUT_LAKE_TABLE,
)


class StackOutputsError(ShardlogError):
    """The stack is missing, not deployed, or lacks an output this tool reads."""


@dataclass(frozen=True)
class DeployedStack:
    name: str
    outputs: dict[str, str]
    region: str = C.DEFAULT_REGION
    endpoint_url: str | None = None
    status: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def describe(cls, cloudformation: Any, name: str) -> DeployedStack:
        """The stack's outputs; raises StackOutputsError naming what is missing."""
        from botocore.exceptions import ClientError

        try:
            stacks = cloudformation.describe_stacks(StackName=name)["Stacks"]
        except ClientError as exc:
            raise StackOutputsError(f"stack {name!r}: {exc}") from exc
        stack = stacks[0]
        outputs = {o["OutputKey"]: o["OutputValue"] for o in stack.get("Outputs", [])}
        missing = [key for key in REQUIRED_OUTPUTS if key not in outputs]
        if missing:
            raise StackOutputsError(
                f"stack {name!r} ({stack['StackStatus']}) has no output {', '.join(missing)}: "
                "deploy this version of the stack (`cdk deploy`)"
            )
        meta = cloudformation.meta
        return cls(
            name=name,
            outputs=outputs,
            region=meta.region_name,
            endpoint_url=meta.endpoint_url if "amazonaws.com" not in meta.endpoint_url else None,
            status=stack["StackStatus"],
        )

    def config(self) -> ShardlogConfig:
        """The deployment's coordinates as the SDK, CLI and jobs take them."""
        return ShardlogConfig(
            stream_name=self.outputs[C.OUTPUT_STREAM_NAME],
            bucket=self.outputs[C.OUTPUT_BUCKET_NAME],
            partitions_table=self.outputs[C.OUTPUT_PARTITIONS_TABLE],
            consumers_table=self.outputs[C.OUTPUT_CONSUMERS_TABLE],
            region=self.region,
            endpoint_url=self.endpoint_url,
            extra={"apiUrl": self.api_url, **self.extra},
        )

    @property
    def api_url(self) -> str:
        return self.outputs[C.OUTPUT_API_URL]

    @property
    def athena_workgroup(self) -> str:
        return self.outputs[C.OUTPUT_ATHENA_WORKGROUP]

    @property
    def lake_table(self) -> str:
        return self.outputs[C.OUTPUT_LAKE_TABLE]

    @property
    def lambda_consumer_groups(self) -> dict[str, dict[str, str]]:
        """group -> its wake queue, dead-letter queue, on-failure destination and runner."""
        return dict(json.loads(self.outputs[C.OUTPUT_LAMBDA_CONSUMERS]))

    def spark_target(self) -> SparkTarget:
        """The application and where the stack deployed the scripts and the archive."""
        scripts_uri = self.outputs[C.OUTPUT_JOB_SCRIPTS_URI]
        artifacts = scripts_uri.removesuffix(SCRIPTS_PREFIX)
        return SparkTarget(
            application_id=self.outputs[C.OUTPUT_EMR_APPLICATION_ID],
            execution_role_arn=self.outputs[C.OUTPUT_EMR_EXECUTION_ROLE_ARN],
            scripts_uri=scripts_uri,
            deps_uri=f"{artifacts}{DEPS_PREFIX}{ARCHIVE_NAME}",
        )
