"""Names shared by the code, the local runtime and the CDK stack.

Every environment-variable name, default resource name, table attribute and
limit lives here, so infra/ and the handlers can never disagree. An explicit
argument always wins over the environment.
"""

from __future__ import annotations

from typing import Final

# --- environment variables -------------------------------------------------
ENV_STREAM_NAME: Final = "SHARDLOG_STREAM_NAME"
ENV_BUCKET_NAME: Final = "SHARDLOG_BUCKET_NAME"
ENV_PARTITIONS_TABLE: Final = "SHARDLOG_PARTITIONS_TABLE"
ENV_CONSUMERS_TABLE: Final = "SHARDLOG_CONSUMERS_TABLE"
ENV_LEASE_DURATION_MS: Final = "SHARDLOG_LEASE_DURATION_MS"
ENV_SEGMENT_MAX_RECORDS: Final = "SHARDLOG_SEGMENT_MAX_RECORDS"
ENV_SEGMENT_MAX_BYTES: Final = "SHARDLOG_SEGMENT_MAX_BYTES"
ENV_SEGMENT_COMPRESSION: Final = "SHARDLOG_SEGMENT_COMPRESSION"
ENV_ENDPOINT_URL: Final = "AWS_ENDPOINT_URL"  # the standard AWS SDK variable
ENV_REGION: Final = "AWS_REGION"
ENV_DEBUG: Final = "SHARDLOG_DEBUG"  # the CLI shows tracebacks (as --debug does)
# Against the embedded AWS only: whose stand-in credentials this process signs with (the local
# EMR Serverless sets it for a job run), and where the embedded AWS writes every request it
# serves, attributed to its principal (shardlog.local.request_log; a directory).
ENV_LOCAL_PRINCIPAL: Final = "SHARDLOG_LOCAL_PRINCIPAL"
ENV_REQUEST_LOG: Final = "SHARDLOG_REQUEST_LOG"

# --- default resource names (the stack and the local runtime use these) ----
DEFAULT_STREAM_NAME: Final = "shardlog-events"
DEFAULT_BUCKET_NAME: Final = "shardlog-log"
DEFAULT_PARTITIONS_TABLE: Final = "shardlog-partitions"
DEFAULT_CONSUMERS_TABLE: Final = "shardlog-consumers"
DEFAULT_REGION: Final = "us-east-1"
LOCAL_STATE_FILE: Final = ".shardlog/local.json"

# --- Powertools --------------------------------------------------------------
# Powertools' own variables (the stack sets the first two; the local runtime the others).
ENV_POWERTOOLS_SERVICE_NAME: Final = "POWERTOOLS_SERVICE_NAME"
ENV_POWERTOOLS_METRICS_NAMESPACE: Final = "POWERTOOLS_METRICS_NAMESPACE"
ENV_POWERTOOLS_METRICS_DISABLED: Final = "POWERTOOLS_METRICS_DISABLED"
ENV_POWERTOOLS_TRACE_DISABLED: Final = "POWERTOOLS_TRACE_DISABLED"
ENV_POWERTOOLS_LOG_LEVEL: Final = "POWERTOOLS_LOG_LEVEL"
POWERTOOLS_SERVICE_NAME: Final = "shardlog"
METRICS_NAMESPACE: Final = "Shardlog"
# Metric names the handlers publish and the dashboard and alarms read.
METRIC_RECORDS_INGESTED: Final = "RecordsIngested"
METRIC_RECORDS_REDELIVERED: Final = "RecordsRedelivered"
METRIC_SEGMENTS_WRITTEN: Final = "SegmentsWritten"
METRIC_SEGMENTS_ADOPTED: Final = "SegmentsAdopted"
METRIC_BATCH_FAILED: Final = "BatchFailed"
METRIC_LEASE_HELD: Final = "LeaseHeld"
# Records a typed lake table refused into its dead-letter table, per run (docs/LAKE.md).
METRIC_LAKE_RECORDS_REJECTED: Final = "LakeRecordsRejected"
DIMENSION_LAKE_TABLE: Final = "LakeTable"  # <database>.<typed table>
# A commit fenced by another writer (LeaseLostError, CommitConflictError): apart from
# BatchFailed, which counts every other failure.
METRIC_COMMIT_FENCED: Final = "CommitFenced"
# The ingest lease is shorter than what an invocation may still run (a misconfiguration).
METRIC_LEASE_TOO_SHORT: Final = "LeaseShorterThanInvocation"
METRIC_CONSUMER_LAG_RECORDS: Final = "ConsumerLagRecords"
METRIC_PARTITIONS_CLOSED: Final = "PartitionsClosed"
METRIC_PARTITIONS_ENDED: Final = "PartitionsEnded"
METRIC_SPARK_RUNS_STARTED: Final = "SparkRunsStarted"
METRIC_SPARK_RUNS_SKIPPED: Final = "SparkRunsSkipped"

