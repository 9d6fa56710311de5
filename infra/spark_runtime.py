"""The Spark runtime on EMR Serverless: the artifacts bucket (job scripts, the dependency
archive, run logs) with its own key, the application, the job execution role, the
deployments of spark_jobs/ and of the archive, and the grant to start runs.

Each builder makes its resources in the scope it is given (the Analytics construct), so
their logical ids are those of the construct that composes them.
"""

from __future__ import annotations

from pathlib import Path

from aws_cdk import Annotations, Aws, Duration, Size, Stack
from aws_cdk import aws_emrserverless as emrs
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_s3_deployment as s3deploy
from constructs import Construct

from infra import constants as IC
from infra.assets import REPO_ROOT
from infra.buckets import hardened_bucket
from infra.lake_catalog import LAKE_DATABASE, LAKE_GLUE_ACTIONS, LAKE_OBJECT_ACTIONS, lake_glue_arns
from infra.nag import acknowledge_job_run_grant
from infra.storage import Storage, name_in_key_policy
from shardlog import constants as C
from shardlog.dal.consumers import lake_reader
from shardlog.lake.declared import LakeTables

SPARK_JOBS_DIR = REPO_ROOT / "spark_jobs"
EMR_SERVICE_PRINCIPAL = "emr-serverless.amazonaws.com"
# Only sources a job run loads: no tests, caches or notebooks.
JOB_SCRIPT_EXCLUDES = ["**/__pycache__/**", "**/*.pyc", "tests/**", "**/.ipynb_checkpoints/**"]
# The jobs read the committed log, then write their own prefixes. A retry overwrites a file
# with a PUT at the same deterministic key: nothing is ever deleted, so no DeleteObject.
OUTPUT_OBJECT_ACTIONS = ["s3:GetObject", "s3:PutObject"]
# Partitions: a lake table caught up plans over the live set (a Query of the live index,
# Storage.grant_live_set); before that, and for a backfill, every partition with its
# nextSequenceNumber (a Scan). Consumers: each lake table reads the log as a group of its
# own (shardlog/retirement.py): its "$group" item registers it (GetItem, a conditional
# PutItem), its watermark mirror is advanced with a conditional UpdateItem; analytics reads
# the raw table's items with a Query. All of it only on the lake tables' own items
# (Storage.grant_consumer_items): never a lease of ingest or of a consumer group.
JOB_PARTITIONS_ACTIONS = ["dynamodb:Scan"]
JOB_CONSUMERS_ACTIONS = [
    "dynamodb:GetItem",
    "dynamodb:PutItem",
    "dynamodb:Query",
    "dynamodb:UpdateItem",
]
KMS_DATA_ACTIONS = ["kms:Decrypt", "kms:DescribeKey", "kms:GenerateDataKey"]
JOB_KEY_SERVICES = ["s3", "dynamodb"]


def has_job_scripts(directory: Path) -> bool:
    return directory.is_dir() and any(directory.rglob("*.py"))


def artifacts_bucket(scope: Construct, key: kms.IKey, access_logs: s3.IBucket) -> s3.Bucket:
    # Separate from the log bucket, with its own key: the deployment's custom resource
    # gets CDK's broad grants on this bucket and key, never on the log or the data key.
    return hardened_bucket(
        scope,
        "ArtifactsBucket",
        key=key,
        access_logs=access_logs,
        access_logs_name="artifacts-bucket",
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
    )


def spark_application(
    scope: Construct, artifacts: s3.IBucket, key: kms.IKey
) -> emrs.CfnApplication:
    return emrs.CfnApplication(
        scope,
        "SparkApplication",
        name=f"{Stack.of(scope).stack_name}-spark",
        release_label=C.EMR_RELEASE_LABEL,
        type="SPARK",
        architecture="X86_64",
        # Runs start the application on demand and it stops when idle: no cost between
        # scheduled runs.
        auto_start_configuration=emrs.CfnApplication.AutoStartConfigurationProperty(enabled=True),
        auto_stop_configuration=emrs.CfnApplication.AutoStopConfigurationProperty(
            enabled=True, idle_timeout_minutes=IC.EMR_IDLE_TIMEOUT_MINUTES
        ),
        # A cap on the whole application, so a runaway job cannot run up the bill.
        maximum_capacity=emrs.CfnApplication.MaximumAllowedResourcesProperty(
            cpu=IC.EMR_MAX_CPU, memory=IC.EMR_MAX_MEMORY, disk=IC.EMR_MAX_DISK
        ),
        monitoring_configuration=emrs.CfnApplication.MonitoringConfigurationProperty(
            s3_monitoring_configuration=emrs.CfnApplication.S3MonitoringConfigurationProperty(
                log_uri=artifacts.s3_url_for_object(IC.EMR_LOGS_PREFIX),
                encryption_key_arn=key.key_arn,
            )
        ),
    )


