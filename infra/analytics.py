"""Analytics: the EMR Serverless Spark application, its job execution role, and the
spark_jobs/ scripts deployed to an artifacts bucket.

The trigger that starts runs (issue 6) plugs in through `grant_start_job_run` and
`job_script_uri`; nothing here starts a job.
"""

from __future__ import annotations

from pathlib import Path

from aws_cdk import Aws, Duration, RemovalPolicy, Stack
from aws_cdk import aws_emrserverless as emrs
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_s3_deployment as s3deploy
from constructs import Construct

from infra import constants as IC
from infra.assets import REPO_ROOT
from infra.nag import acknowledge_job_run_grant
from infra.storage import Storage
from shardlog import constants as C

SPARK_JOBS_DIR = REPO_ROOT / "spark_jobs"
EMR_SERVICE_PRINCIPAL = "emr-serverless.amazonaws.com"
# Only sources a job run loads: no tests, caches or notebooks.
JOB_SCRIPT_EXCLUDES = ["**/__pycache__/**", "**/*.pyc", "tests/**", "**/.ipynb_checkpoints/**"]
# The jobs read the committed log, then write their own prefixes. Spark's overwrite of a
# deterministic output path deletes the files it replaces, hence DeleteObject there only.
OUTPUT_OBJECT_ACTIONS = ["s3:DeleteObject", "s3:GetObject", "s3:PutObject"]
# Partitions: read nextSequenceNumber (what is committed). Consumers: the compaction
# watermark is a consumer-group item advanced with a conditional write.
JOB_PARTITIONS_ACTIONS = ["dynamodb:GetItem", "dynamodb:Query"]
JOB_CONSUMERS_ACTIONS = ["dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem"]
KMS_DATA_ACTIONS = ["kms:Decrypt", "kms:DescribeKey", "kms:GenerateDataKey"]


def has_job_scripts(directory: Path) -> bool:
    return directory.is_dir() and any(directory.rglob("*.py"))


class Analytics(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        storage: Storage,
        job_scripts_dir: Path = SPARK_JOBS_DIR,
    ) -> None:
        super().__init__(scope, construct_id)
        self.storage = storage
        self.job_scripts_dir = job_scripts_dir
        self.artifacts_key = kms.Key(
            self,
            "ArtifactsKey",
            description="shardlog: encrypts Spark job scripts and EMR Serverless logs",
            enable_key_rotation=True,
            removal_policy=RemovalPolicy.RETAIN,
        )
        self.artifacts_bucket = self._artifacts_bucket()
        self.application = self._application()
        self.execution_role = self._execution_role()
        self.job_scripts = self._deploy_job_scripts()

    @property
    def application_arn(self) -> str:
        return self.application.attr_arn

    def job_script_uri(self, relative_path: str) -> str:
        """The S3 URI of a file of spark_jobs/ once deployed (the job run's entryPoint)."""
        return self.artifacts_bucket.s3_url_for_object(f"{IC.JOB_SCRIPTS_PREFIX}{relative_path}")

    def grant_start_job_run(self, grantee: iam.IGrantable) -> None:
        """What a scheduler needs: start and watch runs of this application with this role."""
        grantee.grant_principal.add_to_principal_policy(
            iam.PolicyStatement(
                actions=["emr-serverless:GetJobRun", "emr-serverless:StartJobRun"],
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
        role = iam.Role(
            self,
            "ExecutionRole",
            description="shardlog Spark jobs on EMR Serverless",
            assumed_by=iam.ServicePrincipal(
                EMR_SERVICE_PRINCIPAL,
                conditions={"StringEquals": {"aws:SourceAccount": Aws.ACCOUNT_ID}},
            ),
        )
        bucket = storage.bucket
        read_prefixes = [C.EVENTS_PREFIX, IC.COMPACTED_PREFIX, IC.ANALYTICS_PREFIX]
        statements = [
            iam.PolicyStatement(
                actions=["s3:ListBucket"],
                resources=[bucket.bucket_arn],
                conditions={"StringLike": {"s3:prefix": [f"{p}*" for p in read_prefixes]}},
            ),
            iam.PolicyStatement(
                actions=["s3:GetObject"], resources=[bucket.arn_for_objects(f"{C.EVENTS_PREFIX}*")]
            ),
            iam.PolicyStatement(
                actions=OUTPUT_OBJECT_ACTIONS,
                resources=[
                    bucket.arn_for_objects(f"{IC.COMPACTED_PREFIX}*"),
                    bucket.arn_for_objects(f"{IC.ANALYTICS_PREFIX}*"),
                ],
            ),
            iam.PolicyStatement(
                actions=["s3:GetObject"],
                resources=[self.artifacts_bucket.arn_for_objects(f"{IC.JOB_SCRIPTS_PREFIX}*")],
            ),
            iam.PolicyStatement(
                actions=["s3:PutObject"],
                resources=[self.artifacts_bucket.arn_for_objects(f"{IC.EMR_LOGS_PREFIX}*")],
            ),
            iam.PolicyStatement(
                actions=JOB_PARTITIONS_ACTIONS, resources=[storage.partitions_table.table_arn]
            ),
            iam.PolicyStatement(
                actions=JOB_CONSUMERS_ACTIONS, resources=[storage.consumers_table.table_arn]
            ),
            iam.PolicyStatement(
                actions=KMS_DATA_ACTIONS,
                resources=[storage.key.key_arn, self.artifacts_key.key_arn],
            ),
        ]
        for statement in statements:
            role.add_to_policy(statement)
        return role

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
        )