# --- S3 log layout -------------------------------------------------------------
EVENTS_PREFIX: Final = "events/"
SEQ_DIGITS: Final = 20

# --- partitions table ----------------------------------------------------------
ATTR_PARTITION_ID: Final = "partitionId"
ATTR_NEXT_SEQUENCE_NUMBER: Final = "nextSequenceNumber"
ATTR_PARENT_PARTITION_IDS: Final = "parentPartitionIds"
ATTR_STARTING_HASH_KEY: Final = "startingHashKey"
ATTR_ENDING_HASH_KEY: Final = "endingHashKey"
ATTR_STATE: Final = "state"
ATTR_STARTING_KINESIS_SEQ: Final = "startingKinesisSequenceNumber"
ATTR_ENDING_KINESIS_SEQ: Final = "endingKinesisSequenceNumber"
ATTR_LAST_COMMITTED_AT: Final = "lastCommittedAt"
ATTR_SEGMENT_COUNT: Final = "segmentCount"
ATTR_COMMITTED_BYTES: Final = "committedBytes"
# Retention (shardlog/retention.py): below trimHorizonSeq the log answers "trimmed"; the
# segments below trimTaggedSeq carry the expiry tag the bucket's lifecycle rule acts on.
ATTR_TRIM_HORIZON: Final = "trimHorizonSeq"
ATTR_TRIM_TAGGED: Final = "trimTaggedSeq"
# The live set (shardlog/retirement.py, docs/TABLES.md): ``live`` is present while the
# partition is OPEN, CLOSED or ENDED-but-needed; the sparse index LIVE_INDEX holds only the
# items that carry it, so the hot paths Query it instead of Scanning the table.
ATTR_LIVE: Final = "live"
LIVE_VALUE: Final = "1"  # the one value of ``live`` (the index's partition key)
LIVE_INDEX: Final = "live"
ATTR_LIVE_REVISION: Final = "liveRevision"  # bumped by every revival: fences a retirement
ATTR_RETIRED_AT: Final = "retiredAt"  # epoch ms the partition left the live set

STATE_OPEN: Final = "OPEN"
STATE_CLOSED: Final = "CLOSED"
STATE_ENDED: Final = "ENDED"

# --- consumers table (KCL lease vocabulary) -----------------------------------
ATTR_CONSUMER_GROUP: Final = "consumerGroup"
ATTR_LEASE_OWNER: Final = "leaseOwner"
ATTR_LEASE_COUNTER: Final = "leaseCounter"
ATTR_LEASE_EXPIRES_AT: Final = "leaseExpiresAt"
ATTR_OWNER_SWITCHES: Final = "ownerSwitchesSinceCheckpoint"
ATTR_CHECKPOINT: Final = "checkpoint"
ATTR_CHECKPOINT_SUBSEQ: Final = "checkpointSubSequenceNumber"

SHARD_END: Final = "SHARD_END"
# The ingest Lambda's own group; "$" cannot start a user group name.
INGEST_GROUP: Final = "$ingest"
# The Spark compaction's watermark group (checkpoint = next seq to compact).
COMPACTION_GROUP: Final = "$compaction"
# The end (exclusive) of the batch a compaction run is writing; absent when none is.
ATTR_PENDING_CHECKPOINT: Final = "pendingCheckpoint"

