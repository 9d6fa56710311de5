"""Infra-only names and pinned versions: context keys, output names, layer and EMR pins.

Everything the handlers also read (env var names, table keys, event-source
settings, metric namespace) lives in shardlog/constants.py and is imported from
there; this module holds only what the CDK app alone needs.
"""

from __future__ import annotations

from typing import Final

from shardlog import constants as C

# --- context keys (`cdk synth -c shardlog:shardCount=2`, or cdk.json "context") ---------
CTX_STREAM_NAME: Final = "shardlog:streamName"
CTX_BUCKET_NAME: Final = "shardlog:bucketName"
CTX_PARTITIONS_TABLE: Final = "shardlog:partitionsTableName"
CTX_CONSUMERS_TABLE: Final = "shardlog:consumersTableName"
CTX_SHARD_COUNT: Final = "shardlog:shardCount"  # 0 = on-demand capacity mode
CTX_RETENTION_HOURS: Final = "shardlog:retentionHours"
CTX_SHARD_SYNC_RATE_MINUTES: Final = "shardlog:shardSyncRateMinutes"
CTX_LEASE_DURATION_MS: Final = "shardlog:leaseDurationMs"
CTX_SEGMENT_MAX_RECORDS: Final = "shardlog:segmentMaxRecords"
CTX_SEGMENT_MAX_BYTES: Final = "shardlog:segmentMaxBytes"
CTX_SEGMENT_COMPRESSION: Final = "shardlog:segmentCompression"
CTX_DEDUPE_WINDOW_S: Final = "shardlog:dedupeWindowSeconds"
CTX_API_RATE_LIMIT: Final = "shardlog:apiRateLimit"
CTX_API_BURST_LIMIT: Final = "shardlog:apiBurstLimit"
CTX_LOG_RETENTION_DAYS: Final = "shardlog:logRetentionDays"
# Record retention (shardlog/retention.py): unset keeps the log forever. Not the Lambda log
# groups' retention above.
CTX_RECORD_RETENTION_DAYS: Final = "shardlog:recordRetentionDays"
CTX_ALARM_EMAIL: Final = "shardlog:alarmEmail"
# Synth refuses a stack whose alarms reach no one, unless this says so on purpose.
CTX_NO_ALARM_SUBSCRIBER: Final = "shardlog:noAlarmSubscriber"
CTX_INGEST_RESERVED_CONCURRENCY: Final = "shardlog:ingestReservedConcurrency"
# The one role exempt from the log bucket's write-once denies (docs/DEPLOY.md, break glass).
CTX_BREAK_GLASS_ROLE_ARN: Final = "shardlog:breakGlassRoleArn"
# Who may call the producer API (IAM role or user ARNs); default: principals of this account.
CTX_PRODUCER_PRINCIPAL_ARNS: Final = "shardlog:producerPrincipalArns"
# Consumer groups to create an IAM managed policy for (their own items of the consumers table).
CTX_CONSUMER_GROUPS: Final = "shardlog:consumerGroups"
# Lambda consumer groups: a list of objects, each the group's settings in camelCase
# (group, functionArn, batchSize, ...: docs/CONSUMERS.md, "Lambda consumers").
CTX_LAMBDA_CONSUMERS: Final = "shardlog:lambdaConsumers"
# The declared typed lake tables (docs/LAKE.md): a JSON array, checked at synth.
CTX_LAKE_TABLES: Final = "shardlog:lakeTables"
CTX_ITERATOR_AGE_ALARM_MINUTES: Final = "shardlog:iteratorAgeAlarmMinutes"
# The latency/cost dial of ingest (docs/SCALE.md): records per invocation, how long Lambda
# gathers them, and whether the stream is read through an enhanced fan-out consumer.
CTX_INGEST_BATCH_SIZE: Final = "shardlog:ingestBatchSize"
CTX_INGEST_BATCHING_WINDOW_MS: Final = "shardlog:ingestBatchingWindowMs"
CTX_INGEST_FAN_OUT: Final = "shardlog:ingestFanOut"
CTX_STACK_NAME: Final = "shardlog:stackName"

DEFAULT_SHARD_COUNT: Final = 1
# A week: a stalled ingest has days, not hours, before records are given up (cost: Kinesis
# extended retention, per shard-hour).
DEFAULT_RETENTION_HOURS: Final = 168
DEFAULT_SHARD_SYNC_RATE_MINUTES: Final = 5
DEFAULT_API_RATE_LIMIT: Final = 100  # requests/s per stage
DEFAULT_API_BURST_LIMIT: Final = 200
DEFAULT_LOG_RETENTION_DAYS: Final = 30
DEFAULT_ITERATOR_AGE_ALARM_MINUTES: Final = 15
# On-demand streams start with 4 shards and split as traffic grows.
DEFAULT_ON_DEMAND_RESERVED_CONCURRENCY: Final = 20

