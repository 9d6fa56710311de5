"""Analytics: the EMR Serverless Spark application, its job execution role, the spark_jobs/
scripts and their dependency archive in an artifacts bucket, and the scheduled trigger.

One EventBridge Scheduler schedule per job invokes the trigger Lambda (lambdas/spark_trigger)
with the job and the schedule time; the Lambda starts a run only when none of that job is
active, with a clientToken derived from the schedule time (docs/SPARK.md).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from aws_cdk import Annotations, Aws, Duration, RemovalPolicy, Size, Stack
from aws_cdk import aws_athena as athena
from aws_cdk import aws_emrserverless as emrs
from aws_cdk import aws_glue as glue
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_s3_deployment as s3deploy
from aws_cdk import aws_scheduler as scheduler
from aws_cdk import aws_sqs as sqs
from constructs import Construct, Node

from infra import constants as IC
from infra.assets import REPO_ROOT, lambda_code
from infra.functions import (
    FunctionSpec,
    QueueDestination,
    ShardlogFunction,
    encrypted_log_group,
)
from infra.nag import acknowledge_job_run_grant
from infra.settings import (
    AnalyticsRateMinutes,
    CompactionRateMinutes,
    MaintenanceRateMinutes,
    SettingsError,
    StackSettings,
    context_setting,
)
from infra.storage import Storage, failure_queue, name_in_key_policy
from shardlog import constants as C
from shardlog import settings as S
from shardlog.spark.jobs import ANALYTICS, COMPACT, MAINTAIN

SPARK_JOBS_DIR = REPO_ROOT / "spark_jobs"
EMR_SERVICE_PRINCIPAL = "emr-serverless.amazonaws.com"
# Only sources a job run loads: no tests, caches or notebooks.
JOB_SCRIPT_EXCLUDES = ["**/__pycache__/**", "**/*.pyc", "tests/**", "**/.ipynb_checkpoints/**"]
# The jobs read the committed log, then write their own prefixes. A retry overwrites a file
# with a PUT at the same deterministic key: nothing is ever deleted, so no DeleteObject.
OUTPUT_OBJECT_ACTIONS = ["s3:GetObject", "s3:PutObject"]
# Partitions: list them with nextSequenceNumber (what is committed; a table of one item per
# shard, so a Scan; no single-item read). Consumers: the compaction watermark is a
# consumer-group item advanced with a conditional UpdateItem; analytics reads the group's
# items with a Query. Both touch only the $compaction items (Storage.grant_consumer_items):
# never a lease of ingest or of a consumer group.
JOB_PARTITIONS_ACTIONS = ["dynamodb:Scan"]
JOB_CONSUMERS_ACTIONS = ["dynamodb:GetItem", "dynamodb:Query", "dynamodb:UpdateItem"]
# The lake table (docs/LAKE.md): its data and metadata files are written once and never
# overwritten; a run that lost a commit race deletes its own files, and maintenance deletes
# files no snapshot references, hence DeleteObject, on the table's prefix only.
LAKE_OBJECT_ACTIONS = ["s3:GetObject", "s3:PutObject", "s3:DeleteObject"]
# pyiceberg's Glue catalog: read the database, create the table once, then commit by
# UpdateTable (conditional on the table's version). The stack creates the database.
LAKE_GLUE_ACTIONS = ["glue:GetDatabase", "glue:GetTable", "glue:CreateTable", "glue:UpdateTable"]
LAKE_DATABASE, LAKE_TABLE = IC.LAKE_DATABASE, IC.LAKE_TABLE
KMS_DATA_ACTIONS = ["kms:Decrypt", "kms:DescribeKey", "kms:GenerateDataKey"]
JOB_KEY_SERVICES = ["s3", "dynamodb"]
# Sending to the KMS-encrypted dead-letter queue (SQS makes a data key with the sender's rights).
DLQ_SEND_ACTIONS = ["sqs:SendMessage"]
DLQ_KMS_ACTIONS = ["kms:Decrypt", "kms:GenerateDataKey"]
SCHEDULER_PRINCIPAL = "scheduler.amazonaws.com"
# EventBridge Scheduler puts the invocation's schedule time here (a context attribute).
SCHEDULED_TIME = "<aws.scheduler.scheduled-time>"


def has_job_scripts(directory: Path) -> bool:
    return directory.is_dir() and any(directory.rglob("*.py"))


def rate_expression(minutes: int) -> str:
    return f"rate({minutes} minute{'s' if minutes != 1 else ''})"


@dataclass(frozen=True)
class AnalyticsSettings:
    """The schedule of the Spark runs and the archive to ship, from CDK context."""

    compaction_rate_minutes: int = IC.DEFAULT_COMPACTION_RATE_MINUTES
    analytics_rate_minutes: int = IC.DEFAULT_ANALYTICS_RATE_MINUTES
    maintenance_rate_minutes: int = IC.DEFAULT_MAINTENANCE_RATE_MINUTES
    compaction_max_records: int = C.DEFAULT_COMPACTION_MAX_RECORDS
    spark_archive: Path = REPO_ROOT / IC.DEFAULT_SPARK_ARCHIVE

    @classmethod
    def from_context(cls, node: Node) -> AnalyticsSettings:
        archive = node.try_get_context(IC.CTX_SPARK_ARCHIVE) or IC.DEFAULT_SPARK_ARCHIVE
        if not str(archive).endswith((".tar.gz", ".tgz", ".zip")):
            raise SettingsError(f"context {IC.CTX_SPARK_ARCHIVE}={archive!r} is not an archive")
        return cls(
            compaction_rate_minutes=context_setting(
                node,
                IC.CTX_COMPACTION_RATE_MINUTES,
                CompactionRateMinutes,
                IC.DEFAULT_COMPACTION_RATE_MINUTES,
            ),
            analytics_rate_minutes=context_setting(
                node,
                IC.CTX_ANALYTICS_RATE_MINUTES,
                AnalyticsRateMinutes,
                IC.DEFAULT_ANALYTICS_RATE_MINUTES,
            ),
            maintenance_rate_minutes=context_setting(
                node,
                IC.CTX_MAINTENANCE_RATE_MINUTES,
                MaintenanceRateMinutes,
                IC.DEFAULT_MAINTENANCE_RATE_MINUTES,
            ),
            # The trigger validates it with the same schema at cold start.
            compaction_max_records=context_setting(
                node,
                IC.CTX_COMPACTION_MAX_RECORDS,
                S.CompactionMaxRecords,
                C.DEFAULT_COMPACTION_MAX_RECORDS,
            ),
            spark_archive=REPO_ROOT / str(archive),  # an absolute path stays itself
        )


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
        self.artifacts_key = kms.Key(
            self,
            "ArtifactsKey",
            description="shardlog: encrypts Spark job scripts and EMR Serverless logs",
            enable_key_rotation=True,
            removal_policy=RemovalPolicy.RETAIN,
        )
        self.artifacts_bucket = self._artifacts_bucket()
        # aws-cdk-lib's BucketDeployment handlers log here: encrypted and kept, like ours.
        self.deployment_logs = encrypted_log_group(
            self, "DeploymentLogs", self.stack_settings.log_retention_days
        )
        self.application = self._application()
        self.lake_database = self._lake_database()
        self.execution_role = self._execution_role()
        self.workgroup = self._athena_workgroup()
        self.named_queries = self._named_queries()
        self.job_scripts = self._deploy_job_scripts()
        self.deps_archive = self._deploy_deps_archive()
        self.dead_letter_queue = self._dead_letter_queue()
        self.trigger = self._trigger_function(code or lambda_code())
        self.grant_start_job_run(self.trigger.role)
        self.schedule_group = self._schedule_group()
        self.scheduler_role, self.schedules = self._schedules()

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
        """What a scheduler needs: see the active runs of this application (ListJobRuns) and
        start one with this role; it never watches a run (no GetJobRun)."""
        grantee.grant_principal.add_to_principal_policy(
            iam.PolicyStatement(
                actions=["emr-serverless:StartJobRun"],
                resources=[self.application_arn, f"{self.application_arn}/jobruns/*"],
            )
        )
        grantee.grant_principal.add_to_principal_policy(
            iam.PolicyStatement(
                actions=["emr-serverless:ListJobRuns"], resources=[self.application_arn]
            )
        )
        grantee.grant_principal.add_to_principal_policy(
            iam.PolicyStatement(
                actions=["iam:PassRole"],
                resources=[self.execution_role.role_arn],
                conditions={"StringEquals": {"iam:PassedToService": EMR_SERVICE_PRINCIPAL}},
            )
        )
        # After the statements exist: the acknowledgement attaches to the policy resource.
        if isinstance(grantee, Construct):
            acknowledge_job_run_grant(grantee, self.application)

    def _artifacts_bucket(self) -> s3.Bucket:
        # Separate from the log bucket, with its own key: the deployment's custom resource
        # gets CDK's broad grants on this bucket and key, never on the log or the data key.
        return s3.Bucket(
            self,
            "ArtifactsBucket",
            encryption=s3.BucketEncryption.KMS,
            encryption_key=self.artifacts_key,
            bucket_key_enabled=True,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            enforce_ssl=True,
            minimum_tls_version=1.2,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            versioned=True,
            server_access_logs_bucket=self.storage.access_logs_bucket,
            server_access_logs_prefix=f"{IC.ACCESS_LOGS_PREFIX}artifacts-bucket/",
            lifecycle_rules=[
                s3.LifecycleRule(
                    id="expire-emr-logs",
                    prefix=IC.EMR_LOGS_PREFIX,
                    expiration=Duration.days(90),
                ),
                s3.LifecycleRule(
                    id="expire-noncurrent-versions",
                    noncurrent_version_expiration=Duration.days(30),
                    abort_incomplete_multipart_upload_after=Duration.days(1),
                ),
            ],
            removal_policy=RemovalPolicy.RETAIN,
        )

    def _application(self) -> emrs.CfnApplication:
        return emrs.CfnApplication(
            self,
            "SparkApplication",
            name=f"{Stack.of(self).stack_name}-spark",
            release_label=IC.EMR_RELEASE_LABEL,
            type="SPARK",
            architecture="X86_64",
            # Runs start the application on demand and it stops when idle: no cost between
            # scheduled runs.
            auto_start_configuration=emrs.CfnApplication.AutoStartConfigurationProperty(
                enabled=True
            ),
            auto_stop_configuration=emrs.CfnApplication.AutoStopConfigurationProperty(
                enabled=True, idle_timeout_minutes=IC.EMR_IDLE_TIMEOUT_MINUTES
            ),
            # A cap on the whole application, so a runaway job cannot run up the bill.
            maximum_capacity=emrs.CfnApplication.MaximumAllowedResourcesProperty(
                cpu=IC.EMR_MAX_CPU, memory=IC.EMR_MAX_MEMORY, disk=IC.EMR_MAX_DISK
            ),
            monitoring_configuration=emrs.CfnApplication.MonitoringConfigurationProperty(
                s3_monitoring_configuration=emrs.CfnApplication.S3MonitoringConfigurationProperty(
                    log_uri=self.artifacts_bucket.s3_url_for_object(IC.EMR_LOGS_PREFIX),
                    encryption_key_arn=self.artifacts_key.key_arn,
                )
            ),
        )

    def _execution_role(self) -> iam.Role:
        storage = self.storage
        app_arn = self.application_arn
        role = iam.Role(
            self,
            "ExecutionRole",
            description="shardlog Spark jobs on EMR Serverless",
            # Only job runs of this application, in this account (confused deputy).
            assumed_by=iam.ServicePrincipal(
                EMR_SERVICE_PRINCIPAL,
                conditions={
                    "StringEquals": {"aws:SourceAccount": Aws.ACCOUNT_ID},
                    "ArnLike": {"aws:SourceArn": [app_arn, f"{app_arn}/*"]},
                },
            ),
        )
        bucket = storage.bucket
        statements = [
            # Without a condition on s3:prefix: pyiceberg's file IO (pyarrow) asks S3 whether a
            # metadata file exists before it writes it (HeadObject of a key that is not there
            # yet), and S3 answers 404 only to a caller allowed to ListBucket the bucket, else
            # 403, which fails the commit. That check carries no prefix to condition on.
            iam.PolicyStatement(actions=["s3:ListBucket"], resources=[bucket.bucket_arn]),
            iam.PolicyStatement(
                actions=["s3:GetObject"], resources=[bucket.arn_for_objects(f"{C.EVENTS_PREFIX}*")]
            ),
            iam.PolicyStatement(
                actions=OUTPUT_OBJECT_ACTIONS,
                resources=[bucket.arn_for_objects(f"{IC.ANALYTICS_PREFIX}*")],
            ),
            iam.PolicyStatement(
                actions=LAKE_OBJECT_ACTIONS,
                resources=[bucket.arn_for_objects(f"{IC.LAKE_PREFIX}{LAKE_DATABASE}/*")],
            ),
            iam.PolicyStatement(actions=LAKE_GLUE_ACTIONS, resources=self.lake_glue_arns()),
            iam.PolicyStatement(
                actions=["s3:GetObject"],
                resources=[
                    self.artifacts_bucket.arn_for_objects(f"{IC.JOB_SCRIPTS_PREFIX}*"),
                    self.artifacts_bucket.arn_for_objects(f"{IC.SPARK_DEPS_PREFIX}*"),
                ],
            ),
            iam.PolicyStatement(
                actions=["s3:PutObject"],
                resources=[self.artifacts_bucket.arn_for_objects(f"{IC.EMR_LOGS_PREFIX}*")],
            ),
            iam.PolicyStatement(
                actions=JOB_PARTITIONS_ACTIONS, resources=[storage.partitions_table.table_arn]
            ),
            iam.PolicyStatement(
                actions=KMS_DATA_ACTIONS,
                resources=[storage.key.key_arn, self.artifacts_key.key_arn],
            ),
        ]
        for statement in statements:
            role.add_to_policy(statement)
        storage.grant_consumer_items(role, JOB_CONSUMERS_ACTIONS, C.COMPACTION_GROUP)
        # The data key's policy names the role. The artifacts key's cannot: the role trusts
        # the application, whose log configuration names that key (a cycle); the role's
        # identity policy above is its grant there.
        name_in_key_policy(storage.key, role, KMS_DATA_ACTIONS, JOB_KEY_SERVICES)
        return role

    def lake_glue_arns(self) -> list[str]:
        """The Glue catalog, the lake database and its table: nothing else in Glue."""
        prefix = f"arn:{Aws.PARTITION}:glue:{Aws.REGION}:{Aws.ACCOUNT_ID}"
        return [
            f"{prefix}:catalog",
            f"{prefix}:database/{LAKE_DATABASE}",
            f"{prefix}:table/{LAKE_DATABASE}/{LAKE_TABLE}",
        ]

    def _lake_database(self) -> glue.CfnDatabase:
        return glue.CfnDatabase(
            self,
            "LakeDatabase",
            catalog_id=Aws.ACCOUNT_ID,
            database_input=glue.CfnDatabase.DatabaseInputProperty(
                name=LAKE_DATABASE,
                description="shardlog: the lake table (docs/LAKE.md), appended by compaction",
            ),
        )

    def _athena_workgroup(self) -> athena.CfnWorkGroup:
        """Athena engine 3 (Iceberg), results encrypted with the artifacts key, enforced."""
        location = f"s3://{self.artifacts_bucket.bucket_name}/{IC.ATHENA_RESULTS_PREFIX}"
        return athena.CfnWorkGroup(
            self,
            "AthenaWorkgroup",
            name=IC.ATHENA_WORKGROUP,
            description="shardlog: queries of the lake table",
            recursive_delete_option=False,
            work_group_configuration=athena.CfnWorkGroup.WorkGroupConfigurationProperty(
                enforce_work_group_configuration=True,
                publish_cloud_watch_metrics_enabled=True,
                engine_version=athena.CfnWorkGroup.EngineVersionProperty(
                    selected_engine_version="Athena engine version 3"
                ),
                result_configuration=athena.CfnWorkGroup.ResultConfigurationProperty(
                    output_location=location,
                    encryption_configuration=athena.CfnWorkGroup.EncryptionConfigurationProperty(
                        encryption_option="SSE_KMS", kms_key=self.artifacts_key.key_arn
                    ),
                ),
            ),
        )

    def _named_queries(self) -> list[athena.CfnNamedQuery]:
        table = f'"{LAKE_DATABASE}"."{LAKE_TABLE}"'
        queries = {
            "RecordsPerKeyToday": (
                "shardlog: records per partition key today",
                f"SELECT partition_key, count(*) AS records FROM {table}\n"
                "WHERE arrival_time >= date_trunc('day', current_timestamp)\n"
                "GROUP BY partition_key ORDER BY records DESC LIMIT 20",
            ),
            "Watermarks": (
                "shardlog: the watermarks each compaction committed",
                f"SELECT committed_at, snapshot_id, summary['shardlog.watermarks'] AS watermarks\n"
                f'FROM "{LAKE_DATABASE}"."{LAKE_TABLE}$snapshots" ORDER BY committed_at DESC',
            ),
        }
        named = []
        for construct_id, (name, sql) in queries.items():
            query = athena.CfnNamedQuery(
                self,
                construct_id,
                name=name,
                database=LAKE_DATABASE,
                work_group=IC.ATHENA_WORKGROUP,
                query_string=sql,
            )
            query.add_dependency(self.workgroup)
            query.add_dependency(self.lake_database)
            named.append(query)
        return named

    def _deploy_job_scripts(self) -> s3deploy.BucketDeployment | None:
        # Git keeps no empty directory, so a clone may have no spark_jobs/ at all; with no
        # script there is nothing to run, and the deployment appears with the first one.
        if not has_job_scripts(self.job_scripts_dir):
            return None
        return s3deploy.BucketDeployment(
            self,
            "JobScripts",
            sources=[s3deploy.Source.asset(str(self.job_scripts_dir), exclude=JOB_SCRIPT_EXCLUDES)],
            destination_bucket=self.artifacts_bucket,
            destination_key_prefix=IC.JOB_SCRIPTS_PREFIX,
            # Removed scripts disappear from S3 too, so no run can pick up a stale job.
            prune=True,
            retain_on_delete=False,
            log_group=self.deployment_logs,
        )

    def _deploy_deps_archive(self) -> s3deploy.BucketDeployment | None:
        # The archive carries third-party wheels, so it is built by `make spark-archive` (pip,
        # network) rather than at synth, which stays offline. Without it synth still works and
        # says so; the trigger then refuses to start runs (its settings require the archive).
        archive = self.settings.spark_archive
        if not archive.is_file():
            Annotations.of(self).add_warning_v2(
                "shardlog:sparkArchiveMissing",
                f"{archive} does not exist: run `make spark-archive` before `cdk deploy`, or "
                "the scheduled Spark runs cannot start.",
            )
            return None
        return s3deploy.BucketDeployment(
            self,
            "SparkDeps",
            sources=[s3deploy.Source.asset(str(archive.parent), exclude=["*.partial"])],
            destination_bucket=self.artifacts_bucket,
            destination_key_prefix=IC.SPARK_DEPS_PREFIX,
            prune=True,
            retain_on_delete=False,
            log_group=self.deployment_logs,
            # ~90 MB of wheels: room to unzip and copy it.
            memory_limit=1024,
            ephemeral_storage_size=Size.gibibytes(2),
        )

    def _dead_letter_queue(self) -> sqs.Queue:
        """Where a Spark start that failed for good ends: a schedule that could not invoke
        the trigger, or a trigger invocation that failed after Lambda's retries."""
        return failure_queue(self, "DeadLetterQueue", self.artifacts_key)

    def _grant_dead_letters(self, role: iam.IRole) -> None:
        role.add_to_principal_policy(
            iam.PolicyStatement(
                actions=DLQ_SEND_ACTIONS, resources=[self.dead_letter_queue.queue_arn]
            )
        )
        role.add_to_principal_policy(
            iam.PolicyStatement(actions=DLQ_KMS_ACTIONS, resources=[self.artifacts_key.key_arn])
        )
        name_in_key_policy(self.artifacts_key, role, DLQ_KMS_ACTIONS, ["sqs"])

    def _trigger_function(self, code: lambda_.Code) -> ShardlogFunction:
        storage = self.storage
        spec = FunctionSpec(
            handler=IC.SPARK_TRIGGER_HANDLER,
            description="Starts the scheduled Spark runs on EMR Serverless, never overlapping",
            timeout_s=IC.SPARK_TRIGGER_TIMEOUT_S,
            environment={
                C.ENV_EMR_APPLICATION_ID: self.application.attr_application_id,
                C.ENV_EMR_EXECUTION_ROLE_ARN: self.execution_role.role_arn,
                C.ENV_SPARK_JOBS_URI: self.job_script_uri(""),
                C.ENV_SPARK_DEPS_URI: self.deps_archive_uri or "",
                C.ENV_BUCKET_NAME: storage.bucket.bucket_name,
                C.ENV_PARTITIONS_TABLE: storage.partitions_table.table_name,
                C.ENV_CONSUMERS_TABLE: storage.consumers_table.table_name,
                C.ENV_COMPACTION_MAX_RECORDS: str(self.settings.compaction_max_records),
            },
        )
        fn = ShardlogFunction(
            self,
            "SparkTrigger",
            spec=spec,
            code=code,
            log_retention_days=self.stack_settings.log_retention_days,
        )
        # EventBridge Scheduler invokes Lambda asynchronously: a failing trigger is retried by
        # Lambda, not the scheduler, then dead-lettered here (and its Errors are alarmed).
        fn.function.configure_async_invoke(
            retry_attempts=IC.SPARK_TRIGGER_ASYNC_RETRIES,
            max_event_age=Duration.seconds(IC.SPARK_TRIGGER_MAX_EVENT_AGE_S),
            on_failure=QueueDestination(self.dead_letter_queue),
        )
        self._grant_dead_letters(fn.role)
        return fn

    def _schedule_group(self) -> scheduler.CfnScheduleGroup:
        """The schedules' own group: the scheduler role trusts only schedules of it."""
        stack_name = Stack.of(self).stack_name
        name = f"{stack_name[: 64 - len(IC.SCHEDULE_GROUP_SUFFIX)]}{IC.SCHEDULE_GROUP_SUFFIX}"
        return scheduler.CfnScheduleGroup(self, "ScheduleGroup", name=name)

    def _schedules(self) -> tuple[iam.Role, dict[str, scheduler.CfnSchedule]]:
        group = self.schedule_group
        role = iam.Role(
            self,
            "SchedulerRole",
            description="shardlog: EventBridge Scheduler invokes the Spark trigger",
            # Only schedules of shardlog's group, in this account (confused deputy); Scheduler
            # names the schedule group, never a schedule, as the source.
            assumed_by=iam.ServicePrincipal(
                SCHEDULER_PRINCIPAL,
                conditions={
                    "StringEquals": {"aws:SourceAccount": Aws.ACCOUNT_ID},
                    "ArnEquals": {"aws:SourceArn": group.attr_arn},
                },
            ),
        )
        role.add_to_policy(
            iam.PolicyStatement(
                actions=["lambda:InvokeFunction"], resources=[self.trigger.function.function_arn]
            )
        )
        self._grant_dead_letters(role)
        rates = {
            COMPACT: self.settings.compaction_rate_minutes,
            ANALYTICS: self.settings.analytics_rate_minutes,
            MAINTAIN: self.settings.maintenance_rate_minutes,
        }
        schedules = {
            job: scheduler.CfnSchedule(
                self,
                f"{job.title()}Schedule",
                group_name=group.ref,  # Ref: the group's name, and a dependency on it
                description=f"shardlog: start the Spark {job} job",
                schedule_expression=rate_expression(minutes),
                flexible_time_window=scheduler.CfnSchedule.FlexibleTimeWindowProperty(mode="OFF"),
                target=scheduler.CfnSchedule.TargetProperty(
                    arn=self.trigger.function.function_arn,
                    role_arn=role.role_arn,
                    input=json.dumps({"job": job, "scheduledTime": SCHEDULED_TIME}),
                    # A retry carries the same schedule time, hence the same clientToken.
                    retry_policy=scheduler.CfnSchedule.RetryPolicyProperty(
                        maximum_event_age_in_seconds=60 * minutes,
                        maximum_retry_attempts=10,
                    ),
                    # An invocation the scheduler could not make (throttled, denied) after
                    # its retries: kept, and alarmed through the queue's depth.
                    dead_letter_config=scheduler.CfnSchedule.DeadLetterConfigProperty(
                        arn=self.dead_letter_queue.queue_arn
                    ),
                ),
            )
            for job, minutes in rates.items()
        }
        return role, schedules