# Consumers-table items of a group that are not partition leases have partitionIds starting
# with this (shard ids never do): "$group" describes a Lambda consumer group.
GROUP_ITEM_PREFIX: Final = "$"
GROUP_ITEM_ID: Final = "$group"
ATTR_GROUP_KIND: Final = "groupKind"  # "lambda" (see docs/CONSUMERS.md)
# The sparse index of the consumers table keyed on groupKind: only "$group" items carry it,
# so it lists every group without reading a lease (retirement asks it).
GROUPS_INDEX: Final = "groups"
ATTR_GROUP_CREATED_AT: Final = "groupCreatedAt"  # epoch ms of the group's creation
ATTR_GROUP_START_POSITION: Final = "groupStartPosition"  # the position it was created with
ATTR_GROUP_START_POSITIONS: Final = "groupStartPositions"  # JSON: partition -> first seq
ATTR_PENDING_FAILURE: Final = "pendingOnFailure"  # a Lambda group's give-up, before it is sent
ATTR_RETRY_START: Final = "retryStartSeq"  # a Lambda group's batch being retried: first seq
ATTR_RETRY_END: Final = "retryEndSeq"  # ...its end (exclusive)
ATTR_RETRY_SIZE: Final = "retryBatchSize"  # ...delivered in sub-batches of at most this many
ATTR_RETRY_ATTEMPTS: Final = "retryAttempts"  # ...failed invocations of the current one
ATTR_LANE_PROGRESS: Final = "laneProgress"  # ...the same per lane, at parallelizationFactor > 1
ATTR_WINDOW_STATE: Final = "windowState"  # a Lambda group's open tumbling window and its state

# --- Lambda consumer groups (docs/CONSUMERS.md, "Lambda consumers") -------------------------
ENV_LAMBDA_CONSUMER: Final = "SHARDLOG_LAMBDA_CONSUMER"  # the runner's group settings (JSON)
ENV_LAMBDA_CONSUMERS: Final = "SHARDLOG_LAMBDA_CONSUMERS"  # the waker's groups -> queues (JSON)
ENV_STREAM_ARN: Final = "SHARDLOG_STREAM_ARN"
METRIC_CONSUMER_LAG_MS: Final = "ConsumerLagMs"
METRIC_RECORDS_DELIVERED: Final = "RecordsDelivered"
METRIC_BATCHES_FAILED: Final = "BatchesFailed"
METRIC_RECORDS_TO_ON_FAILURE: Final = "RecordsSentToOnFailure"
# As Lambda's event source mapping names them (MetricsConfig "EventCount"): records the
# checkpoint moved past; those no filter kept; those given up on (uninvoked or after retries).
METRIC_EVENT_COUNT: Final = "EventCount"
METRIC_FILTERED_OUT_EVENT_COUNT: Final = "FilteredOutEventCount"
METRIC_DROPPED_EVENT_COUNT: Final = "DroppedEventCount"
METRIC_WAKES_SENT: Final = "WakesSent"
METRIC_GROUP_REGISTRATIONS_FAILED: Final = "GroupRegistrationsFailed"  # deploy-time
DIMENSION_CONSUMER_GROUP: Final = "consumerGroup"  # the groups' metrics carry it
LAMBDA_CONSUMER_BATCH_SIZE: Final = 100
LAMBDA_CONSUMER_MAX_RETRY_ATTEMPTS: Final = 3
# What the stack builds and the local runtime emulates (tests/infra/test_parity.py):
LAMBDA_CONSUMER_RUNNER_TIMEOUT_S: Final = 900  # Lambda's maximum: long runs, fewer wakes
LAMBDA_CONSUMER_WAKE_BATCH_SIZE: Final = 1  # one (group, partition) per runner invocation
LAMBDA_CONSUMER_WAKE_MAX_RECEIVES: Final = 5  # then the wake is dead-lettered (alarmed)
# High-throughput FIFO on the wake queues: a FIFO queue takes 300 calls/s per API action
# otherwise, and every commit of every partition wakes each group once, so 300 shards
# committing each second would throttle the wakes (docs/SCALE.md). Throughput per message
# group (one per partition) and deduplication within it: every wake's deduplication id starts
# with its partition, its message group, so deduplication decides exactly as queue-wide.
LAMBDA_CONSUMER_WAKE_DEDUPLICATION_SCOPE: Final = "messageGroup"
LAMBDA_CONSUMER_WAKE_FIFO_THROUGHPUT_LIMIT: Final = "perMessageGroupId"
LAMBDA_CONSUMER_SWEEP_RATE_MINUTES: Final = 1
PARTITIONS_STREAM_VIEW_TYPE: Final = "NEW_AND_OLD_IMAGES"  # the waker compares the heads
WAKER_STARTING_POSITION: Final = "LATEST"  # the sweep covers what came before
WAKER_BATCH_SIZE: Final = 100
WAKER_MAX_RETRY_ATTEMPTS: Final = 10

