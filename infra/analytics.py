"""Analytics: the Spark jobs on EMR Serverless, the lake's catalog, and their schedules.

One construct composed of three parts, each in its own module and built in this
construct's scope (so the resources keep their logical ids):

- the Spark runtime (infra/spark_runtime.py): the artifacts bucket and key, the EMR
  Serverless application, the job execution role, spark_jobs/ and the dependency archive;
- the lake catalog (infra/lake_catalog.py): the Glue database, the Athena workgroup and its
  named queries;
- the schedules (infra/spark_schedules.py): one EventBridge Scheduler schedule per job
  invokes the trigger Lambda (lambdas/spark_trigger), which starts a run only when none of
  that job is active, with a clientToken derived from the schedule time (docs/SPARK.md);
  with compaction by volume on (``shardlog:compactAfterRecords``/``compactAfterBytes``),
  the partitions table's stream feeds the same Lambda, which starts one compaction run per
  threshold crossing.
"""

from __future__ import annotations

from pathlib import Path

from aws_cdk import RemovalPolicy
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from constructs import Construct

from infra import constants as IC
from infra import lake_catalog, spark_runtime, spark_schedules
from infra.assets import lambda_code
from infra.functions import encrypted_log_group
from infra.settings import AnalyticsSettings, StackSettings
from infra.spark_runtime import SPARK_JOBS_DIR
from infra.storage import Storage
from shardlog.function_settings import SparkTriggerSettings
from shardlog.spark.jobs import ANALYTICS, COMPACT, MAINTAIN

__all__ = ["SPARK_JOBS_DIR", "Analytics"]


class Analytics(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        storage: Storage,
        job_scripts_dir: Path = SPARK_JOBS_DIR,
        code: lambda_.Code | None = None,
        settings: StackSettings | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        self.storage = storage
        self.job_scripts_dir = job_scripts_dir
        self.stack_settings = settings or StackSettings()
        self.settings = AnalyticsSettings.from_context(self.node)
        self.lake_tables = lake_catalog.declared_tables(self.node)
        self._spark_runtime()
        self._lake_catalog()
        self.job_scripts = spark_runtime.deploy_job_scripts(
            self, job_scripts_dir, self.artifacts_bucket, self.deployment_logs
        )
        self.deps_archive = spark_runtime.deploy_deps_archive(
            self, self.settings.spark_archive, self.artifacts_bucket, self.deployment_logs
        )
        self._schedules(code or lambda_code())

    def _spark_runtime(self) -> None:
        self.artifacts_key = kms.Key(
            self,
            "ArtifactsKey",
            description="shardlog: encrypts Spark job scripts and EMR Serverless logs",
            enable_key_rotation=True,
            removal_policy=RemovalPolicy.RETAIN,
        )
        self.artifacts_bucket = spark_runtime.artifacts_bucket(
            self, self.artifacts_key, self.storage.access_logs_bucket
        )
        # aws-cdk-lib's BucketDeployment handlers log here: encrypted and kept, like ours.
        self.deployment_logs = encrypted_log_group(
            self, "DeploymentLogs", self.stack_settings.log_retention_days
        )
        self.application = spark_runtime.spark_application(
            self, self.artifacts_bucket, self.artifacts_key
        )
        self.execution_role = spark_runtime.execution_role(
            self,
            self.storage,
            self.application,
            self.artifacts_bucket,
            self.artifacts_key,
            self.lake_tables,
        )

    def _lake_catalog(self) -> None:
        self.lake_database = lake_catalog.lake_database(self)
        self.workgroup = lake_catalog.athena_workgroup(
            self, self.artifacts_bucket, self.artifacts_key
        )
        self.named_queries = lake_catalog.named_queries(
            self, self.workgroup, self.lake_database, self.lake_tables
        )

    def _schedules(self, code: lambda_.Code) -> None:
        self.dead_letter_queue = spark_schedules.dead_letter_queue(self, self.artifacts_key)
        self.trigger = spark_schedules.trigger_function(
            self,
            code,
            self._trigger_environment(),
            self.dead_letter_queue,
            self.artifacts_key,
            self.stack_settings.log_retention_days,
        )
        self.grant_start_job_run(self.trigger.role)
        self.volume_source = (
            spark_schedules.volume_source(self, self.trigger, self.storage)
            if self.settings.compaction_by_volume
            else None
        )
        self.schedule_group = spark_schedules.schedule_group(self)
        rates = {
            COMPACT: self.settings.compaction_rate_minutes,
            ANALYTICS: self.settings.analytics_rate_minutes,
            MAINTAIN: self.settings.maintenance_rate_minutes,
        }
        self.scheduler_role, self.schedules = spark_schedules.schedules(
            self,
            self.schedule_group,
            self.trigger,
            rates,
            self.dead_letter_queue,
            self.artifacts_key,
        )

    def _trigger_environment(self) -> dict[str, str]:
        return SparkTriggerSettings.for_stack(
            application_id=self.application.attr_application_id,
            execution_role_arn=self.execution_role.role_arn,
            spark_jobs_uri=self.job_script_uri(""),
            # None without the archive: the trigger then refuses to start runs, loudly.
            spark_deps_uri=self.deps_archive_uri,
            bucket=self.storage.bucket.bucket_name,
            tables=self.storage.tables,
            compaction_max_records=self.settings.compaction_max_records,
            **self._volume_environment(),
            **(
                {"lake_tables": lake_catalog.lake_tables_json(self.lake_tables)}
                if self.lake_tables.tables
                else {}
            ),
        ).environment()

    def _volume_environment(self) -> dict[str, int]:
        """The thresholds set (none: compaction by volume is off, the variables unset)."""
        thresholds = {
            "compact_after_records": self.settings.compact_after_records,
            "compact_after_bytes": self.settings.compact_after_bytes,
        }
        return {name: value for name, value in thresholds.items() if value is not None}

    @property
    def application_arn(self) -> str:
        return self.application.attr_arn

    @property
    def deps_archive_uri(self) -> str | None:
        """Where the archive of `make spark-archive` is deployed (None: not built at synth)."""
        if self.deps_archive is None:
            return None
        return self.artifacts_bucket.s3_url_for_object(
            f"{IC.SPARK_DEPS_PREFIX}{self.settings.spark_archive.name}"
        )

    def job_script_uri(self, relative_path: str) -> str:
        """The S3 URI of a file of spark_jobs/ once deployed (the job run's entryPoint)."""
        return self.artifacts_bucket.s3_url_for_object(f"{IC.JOB_SCRIPTS_PREFIX}{relative_path}")

    def grant_start_job_run(self, grantee: iam.IGrantable) -> None:
        """What a scheduler needs to start runs of this application (spark_runtime)."""
        spark_runtime.grant_start_job_run(grantee, self.application, self.execution_role)
