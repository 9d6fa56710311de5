"""The shardlog stack: one construct per domain, composed, with stable outputs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aws_cdk import App, Aspects, CfnOutput, Stack
from cdk_nag import AwsSolutionsChecks
from constructs import Construct

from infra import constants as IC
from infra.analytics import SPARK_JOBS_DIR, Analytics
from infra.assets import lambda_code
from infra.consumers import ConsumerGroups
from infra.ingest import Ingest
from infra.lambda_consumers import GroupProps, LambdaConsumers
from infra.monitoring import Monitoring
from infra.nag import acknowledge
from infra.producer_api import ProducerApi
from infra.retention import Retention
from infra.settings import StackSettings
from infra.storage import Storage
from shardlog import constants as C


class ShardlogStack(Stack):
    """Environment-agnostic: no account or region is looked up at synth time."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        job_scripts_dir: Path = SPARK_JOBS_DIR,
        **kwargs: Any,
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)
        self.settings = StackSettings.from_context(self.node)
        code = lambda_code()
        self.storage = Storage(self, "Storage", settings=self.settings)
        self.ingest = Ingest(
            self, "Ingest", storage=self.storage, settings=self.settings, code=code
        )
        self.producer_api = ProducerApi(
            self, "ProducerApi", storage=self.storage, settings=self.settings, code=code
        )
        self.analytics = Analytics(
            self,
            "Analytics",
            storage=self.storage,
            job_scripts_dir=job_scripts_dir,
            code=code,
            settings=self.settings,
        )
        self.consumer_groups = ConsumerGroups(
            self, "ConsumerGroups", storage=self.storage, settings=self.settings
        )
        self.lambda_consumers = LambdaConsumers(
            self,
            "LambdaConsumers",
            groups=[GroupProps(g) for g in self.settings.lambda_consumers],
            storage=self.storage,
            code=code,
            log_retention_days=self.settings.log_retention_days,
        )
        self.retention = (
            Retention(
                self,
                "Retention",
                storage=self.storage,
                settings=self.settings,
                code=code,
                days=self.settings.record_retention_days,
            )
            if self.settings.record_retention_days is not None
            else None
        )
        self.monitoring = Monitoring(
            self,
            "Monitoring",
            settings=self.settings,
            storage=self.storage,
            ingest=self.ingest,
            producer_api=self.producer_api,
            analytics=self.analytics,
            lambda_consumers=self.lambda_consumers,
        )
        self._outputs()
        acknowledge(self)

    def _outputs(self) -> None:
        storage = self.storage
        outputs = {
            C.OUTPUT_STREAM_NAME: storage.stream.stream_name,
            IC.OUTPUT_STREAM_ARN: storage.stream.stream_arn,
            C.OUTPUT_BUCKET_NAME: storage.bucket.bucket_name,
            C.OUTPUT_PARTITIONS_TABLE: storage.partitions_table.table_name,
            C.OUTPUT_CONSUMERS_TABLE: storage.consumers_table.table_name,
            IC.OUTPUT_INGEST_FUNCTION: self.ingest.function.function_name,
            IC.OUTPUT_FAILURE_QUEUE_URL: self.ingest.failure_queue.queue_url,
            C.OUTPUT_API_URL: self.producer_api.api.url,
            C.OUTPUT_EMR_APPLICATION_ID: self.analytics.application.attr_application_id,
            C.OUTPUT_EMR_EXECUTION_ROLE_ARN: self.analytics.execution_role.role_arn,
            C.OUTPUT_JOB_SCRIPTS_URI: self.analytics.job_script_uri(""),
            IC.OUTPUT_ALARM_TOPIC_ARN: self.monitoring.topic.topic_arn,
            IC.OUTPUT_DASHBOARD_NAME: self.monitoring.dashboard.dashboard_name,
            IC.OUTPUT_SPARK_DLQ_URL: self.analytics.dead_letter_queue.queue_url,
            IC.OUTPUT_CONSUMER_GROUP_POLICIES: self.consumer_groups.policy_arns_json(),
            C.OUTPUT_LAMBDA_CONSUMERS: self.lambda_consumers.outputs_json(),
            C.OUTPUT_ATHENA_WORKGROUP: self.analytics.workgroup.ref,
            C.OUTPUT_LAKE_TABLE: f"{IC.LAKE_DATABASE}.{IC.LAKE_TABLE}",
        }
        for name, value in outputs.items():
            # The logical id is the output name, so it never changes with the construct tree.
            CfnOutput(self, name, value=value).override_logical_id(name)


def build_app(app: App, *, job_scripts_dir: Path = SPARK_JOBS_DIR) -> ShardlogStack:
    """Add the stack and the cdk-nag AwsSolutions checks.

    With the `core:annotationsInValidationReport` flag of cdk.json, any unacknowledged
    finding fails synth, so neither `cdk synth` nor `cdk deploy` can ship one.
    """
    stack_name = str(app.node.try_get_context(IC.CTX_STACK_NAME) or C.DEFAULT_STACK_NAME)
    stack = ShardlogStack(
        app,
        stack_name,
        job_scripts_dir=job_scripts_dir,
        description="shardlog: serverless exactly-once event log (Kinesis to S3)",
    )
    Aspects.of(app).add(AwsSolutionsChecks(verbose=True))
    return stack