# --- Spark jobs on EMR Serverless (docs/SPARK.md) ----------------------------------
ENV_EMR_APPLICATION_ID: Final = "SHARDLOG_EMR_APPLICATION_ID"
ENV_EMR_EXECUTION_ROLE_ARN: Final = "SHARDLOG_EMR_EXECUTION_ROLE_ARN"
ENV_SPARK_JOBS_URI: Final = "SHARDLOG_SPARK_JOBS_URI"  # s3://<artifacts>/spark_jobs/
ENV_SPARK_DEPS_URI: Final = "SHARDLOG_SPARK_DEPS_URI"  # the archive built by make
ENV_COMPACTION_MAX_RECORDS: Final = "SHARDLOG_COMPACTION_MAX_RECORDS"
# Compaction by volume (shardlog/spark/volume.py): the backlog that starts a run; unset: off.
ENV_COMPACT_AFTER_RECORDS: Final = "SHARDLOG_COMPACT_AFTER_RECORDS"
ENV_COMPACT_AFTER_BYTES: Final = "SHARDLOG_COMPACT_AFTER_BYTES"
# emr-7.9.0 ships Spark 3.5.5; the local pyspark is pinned to the same minor (pyproject).
EMR_RELEASE_LABEL: Final = "emr-7.9.0"
COMPACTED_PREFIX: Final = "compacted/"
ANALYTICS_PREFIX: Final = "analytics/"
DEFAULT_COMPACTION_MAX_RECORDS: Final = 1_000_000  # per partition per run
# A compaction task writes its own data files: no task smaller than this (fewer, larger files)
# unless its partition's batch is.
COMPACTION_MIN_CHUNK_RECORDS: Final = 250_000
# The lake table (docs/LAKE.md): an Iceberg table in the log bucket, Glue-catalogued.
LAKE_PREFIX: Final = "lake/"  # table locations: s3://<bucket>/lake/<database>/<table>
DEFAULT_LAKE_CATALOG: Final = "shardlog"
DEFAULT_LAKE_TABLE: Final = "shardlog.events"  # <Glue database>.<table>
ENV_LAKE_TABLE: Final = "SHARDLOG_LAKE_TABLE"
# The declared typed tables (docs/LAKE.md), a JSON array: the Spark trigger's, on AWS.
ENV_LAKE_TABLES: Final = "SHARDLOG_LAKE_TABLES"
LOCAL_STATE_LAKE_TABLES: Final = "lakeTables"  # their key in the local state file (not a
# partition state: STATE_* names those, docs/TABLES.md)
# Maintenance (`shardlog lake maintain`, the scheduled maintain job): snapshots older than the
# retention expire; unreferenced files go once older than the grace, which must exceed a
# compaction run (its files precede its commit; its EMR timeout is 2 h).
DEFAULT_LAKE_SNAPSHOT_RETENTION_HOURS: Final = 7 * 24
MIN_LAKE_SNAPSHOT_RETENTION_HOURS: Final = 1
DEFAULT_LAKE_ORPHAN_GRACE_HOURS: Final = 24
MIN_LAKE_ORPHAN_GRACE_HOURS: Final = 3
# Right-sized files (maintenance's rewrite, shardlog/lake/rewrite.py): a day's files smaller
# than the threshold are rewritten into files near the target. The threshold defaults to
# 3/4 of the target (Iceberg's own rewrite default); a file is one PutObject, and S3 takes
# 5 GiB in one, so the target stays below that.
DEFAULT_LAKE_TARGET_FILE_MIB: Final = 256
DEFAULT_LAKE_SMALL_FILE_MIB: Final = 192
MAX_LAKE_TARGET_FILE_MIB: Final = 4096
LAKE_QUERY_DEFAULT_LIMIT: Final = 1_000  # rows `shardlog lake query` prints by default
LAKE_QUERY_MAX_LIMIT: Final = 1_000_000  # rows a lake query returns at most (held in memory)
LAKE_QUERY_MAX_FILTER_VALUES: Final = 100  # values of --partition-key or --partition at most