# --- stable CfnOutput names (scripts and the CLI read these; never rename; those the code
# reads are declared in shardlog/constants.py) ------------------------------------------
OUTPUT_STREAM_ARN: Final = "StreamArn"
OUTPUT_INGEST_FUNCTION: Final = "IngestFunctionName"
OUTPUT_FAILURE_QUEUE_URL: Final = "IngestFailureQueueUrl"
OUTPUT_ALARM_TOPIC_ARN: Final = "AlarmTopicArn"
OUTPUT_DASHBOARD_NAME: Final = "DashboardName"
OUTPUT_SPARK_DLQ_URL: Final = "SparkDeadLetterQueueUrl"
OUTPUT_CONSUMER_GROUP_POLICIES: Final = "ConsumerGroupPolicyArns"  # only with consumer groups

# --- Lambda --------------------------------------------------------------------------------
# Handler entry points, dotted from the asset root (the asset holds shardlog/ and lambdas/).
INGEST_HANDLER: Final = "lambdas.ingest.handler.handler"
SHARD_SYNC_HANDLER: Final = "lambdas.shard_sync.handler.handler"
PRODUCER_API_HANDLER: Final = "lambdas.producer_api.handler.handler"
LAMBDA_CONSUMER_HANDLER: Final = "lambdas.lambda_consumer.handler.handler"
CONSUMER_WAKER_HANDLER: Final = "lambdas.consumer_waker.handler.handler"
GROUP_REGISTRATION_HANDLER: Final = "lambdas.group_registration.handler.handler"

# The official public Powertools layer, pinned. The V3 layers are built with
# `aws-lambda-powertools[all]` (powertools-lambda-python: layer_v3/layer/layer_stack.py uses
# include_extras=True, and layer_constructors/helpers.py turns that into "[all]"), so they carry
# pydantic v2 and aws-xray-sdk: the handlers' only dependencies besides boto3, which the
# Lambda runtime provides. The runtime below and the layer's python version move together.
POWERTOOLS_LAYER_ACCOUNT: Final = "017000801446"
POWERTOOLS_LAYER_NAME: Final = "AWSLambdaPowertoolsPythonV3-python312-x86_64"
POWERTOOLS_LAYER_VERSION: Final = 27  # the version the Powertools docs list (docs/index.md)
LAMBDA_PYTHON_RUNTIME: Final = "python3.12"

# The ingest timeout stays at most half the lease, so an invocation that renewed its lease
# at the start of a batch still holds it when it commits (liveness: no steal, no wasted retry;
# safety never depends on it, the lease counter fences every commit).
INGEST_TIMEOUT_S: Final = 30
INGEST_MEMORY_MB: Final = 1024  # a segment is buffered in memory (DEFAULT_SEGMENT_MAX_BYTES)
SHARD_SYNC_TIMEOUT_S: Final = 60
# The writer creates a batch's segments one after another within INGEST_TIMEOUT_S: a batch
# may be cut into at most this many (ingestBatchSize / segmentMaxRecords, rounded up). 1,000
# is the most the fixed batch of 1,000 records could make (segmentMaxRecords 1, one object
# per record): a larger batch does not make a setting that was valid time out.
INGEST_MAX_SEGMENTS_PER_BATCH: Final = 1000
# The enhanced fan-out consumer's name (unique per stream; one stack per stream).
INGEST_FAN_OUT_CONSUMER_NAME: Final = "shardlog-ingest"
PRODUCER_TIMEOUT_S: Final = 10

# --- the event source's give-up age (StackSettings.max_record_age_s) ---------------------------
# Lambda accepts 60 s to 7 days for MaximumRecordAgeInSeconds (or -1, infinite).
ESM_MAX_RECORD_AGE_S: Final = 604_800
# Records are given up at 90% of the stream's retention: the last tenth is the time left to
# replay them from the stream, using the shard and sequence range in the failure queue.
RECORD_AGE_PERCENT_OF_RETENTION: Final = 90

# --- producer API ----------------------------------------------------------------------------
API_NAME_SUFFIX: Final = "producer-api"  # the RestApi's name: <stack name>-producer-api
# GET /v1/health has its own, lower, method throttle: liveness probes never eat the stage's
# budget for writes.
HEALTH_RATE_LIMIT: Final = 10  # requests/s
HEALTH_BURST_LIMIT: Final = 20
# Access logs are the API's audit trail: a year, kept when the stack goes.
API_ACCESS_LOG_RETENTION_DAYS: Final = 365

