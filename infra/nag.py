"""cdk-nag AwsSolutions acknowledgements.

Each one names the rule, is attached to the narrowest construct it concerns, is limited
with `applies_to` to the exact finding where the rule is granular, and says why.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aws_cdk import CfnElement, Stack
from cdk_nag import NagPackSuppression, NagSuppressions, RegexAppliesTo
from constructs import IConstruct

from infra import constants as IC
from shardlog import constants as C

if TYPE_CHECKING:
    from aws_cdk import aws_s3 as s3

    from infra.functions import ShardlogFunction
    from infra.stack import ShardlogStack

XRAY_REASON = (
    "Active tracing adds xray:PutTraceSegments and xray:PutTelemetryRecords, which support no "
    "resource-level permissions (Service Authorization Reference), so their resource is '*'. "
    "No other action of the role has a '*' resource."
)
RUNTIME_REASON = (
    f"Pinned to {IC.LAMBDA_PYTHON_RUNTIME} to match the pinned official Powertools layer "
    f"{IC.POWERTOOLS_LAYER_NAME}:{IC.POWERTOOLS_LAYER_VERSION}; the runtime and the layer move "
    "together in infra/constants.py."
)


def _suppress(
    construct: IConstruct, rule: str, reason: str, *applies_to: str | RegexAppliesTo
) -> None:
    NagSuppressions.add_resource_suppressions(
        construct,
        [NagPackSuppression(id=rule, reason=reason, applies_to=list(applies_to) or None)],
        apply_to_children=True,
    )


def _objects(bucket: s3.IBucket, prefix: str) -> str:
    """The finding key cdk-nag gives `bucket.arn_for_objects(prefix + '*')`."""
    resource = bucket.node.default_child
    assert isinstance(resource, CfnElement)
    logical_id = Stack.of(bucket).resolve(resource.logical_id)
    return f"Resource::<{logical_id}.Arn>/{prefix}*"


def _lambda_function(fn: ShardlogFunction) -> None:
    _suppress(fn.role, "AwsSolutions-IAM5", XRAY_REASON, "Resource::*")
    _suppress(fn.function, "AwsSolutions-L1", RUNTIME_REASON)


def acknowledge_job_run_grant(grantee: IConstruct, application: CfnElement) -> None:
    """For Analytics.grant_start_job_run: job runs have ids only known at run time."""
    logical_id = Stack.of(application).resolve(application.logical_id)
    _suppress(
        grantee,
        "AwsSolutions-IAM5",
        "emr-serverless:StartJobRun creates job runs of this one application, whose ids exist "
        "only once a run starts; the grant is scoped to that application's jobruns/ path.",
        f"Resource::<{logical_id}.Arn>/jobruns/*",
    )


def acknowledge(stack: ShardlogStack) -> None:
    storage, ingest, api, analytics = (
        stack.storage,
        stack.ingest,
        stack.producer_api,
        stack.analytics,
    )
    for fn in (ingest.ingest, ingest.shard_sync, api.producer, analytics.trigger):
        _lambda_function(fn)
    if stack.retention is not None:
        _retention(stack)

    _suppress(
        storage.stream,
        "AwsSolutions-KDS3",
        "A customer-managed key is a requirement here, cost accepted: one key policy governs "
        "the stream, the log bucket, both tables and the failure queue, so access to shardlog "
        "data is granted, audited and revoked in one place.",
    )
    _suppress(
        ingest.ingest.role,
        "AwsSolutions-IAM5",
        "The writer creates and reads segment objects whose keys it computes "
        "(events/<partition>/<seq>); the grant is scoped to the events/ prefix of the log "
        "bucket, with only s3:PutObject and s3:GetObject.",
        _objects(storage.bucket, C.EVENTS_PREFIX),
    )
    _suppress(
        ingest.failure_queue,
        "AwsSolutions-SQS3",
        "This queue is the terminal on-failure destination of the Kinesis event source mapping; "
        "it receives metadata of given-up records for a human to act on (alarmed at depth 1). "
        "A dead-letter queue behind it would add nothing.",
    )
    _suppress(
        analytics.dead_letter_queue,
        "AwsSolutions-SQS3",
        "This queue is itself the dead-letter queue of the Spark schedules and of the Spark "
        "trigger's asynchronous invocations (alarmed at depth 1); nothing consumes it but a "
        "human, so a dead-letter queue behind it would add nothing.",
    )
    for policy in stack.consumer_groups.policies.values():
        _suppress(
            policy,
            "AwsSolutions-IAM5",
            "A consumer group reads every committed segment of the log, whose keys it computes "
            "(events/<partition>/<seq>): GetObject only, scoped to the events/ prefix.",
            _objects(storage.bucket, C.EVENTS_PREFIX),
        )

    _suppress(
        api.api,
        "AwsSolutions-COG4",
        "Producers are AWS principals: every method uses IAM (SigV4) authorization, granted "
        "with execute-api:Invoke. There are no end users, so no Cognito user pool.",
    )
    _suppress(
        api.api,
        "AwsSolutions-APIG3",
        "Every method requires SigV4 signatures, so unauthenticated traffic is rejected before "
        "the integration, and stage throttling caps request rates; a WAF web ACL is left to "
        "deployments that expose the API beyond trusted AWS principals.",
    )
    _suppress(
        api.api,
        "AwsSolutions-IAM4",
        "The account-level API Gateway logging role needs the AWS-managed "
        "AmazonAPIGatewayPushToCloudWatchLogs policy; it is what API Gateway documents for "
        "stage access and execution logs.",
        "Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/"
        "AmazonAPIGatewayPushToCloudWatchLogs",
    )

    _suppress(
        analytics.execution_role,
        "AwsSolutions-IAM5",
        "Spark jobs read every committed segment under events/, write deterministic file "
        "names under analytics/ and the lake table's data and metadata files (new names per "
        "run, deleted by a run that lost its commit race and by maintenance) under "
        "lake/<database>/; they load scripts from spark_jobs/ and their "
        "dependency archive from spark_deps/ and write logs to emr-logs/ of the artifacts "
        "bucket. Each grant is scoped to its prefix, with named actions only.",
        _objects(storage.bucket, C.EVENTS_PREFIX),
        _objects(storage.bucket, C.ANALYTICS_PREFIX),
        _objects(storage.bucket, f"{C.LAKE_PREFIX}{IC.LAKE_DATABASE}/"),
        _objects(analytics.artifacts_bucket, IC.JOB_SCRIPTS_PREFIX),
        _objects(analytics.artifacts_bucket, IC.SPARK_DEPS_PREFIX),
        _objects(analytics.artifacts_bucket, IC.EMR_LOGS_PREFIX),
    )
    if analytics.lake_tables.tables:
        _lake_metrics(analytics.execution_role)

    _lambda_consumers(stack)
    _job_scripts_deployment(stack)


def _lake_metrics(execution_role: IConstruct) -> None:
    _suppress(
        execution_role,
        "AwsSolutions-IAM5",
        "Compaction counts each typed lake table's dead-letter records with "
        "cloudwatch:PutMetricData, which supports no resource-level permissions (Service "
        "Authorization Reference): its resource is '*', conditioned on the stack's metric "
        "namespace.",
        "Resource::*",
    )


def _retention(stack: ShardlogStack) -> None:
    assert stack.retention is not None
    trimmer = stack.retention.trimmer
    _lambda_function(trimmer)
    _suppress(
        trimmer.role,
        "AwsSolutions-IAM5",
        "The trim tags the segments below a partition's horizon for the lifecycle rule to "
        "expire; their keys are computed (events/<partition>/<seq>), so the grant is scoped "
        "to the events/ prefix of the log bucket, with only s3:PutObjectTagging.",
        _objects(stack.storage.bucket, C.EVENTS_PREFIX),
    )


def _lambda_consumers(stack: ShardlogStack) -> None:
    consumers = stack.lambda_consumers
    if consumers.waker is not None:
        _lambda_function(consumers.waker)
    if consumers.registration is not None:
        _lambda_function(consumers.registration)
        _suppress(
            consumers.registration.role,
            "AwsSolutions-IAM5",
            "Registration finds an AT_TIMESTAMP group's first record in committed segments, "
            "whose keys it computes (events/<partition>/<seq>): GetObject only, scoped to the "
            "log's prefix.",
            _objects(stack.storage.bucket, C.EVENTS_PREFIX),
        )
    for group in consumers.groups.values():
        _lambda_function(group.runner)
        _suppress(
            group.runner.role,
            "AwsSolutions-IAM5",
            "The runner reads committed segments, whose keys it computes "
            "(events/<partition>/<seq>): GetObject only, scoped to the events/ prefix. It invokes "
            "the group's one function, any version or alias of it (the ':*' qualifier).",
            _objects(stack.storage.bucket, C.EVENTS_PREFIX),
            RegexAppliesTo(regex=r"/^Resource::.*:function:.*:\*$/g"),
        )
        _suppress(
            group.dead_letters,
            "AwsSolutions-SQS3",
            "This queue is itself the dead-letter queue of the group's wake queue (alarmed at "
            "depth 1); the sweep wakes the group again anyway, so nothing is lost behind it.",
        )
        if group.failure_queue is not None:
            _suppress(
                group.failure_queue,
                "AwsSolutions-SQS3",
                "This queue is the terminal on-failure destination of the group: it holds the "
                "seq ranges of given-up batches for a human (alarmed); the log keeps the data.",
            )


def _job_scripts_deployment(stack: ShardlogStack) -> None:
    """The singleton Lambda behind BucketDeployment is aws-cdk-lib's, not ours."""
    if stack.analytics.job_scripts is None:
        return
    artifacts = stack.analytics.artifacts_bucket
    for child in stack.node.children:
        if not child.node.id.startswith("Custom::CDKBucketDeployment"):
            continue
        _suppress(
            child,
            "AwsSolutions-IAM4",
            "aws-cdk-lib's BucketDeployment handler uses AWSLambdaBasicExecutionRole for its logs.",
            "Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole",
        )
        _suppress(
            child,
            "AwsSolutions-IAM5",
            "aws-cdk-lib's BucketDeployment handler copies the job scripts from the CDK asset "
            "bucket into the artifacts bucket and prunes removed ones; CDK grants it read on the "
            "asset bucket and read/write on the artifacts bucket and its own key only (never "
            "the log bucket or the data key).",
            "Action::s3:GetBucket*",
            "Action::s3:GetObject*",
            "Action::s3:List*",
            "Action::s3:Abort*",
            "Action::s3:DeleteObject*",
            "Action::kms:GenerateDataKey*",
            "Action::kms:ReEncrypt*",
            _objects(artifacts, ""),
            RegexAppliesTo(
                regex=r"/^Resource::arn:<AWS::Partition>:s3:::cdk-[a-z0-9]+-assets-"
                r"<AWS::AccountId>-<AWS::Region>\/\*$/g"
            ),
        )
        _suppress(
            child,
            "AwsSolutions-L1",
            "The runtime of aws-cdk-lib's BucketDeployment handler is chosen by aws-cdk-lib and "
            "moves with its version.",
        )