# --- stack outputs (stable CfnOutput names: infra/ writes them, `shardlog smoke` reads them) -
DEFAULT_STACK_NAME: Final = "Shardlog"  # the CDK app's stack (context shardlog:stackName)
ENV_STACK_NAME: Final = "SHARDLOG_STACK_NAME"  # `shardlog smoke --stack-name`
OUTPUT_STREAM_NAME: Final = "StreamName"
OUTPUT_BUCKET_NAME: Final = "BucketName"
OUTPUT_PARTITIONS_TABLE: Final = "PartitionsTableName"
OUTPUT_CONSUMERS_TABLE: Final = "ConsumersTableName"
OUTPUT_API_URL: Final = "ProducerApiUrl"
OUTPUT_EMR_APPLICATION_ID: Final = "EmrApplicationId"
OUTPUT_EMR_EXECUTION_ROLE_ARN: Final = "EmrExecutionRoleArn"
OUTPUT_JOB_SCRIPTS_URI: Final = "SparkJobScriptsUri"
OUTPUT_LAMBDA_CONSUMERS: Final = "LambdaConsumerGroups"
OUTPUT_ATHENA_WORKGROUP: Final = "AthenaWorkGroupName"
OUTPUT_LAKE_TABLE: Final = "LakeTableName"  # <Glue database>.<table>

# --- limits ------------------------------------------------------------------------
MIB: Final = 1024 * 1024
KINESIS_MAX_RECORDS_PER_PUT: Final = 500
KINESIS_MAX_BYTES_PER_PUT: Final = 5 * MIB
KINESIS_MAX_RECORD_BYTES: Final = 1 * MIB  # data + UTF-8 partition key
PARTITION_KEY_MAX_CHARS: Final = 256
MAX_HASH_KEY: Final = 2**128 - 1
# Kinesis's own pattern for ExplicitHashKey: no sign, no leading zeros, at most 39 digits.
EXPLICIT_HASH_KEY_PATTERN: Final = r"^(0|[1-9][0-9]{0,38})$"
KINESIS_SEQUENCE_MAX_DIGITS: Final = 128