# --- metrics (Powertools EMF, namespace METRICS_NAMESPACE) -----------------------------------
# Those the handlers publish are named in shardlog/constants.py (C.METRIC_*), the one name the
# handlers and the dashboard share; below, the stack's own. Infra code names every shared
# constant C.X and every infra-only one IC.X: no constant has two names.
# From the producer API's access logs (a metric filter on status 429).
METRIC_API_THROTTLED: Final = "ApiThrottledRequests"
DIMENSION_SERVICE: Final = "service"  # Powertools adds it to every metric
# A Lambda consumer group this far behind (age of its oldest undelivered record) alarms.
LAMBDA_CONSUMER_LAG_ALARM_MS: Final = 15 * 60 * 1000

# --- EMR Serverless ---------------------------------------------------------------------------
# emr-7.9.0 ships Spark 3.5.5 (EMR Serverless release notes); local pyspark is pinned to 3.5.x,
# so jobs run on the same Spark minor in both places. Stay below emr-7.10: from 7.10 on, the
# AWS/EMRServerless metrics keyed by ApplicationId alone (the dashboard and alarm) stop updating.
EMR_SPARK_MINOR: Final = "3.5"
EMR_IDLE_TIMEOUT_MINUTES: Final = 15
EMR_MAX_CPU: Final = "16 vCPU"
EMR_MAX_MEMORY: Final = "64 GB"
EMR_MAX_DISK: Final = "320 GB"
# The scheduled Spark runs (infra/analytics.py): one EventBridge Scheduler schedule per job.
CTX_COMPACTION_RATE_MINUTES: Final = "shardlog:compactionRateMinutes"
CTX_ANALYTICS_RATE_MINUTES: Final = "shardlog:analyticsRateMinutes"
CTX_MAINTENANCE_RATE_MINUTES: Final = "shardlog:maintenanceRateMinutes"
CTX_COMPACTION_MAX_RECORDS: Final = "shardlog:compactionMaxRecords"
CTX_SPARK_ARCHIVE: Final = "shardlog:sparkArchive"  # path of `make spark-archive`'s output
# Compaction by volume (docs/SPARK.md): the backlog that starts a run; unset: schedule only.
CTX_COMPACT_AFTER_RECORDS: Final = "shardlog:compactAfterRecords"
CTX_COMPACT_AFTER_BYTES: Final = "shardlog:compactAfterBytes"
# The trigger's own mapping on the partitions table's stream: a batch that keeps failing is
# dropped after these (its counts are recovered by the partition's next change, a claimed
# start is resent by the next batch).
VOLUME_BATCH_SIZE: Final = 100
VOLUME_MAX_RETRY_ATTEMPTS: Final = 10
DEFAULT_COMPACTION_RATE_MINUTES: Final = 60
DEFAULT_ANALYTICS_RATE_MINUTES: Final = 360
DEFAULT_MAINTENANCE_RATE_MINUTES: Final = 1440  # the lake table's maintenance, daily
DEFAULT_SPARK_ARCHIVE: Final = "build/spark/spark_jobs_deps.tar.gz"
TRIMMER_HANDLER: Final = "lambdas.retention.handler.handler"
TRIMMER_TIMEOUT_S: Final = 900  # a trim lists and tags; the next day's run finishes it
TRIMMER_SCHEDULE_HOURS: Final = 24  # S3 lifecycle counts whole days
SPARK_TRIGGER_HANDLER: Final = "lambdas.spark_trigger.handler.handler"
SPARK_TRIGGER_TIMEOUT_S: Final = 30
# The trigger is invoked asynchronously: Lambda retries a failed run this many times, for at
# most this long, then hands the event to the Spark dead-letter queue.
SPARK_TRIGGER_ASYNC_RETRIES: Final = 2
SPARK_TRIGGER_MAX_EVENT_AGE_S: Final = 3600
SCHEDULE_GROUP_SUFFIX: Final = "-spark"  # the schedule group: <stack name>-spark

# --- S3 prefixes -----------------------------------------------------------------------------
ATHENA_RESULTS_PREFIX: Final = "athena-results/"  # in the artifacts bucket, its KMS key
ATHENA_WORKGROUP: Final = "shardlog"
LAKE_DATABASE, LAKE_TABLE = C.DEFAULT_LAKE_TABLE.split(".")  # the Glue database and table
JOB_SCRIPTS_PREFIX: Final = "spark_jobs/"
SPARK_DEPS_PREFIX: Final = "spark_deps/"  # the archive of make spark-archive, beside the scripts
EMR_LOGS_PREFIX: Final = "emr-logs/"
ACCESS_LOGS_PREFIX: Final = "s3-access/"