def execution_role(
    scope: Construct,
    storage: Storage,
    application: emrs.CfnApplication,
    artifacts: s3.IBucket,
    artifacts_key: kms.IKey,
    lake_tables: LakeTables | None = None,
) -> iam.Role:
    app_arn = application.attr_arn
    role = iam.Role(
        scope,
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
            resources=[bucket.arn_for_objects(f"{C.ANALYTICS_PREFIX}*")],
        ),
        iam.PolicyStatement(
            actions=LAKE_OBJECT_ACTIONS,
            resources=[bucket.arn_for_objects(f"{C.LAKE_PREFIX}{LAKE_DATABASE}/*")],
        ),
        iam.PolicyStatement(actions=LAKE_GLUE_ACTIONS, resources=lake_glue_arns(lake_tables)),
        iam.PolicyStatement(
            actions=["s3:GetObject"],
            resources=[
                artifacts.arn_for_objects(f"{IC.JOB_SCRIPTS_PREFIX}*"),
                artifacts.arn_for_objects(f"{IC.SPARK_DEPS_PREFIX}*"),
            ],
        ),
        iam.PolicyStatement(
            actions=["s3:PutObject"],
            resources=[artifacts.arn_for_objects(f"{IC.EMR_LOGS_PREFIX}*")],
        ),
        iam.PolicyStatement(
            actions=JOB_PARTITIONS_ACTIONS, resources=[storage.partitions_table.table_arn]
        ),
        iam.PolicyStatement(
            actions=KMS_DATA_ACTIONS,
            resources=[storage.key.key_arn, artifacts_key.key_arn],
        ),
    ]
    for statement in statements:
        role.add_to_policy(statement)
    declared = lake_tables.tables if lake_tables is not None else ()
    readers = [lake_reader(), *(lake_reader(table.name) for table in declared)]
    storage.grant_consumer_items(role, JOB_CONSUMERS_ACTIONS, *readers)
    storage.grant_live_set(role)
    # The data key's policy names the role. The artifacts key's cannot: the role trusts
    # the application, whose log configuration names that key (a cycle); the role's
    # identity policy above is its grant there.
    name_in_key_policy(storage.key, role, KMS_DATA_ACTIONS, JOB_KEY_SERVICES)
    if lake_tables is not None and lake_tables.tables:
        # Compaction counts each typed table's dead-letter records (docs/LAKE.md); the
        # action takes no resource, so the namespace is the condition.
        role.add_to_policy(
            iam.PolicyStatement(
                actions=["cloudwatch:PutMetricData"],
                resources=["*"],
                conditions={"StringEquals": {"cloudwatch:namespace": C.METRICS_NAMESPACE}},
            )
        )
    return role


def deploy_job_scripts(
    scope: Construct, directory: Path, artifacts: s3.IBucket, log_group: logs.ILogGroup
) -> s3deploy.BucketDeployment | None:
    # Git keeps no empty directory, so a clone may have no spark_jobs/ at all; with no
    # script there is nothing to run, and the deployment appears with the first one.
    if not has_job_scripts(directory):
        return None
    return s3deploy.BucketDeployment(
        scope,
        "JobScripts",
        sources=[s3deploy.Source.asset(str(directory), exclude=JOB_SCRIPT_EXCLUDES)],
        destination_bucket=artifacts,
        destination_key_prefix=IC.JOB_SCRIPTS_PREFIX,
        # Removed scripts disappear from S3 too, so no run can pick up a stale job.
        prune=True,
        retain_on_delete=False,
        log_group=log_group,
    )


def deploy_deps_archive(
    scope: Construct, archive: Path, artifacts: s3.IBucket, log_group: logs.ILogGroup
) -> s3deploy.BucketDeployment | None:
    # The archive carries third-party wheels, so it is built by `make spark-archive` (pip,
    # network) rather than at synth, which stays offline. Without it synth still works and
    # says so; the trigger then refuses to start runs (its settings require the archive).
    if not archive.is_file():
        Annotations.of(scope).add_warning_v2(
            "shardlog:sparkArchiveMissing",
            f"{archive} does not exist: run `make spark-archive` before `cdk deploy`, or "
            "the scheduled Spark runs cannot start.",
        )
        return None
    return s3deploy.BucketDeployment(
        scope,
        "SparkDeps",
        sources=[s3deploy.Source.asset(str(archive.parent), exclude=["*.partial"])],
        destination_bucket=artifacts,
        destination_key_prefix=IC.SPARK_DEPS_PREFIX,
        prune=True,
        retain_on_delete=False,
        log_group=log_group,
        # ~90 MB of wheels: room to unzip and copy it.
        memory_limit=1024,
        ephemeral_storage_size=Size.gibibytes(2),
    )


def grant_start_job_run(
    grantee: iam.IGrantable, application: emrs.CfnApplication, execution_role: iam.IRole
) -> None:
    """What a scheduler needs: see the active runs of this application (ListJobRuns) and
    start one with this role; it never watches a run (no GetJobRun)."""
    grantee.grant_principal.add_to_principal_policy(
        iam.PolicyStatement(
            actions=["emr-serverless:StartJobRun"],
            resources=[application.attr_arn, f"{application.attr_arn}/jobruns/*"],
        )
    )
    grantee.grant_principal.add_to_principal_policy(
        iam.PolicyStatement(
            actions=["emr-serverless:ListJobRuns"], resources=[application.attr_arn]
        )
    )
    grantee.grant_principal.add_to_principal_policy(
        iam.PolicyStatement(
            actions=["iam:PassRole"],
            resources=[execution_role.role_arn],
            conditions={"StringEquals": {"iam:PassedToService": EMR_SERVICE_PRINCIPAL}},
        )
    )
    # After the statements exist: the acknowledgement attaches to the policy resource.
    if isinstance(grantee, Construct):
        acknowledge_job_run_grant(grantee, application)