DEFAULT_LEASE_DURATION_MS: Final = 60_000
# Idempotent produce: a resent record is looked up among the records of its partition that
# arrived at most this long before it (docs/FORMAT.md, section 9).
DEFAULT_DEDUPE_WINDOW_S: Final = 600
ENV_DEDUPE_WINDOW_S: Final = "SHARDLOG_DEDUPE_WINDOW_S"
METRIC_RECORDS_DEDUPLICATED: Final = "RecordsDeduplicated"
# Resent records kept by a look-up its limits stopped before the window's start.
METRIC_RESENT_UNCHECKED: Final = "ResentRecordsUnchecked"
# The look-up's limits (shardlog/dedupe.py): at most this many GETs, bytes and
# ListObjectsV2 requests per batch, with this many GETs in flight. A 600 s window of a shard
# at Kinesis' full write rate (1 MiB/s; a batch a second, two when catching up) is at most
# 1,200 segments and about 620 MiB with the envelopes: inside them. At 16 GETs in flight
# that is 128 rounds of GETs, and 768 MiB at 80 MB/s about 10 s: a third of the ingest
# function's 30 s timeout.
DEDUPE_LOOKUP_MAX_SEGMENTS: Final = 2_048
DEDUPE_LOOKUP_MAX_BYTES: Final = 768 * MIB
DEDUPE_LOOKUP_MAX_LISTS: Final = 32
DEDUPE_LOOKUP_PARALLEL: Final = 16
DEFAULT_SEGMENT_MAX_RECORDS: Final = 10_000
DEFAULT_SEGMENT_MAX_BYTES: Final = 16 * MIB
# The largest segment a reader accepts, as stored and, for a compressed one, its records once
# decompressed (docs/FORMAT.md, section 6): a bound on what one GET can make a reader hold,
# whatever a corrupt or hostile object declares (a decompression bomb). Every segment a writer
# can write fits: it cuts at most 256 MiB of records (the segmentMaxBytes setting's upper
# edge), or one record of at most Kinesis' 1 MiB; the rest is the header and one byte per
# record that the cut does not count (an id length), far under the 1 MiB above that.
SEGMENT_MAX_READ_BYTES: Final = 257 * MIB
# The writer's default: compress each segment with zlib when that pays (docs/FORMAT.md,
# section 10).
DEFAULT_SEGMENT_COMPRESSION: Final = "zlib"

# --- ingest event source (shared by the stack and the local poller) ---------------
# The defaults of shardlog:ingestBatchSize and shardlog:ingestBatchingWindowMs (their ranges:
# shardlog/settings.py; the dial between them: docs/SCALE.md).
INGEST_BATCH_SIZE: Final = 1000
INGEST_BATCHING_WINDOW_S: Final = 1
DEFAULT_INGEST_BATCHING_WINDOW_MS: Final = INGEST_BATCHING_WINDOW_S * 1000
INGEST_PARALLELIZATION_FACTOR: Final = 1
INGEST_STARTING_POSITION: Final = "TRIM_HORIZON"

# AWS codes that mean "too much, slow down" (Kinesis, DynamoDB, KMS, the API layer): the
# request did nothing and may succeed later.
THROTTLING_CODES: Final = frozenset(
    {
        "ProvisionedThroughputExceededException",
        "ThrottlingException",
        "Throttling",
        "ThrottledException",
        "LimitExceededException",
        "KMSThrottlingException",
        "RequestLimitExceeded",
        "TooManyRequestsException",
        "SlowDown",
    }
)

# The EMR Serverless application `shardlog spark run` makes against the embedded AWS (local
# runs); the console looks it up by this name.
LOCAL_SPARK_APPLICATION: Final = "shardlog-spark"

# --- retention (shardlog/retention.py, docs/DEPLOY.md) ---------------------------------------
# The object tag the trimmer puts on a segment below the horizon, and the value; the bucket's
# lifecycle rule (present only when retention is set) expires objects carrying it.
EXPIRY_TAG_KEY: Final = "shardlog-expire"
EXPIRY_TAG_VALUE: Final = "trimmed"
ENV_RECORD_RETENTION_DAYS: Final = "SHARDLOG_RECORD_RETENTION_DAYS"
ENV_RETENTION_HOLD_FOR_GROUPS: Final = "SHARDLOG_RETENTION_HOLD_FOR_GROUPS"
MIN_RECORD_RETENTION_DAYS: Final = 1  # S3 lifecycle counts whole days
MAX_RECORD_RETENTION_DAYS: Final = 36_500
# A group whose checkpoint was below the horizon restarted at it (records it never read).
METRIC_RECORDS_TRIMMED_UNREAD: Final = "RecordsTrimmedUnread"
METRIC_SEGMENTS_TAGGED_FOR_EXPIRY: Final = "SegmentsTaggedForExpiry"
