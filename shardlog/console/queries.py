"""What each console page reads, through the code the CLI uses (so the numbers agree).

Every query is bounded in AWS requests (docs/CONSOLE.md states each page's bound; the tests
count them): no query pages through a table or a log without a limit. P below is the number
of partitions.

- ``overview``: the rows of `shardlog status --json` (one Scan, one Query; the ingest lag only
  on demand: up to 11 Kinesis requests per partition not ENDED), the last hour's throughput
  (one GetMetricData) and the alarms in ALARM (one DescribeAlarms page).
- ``browse``: one partition's records from a seq (`shardlog read`'s reader), or from the
  first record that arrived at or after a time (a binary search over the segments' first
  records: at most ``TIME_SEARCH_MAX_LISTS`` listings and log2 of the segments fetched).
- ``search``: records whose partition key is the one asked, across partitions, at most
  ``SEARCH_BUDGET`` records a request, resumable from a cursor (the progress).
- ``group``: `shardlog status --group G --json`'s rows, the retry state (one Query), the lag
  trend (one GetMetricData) and a Lambda group's on-failure batches (a peek that hides
  nothing: ReceiveMessage with a visibility timeout of 0).
- ``lake``: the table's snapshots and watermarks (pyiceberg: the Glue table and its metadata
  file), the partitions' heads (one Scan) and the last Spark runs (one ListJobRuns page).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from botocore.exceptions import ClientError

from shardlog import constants as C
from shardlog.aws import Clients
from shardlog.console.source import Deployment
from shardlog.exceptions import NotFoundError, ValidationError
from shardlog.format import LogRecord
from shardlog.reader import LogReader
from shardlog.status_rows import group_rows, ingest_rows
from shardlog.tables import PartitionInfo, Tables

PAGE_RECORDS = 50  # records a browser page shows at most
MAX_PAGE_RECORDS = 500
SEARCH_BUDGET = 2_000  # records one search request reads at most
TIME_SEARCH_MAX_LISTS = 10  # ListObjectsV2 pages (10,000 segments) a time look-up reads
ALARMS_PAGE = 100
METRIC_PERIOD_S = 60
TREND_WINDOW = timedelta(hours=1)
ON_FAILURE_PEEK = 10  # SQS returns at most 10 messages a request
RUNS_PAGE = 50
SNAPSHOTS_SHOWN = 20
INTERNAL_GROUPS = frozenset({C.INGEST_GROUP, C.COMPACTION_GROUP})
MAX_BOUNDED_SEQ = 1 << 30  # the bounds hold for partitions of up to a billion records
SERVICE_DIMENSION = "service"  # Powertools adds it to every metric the handlers publish


def lookback_lists(seq: int) -> int:
    """ListObjectsV2 requests the segment store's look-back makes for the segment holding
    ``seq`` (``SegmentStore.segment_start``: doubling windows from 1,024 seqs)."""
    if seq == 0:
        return 0
    lists, window = 1, 1024
    while window < seq:
        lists, window = lists + 1, window * 2
    return lists


def request_bound(
    page: str,
    partitions: int,
    *,
    limit: int = PAGE_RECORDS,
    seq: int = 0,
    budget: int = SEARCH_BUDGET,
) -> int:
    """The most AWS requests one view of ``page`` makes (docs/CONSOLE.md's table; the tests
    hold every page to it). ``partitions``: how many the log has; the partitions table and
    a group's items are assumed to fit one 1 MB page each (thousands of partitions), and a
    partition to hold at most ``MAX_BOUNDED_SEQ`` records (the look-back grows with the
    logarithm of the seq: one more listing each time it doubles). A
    GetObject reads one segment, which holds at least one record: the bounds count one per
    record read, the worst case (segments hold up to 10,000 records by default)."""
    last = max(seq, MAX_BOUNDED_SEQ)
    reads = {
        # Scan partitions, Query ingest leases, GetMetricData, DescribeAlarms
        "overview": 4,
        # + per partition: GetShardIterator and up to 10 GetRecords
        "overview-lag": 4 + partitions * 11,
        # Scan (the partition picker), GetItem (head), the look-back, one listing, segments
        "messages": 3 + lookback_lists(seq) + limit,
        # + the listing of up to 10,000 segments and a binary search over them
        "messages-time": 3 + TIME_SEARCH_MAX_LISTS + 15 + lookback_lists(last) + limit,
        # GetItem (head), the look-back, one listing, one segment
        "record": 3 + lookback_lists(seq),
        # Scan, then per partition searched its look-back and listing, one GetObject per
        # record read at most
        "search": 1 + partitions * (1 + lookback_lists(last)) + budget,
        # Scan of the consumers table's keys: at most 4 pages
        "groups": 4,
        # group_rows (Scan, Query, 2 GetItem; per lagging partition GetItem, the look-back,
        # a listing and a GetObject), the retry Query, GetMetricData, and the on-failure
        # queue (GetQueueUrl, GetQueueAttributes, ReceiveMessage)
        "group": 4 + partitions * (3 + lookback_lists(last)) + 1 + 1 + 3,
        # Scan, ListApplications, ListJobRuns; pyiceberg: Glue GetTable, the metadata file
        "lake": 3 + 2,
    }
    return reads[page]


def iso_ms(ms: int) -> str:
    return (
        datetime.fromtimestamp(ms / 1000, UTC)
        .isoformat(timespec="milliseconds")
        .replace("+00:00", "Z")
    )


def parse_time(text: str) -> datetime:
    """An ISO 8601 time with a zone; ValidationError naming the field otherwise."""
    try:
        when = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise ValidationError(
            "time", f"{text!r} is not an ISO 8601 time (e.g. 2026-11-25T03:00:00Z)"
        ) from None
    if when.tzinfo is None:
        raise ValidationError("time", f"{text!r} has no time zone: add Z or an offset")
    return when


# --- overview -----------------------------------------------------------------------------
@dataclass(frozen=True)
class Series:
    label: str
    points: list[tuple[datetime, float]]


@dataclass(frozen=True)
class Overview:
    rows: list[dict[str, Any]]
    throughput: list[Series]
    alarms: list[dict[str, Any]]
    with_lag: bool


def overview(deployment: Deployment, clients: Clients, now: datetime, *, lag: bool) -> Overview:
    config = deployment.config
    rows = ingest_rows(clients, config.stream_name, config.tables, with_lag=lag)
    queries = {
        "incoming": ("AWS/Kinesis", "IncomingRecords", {"StreamName": config.stream_name}, "Sum"),
        "ingested": (
            C.METRICS_NAMESPACE,
            C.METRIC_RECORDS_INGESTED,
            {SERVICE_DIMENSION: C.POWERTOOLS_SERVICE_NAME},
            "Sum",
        ),
    }
    labels = {"incoming": "into the stream / min", "ingested": "committed to the log / min"}
    series = metric_series(clients, queries, labels, now)
    return Overview(rows, series, alarms_in_alarm(clients), lag)


def metric_series(
    clients: Clients,
    queries: Mapping[str, tuple[str, str, dict[str, str], str]],
    labels: Mapping[str, str],
    now: datetime,
) -> list[Series]:
    """The last hour of each metric, a point a minute (one GetMetricData)."""
    request = [
        {
            "Id": query_id,
            "MetricStat": {
                "Metric": {
                    "Namespace": namespace,
                    "MetricName": name,
                    "Dimensions": [{"Name": k, "Value": v} for k, v in dimensions.items()],
                },
                "Period": METRIC_PERIOD_S,
                "Stat": stat,
            },
        }
        for query_id, (namespace, name, dimensions, stat) in queries.items()
    ]
    answer = clients.client("cloudwatch").get_metric_data(
        MetricDataQueries=request, StartTime=now - TREND_WINDOW, EndTime=now, MaxDatapoints=1000
    )
    series = []
    for result in answer.get("MetricDataResults", []):
        points = sorted(zip(result.get("Timestamps", []), result.get("Values", []), strict=False))
        series.append(Series(labels.get(result["Id"], result["Id"]), points))
    return series


def alarms_in_alarm(clients: Clients) -> list[dict[str, Any]]:
    answer = clients.client("cloudwatch").describe_alarms(
        StateValue="ALARM", MaxRecords=ALARMS_PAGE
    )
    return [
        {
            "name": alarm["AlarmName"],
            "reason": alarm.get("StateReason", ""),
            "since": alarm.get("StateUpdatedTimestamp"),
        }
        for alarm in answer.get("MetricAlarms", []) + answer.get("CompositeAlarms", [])
    ]


# --- message browser ----------------------------------------------------------------------
@dataclass(frozen=True)
class Browse:
    partition: PartitionInfo
    records: list[LogRecord]
    from_seq: int
    found_by_time: datetime | None = None


def browse(
    deployment: Deployment,
    clients: Clients,
    partition_id: str,
    *,
    seq: int | None,
    at: datetime | None,
    limit: int,
) -> Browse:
    """Records of one partition from ``seq`` (or the first that arrived at or after ``at``);
    NotFoundError / ValidationError, as `shardlog read` refuses them."""
    if not 1 <= limit <= MAX_PAGE_RECORDS:
        raise ValidationError("limit", f"{limit} is not in 1..{MAX_PAGE_RECORDS}", limit=limit)
    reader = LogReader(clients, deployment.config.bucket, deployment.config.tables, prefetch=1)
    partition = reader.require_partition(partition_id)
    head = partition.next_seq
    start = seq or 0
    if at is not None:
        start = first_at_or_after(reader, partition_id, head, at)
    elif start > head:
        raise ValidationError(
            "seq",
            f"{start} is past partition {partition_id}'s head {head} (its committed records "
            f"are seq 0 to {head - 1})"
            if head
            else f"{start} is past partition {partition_id}'s head 0 (no record committed yet)",
            limit=head,
        )
    end = min(head, start + limit)
    records = list(reader.store.records(partition_id, start, end, prefetch=1))
    return Browse(partition, records, start, at)


def first_at_or_after(reader: LogReader, partition_id: str, head: int, at: datetime) -> int:
    """The seq of the first committed record that arrived at or after ``at`` (the head when
    none did): binary search over the segments by their first record's arrival (a shard's
    arrival times do not go back), then a scan of one segment."""
    target = int(at.timestamp() * 1000)
    starts = []
    for count, start in enumerate(reader.store.starts(partition_id)):
        if start >= head or count >= TIME_SEARCH_MAX_LISTS * 1000:
            break
        starts.append(start)
    low, high = 0, len(starts) - 1
    candidate = -1  # the last segment whose first record arrived before the target
    while low <= high:
        middle = (low + high) // 2
        first = reader.store.fetch(partition_id, starts[middle]).records[0]
        if first.arrival_ms < target:
            candidate, low = middle, middle + 1
        else:
            high = middle - 1
    if candidate < 0:
        return starts[0] if starts else head
    segment = reader.store.fetch(partition_id, starts[candidate])
    for record in segment.records:
        if record.seq < head and record.arrival_ms >= target:
            return record.seq
    return min(head, starts[candidate + 1]) if candidate + 1 < len(starts) else head


@dataclass(frozen=True)
class SearchResult:
    key: str
    found: list[LogRecord]
    searched_records: int
    total_records: int  # committed records in every partition
    next_cursor: str | None  # where a further request resumes; None when done
    partitions_done: int
    partition_ids: list[str]

    @property
    def partitions(self) -> int:
        return len(self.partition_ids)


def search(
    deployment: Deployment, clients: Clients, key: str, cursor: str | None, budget: int
) -> SearchResult:
    """Records with partition key ``key``, partitions in id order from ``cursor``
    ("<partition index>:<seq>"), reading ``budget`` records at most."""
    if not key:
        raise ValidationError("key", "give the partition key to look for")
    if not 1 <= budget <= 10 * SEARCH_BUDGET:
        raise ValidationError("budget", f"{budget} is not in 1..{10 * SEARCH_BUDGET}")
    tables = Tables(clients, deployment.config.tables)
    partitions = tables.list_partitions()
    index, seq = _cursor(cursor, len(partitions))
    reader = LogReader(clients, deployment.config.bucket, deployment.config.tables, prefetch=1)
    found: list[LogRecord] = []
    searched = 0
    while index < len(partitions) and searched < budget:
        partition = partitions[index]
        end = min(partition.next_seq, seq + budget - searched)
        if seq < end:
            for record in reader.store.records(partition.partition_id, seq, end, prefetch=1):
                if record.partition_key == key:
                    found.append(record)
            searched += end - seq
        seq = end
        if seq >= partition.next_seq:
            index, seq = index + 1, 0
    return SearchResult(
        key=key,
        found=found,
        searched_records=searched,
        total_records=sum(p.next_seq for p in partitions),
        next_cursor=f"{index}:{seq}" if index < len(partitions) else None,
        partitions_done=index,
        partition_ids=[p.partition_id for p in partitions],
    )


def _cursor(cursor: str | None, partitions: int) -> tuple[int, int]:
    if not cursor:
        return 0, 0
    index, _, seq = cursor.partition(":")
    if not (index.isdigit() and seq.isdigit()) or int(index) > partitions:
        raise ValidationError("cursor", f"{cursor!r} is not <partition index>:<seq>")
    return int(index), int(seq)


def record(deployment: Deployment, clients: Clients, partition_id: str, seq: int) -> LogRecord:
    """One committed record (a permalink); refused past the head."""
    page = browse(deployment, clients, partition_id, seq=seq, at=None, limit=1)
    if not page.records:
        head = page.partition.next_seq
        raise ValidationError(
            "seq", f"{seq} is past partition {partition_id}'s head {head}", limit=head
        )
    return page.records[0]


# --- consumer groups ----------------------------------------------------------------------
@dataclass(frozen=True)
class FailedBatchView:
    partition_id: str
    first_seq: int
    last_seq: int
    condition: str
    attempts: int
    replay: str
    sent_at: str


@dataclass(frozen=True)
class GroupView:
    name: str
    kind: str
    rows: list[dict[str, Any]]
    retries: dict[str, dict[str, Any]]  # partition -> retry state / pending give-up
    trend: list[Series]
    on_failure: list[FailedBatchView]
    on_failure_waiting: int | None  # messages in the queue (approximate), None: unknown
    on_failure_where: str | None  # where given-up batches go, or None (a worker group)
    on_failure_note: str = ""


def list_groups(deployment: Deployment, clients: Clients) -> list[str]:
    """The groups in the consumers table (one Scan of their keys, at most 4 pages), plus the
    deployment's Lambda groups; shardlog's own ($ingest, $compaction) left out."""
    names = set(deployment.lambda_groups)
    paginator = clients.dynamodb.get_paginator("scan")
    pages = paginator.paginate(
        TableName=deployment.config.consumers_table,
        ProjectionExpression="#g",
        ExpressionAttributeNames={"#g": C.ATTR_CONSUMER_GROUP},
        PaginationConfig={"MaxItems": 4_000, "PageSize": 1_000},
    )
    for page in pages:
        names.update(item[C.ATTR_CONSUMER_GROUP]["S"] for item in page.get("Items", []))
    return sorted(names - INTERNAL_GROUPS)


def group(deployment: Deployment, clients: Clients, name: str, now_ms: int) -> GroupView:
    """One group's page; NotFoundError for a group with neither a lease nor a group item."""
    if name in INTERNAL_GROUPS or not name or name.startswith(C.GROUP_ITEM_PREFIX):
        raise NotFoundError(f"no consumer group {name!r} (shardlog's own groups are not shown)")
    config = deployment.config
    rows = group_rows(clients, config.bucket, config.tables, name, now_ms)
    kind = rows[0]["groupKind"] if rows else "workers"
    queries = {
        metric: (
            C.METRICS_NAMESPACE,
            metric,
            {C.DIMENSION_CONSUMER_GROUP: name, SERVICE_DIMENSION: C.POWERTOOLS_SERVICE_NAME},
            "Maximum",
        )
        for metric in (C.METRIC_CONSUMER_LAG_RECORDS, C.METRIC_CONSUMER_LAG_MS)
    }
    labels = {
        C.METRIC_CONSUMER_LAG_RECORDS: "lag (records, max a minute)",
        C.METRIC_CONSUMER_LAG_MS: "lag (ms, max a minute)",
    }
    trend = metric_series(clients, queries, labels, datetime.fromtimestamp(now_ms / 1000, UTC))
    view = GroupView(
        name=name,
        kind=kind,
        rows=rows,
        retries=retry_states(deployment, clients, name),
        trend=trend,
        on_failure=[],
        on_failure_waiting=None,
        on_failure_where=None,
    )
    info = deployment.lambda_groups.get(name)
    if info is None:
        return view
    return _with_on_failure(view, clients, info.on_failure_queue_url, info.on_failure_destination)


def retry_states(deployment: Deployment, clients: Clients, name: str) -> dict[str, dict[str, Any]]:
    """Per partition, a Lambda group's batch being retried and a give-up not yet sent."""
    paginator = clients.dynamodb.get_paginator("query")
    pages = paginator.paginate(
        TableName=deployment.config.consumers_table,
        KeyConditionExpression="#g = :g",
        ExpressionAttributeNames={"#g": C.ATTR_CONSUMER_GROUP},
        ExpressionAttributeValues={":g": {"S": name}},
        ConsistentRead=True,
    )
    states: dict[str, dict[str, Any]] = {}
    for page in pages:
        for item in page.get("Items", []):
            partition_id = item[C.ATTR_PARTITION_ID]["S"]
            state = {
                label: item[attr].get("N", item[attr].get("S"))
                for label, attr in (
                    ("retryStartSeq", C.ATTR_RETRY_START),
                    ("retryEndSeq", C.ATTR_RETRY_END),
                    ("retryBatchSize", C.ATTR_RETRY_SIZE),
                    ("retryAttempts", C.ATTR_RETRY_ATTEMPTS),
                )
                if attr in item
            }
            if C.ATTR_PENDING_FAILURE in item:
                state["pendingOnFailure"] = "yes"
            if state and not partition_id.startswith(C.GROUP_ITEM_PREFIX):
                states[partition_id] = state
    return states


def _with_on_failure(
    view: GroupView, clients: Clients, queue_url: str | None, destination: str | None
) -> GroupView:
    from dataclasses import replace

    if queue_url is None and destination and destination.startswith("arn:aws:sqs:"):
        account, queue = destination.split(":", 5)[4:]
        sqs = clients.client("sqs")
        queue_url = sqs.get_queue_url(QueueName=queue, QueueOwnerAWSAccountId=account)["QueueUrl"]
    if queue_url is None:
        note = (
            f"given-up batches go to {destination}; the console reads SQS destinations only"
            if destination
            else "no on-failure destination known for this group"
        )
        return replace(view, on_failure_where=destination, on_failure_note=note)
    waiting, batches = peek_queue(clients, queue_url)
    return replace(view, on_failure=batches, on_failure_waiting=waiting, on_failure_where=queue_url)


def peek_queue(clients: Clients, queue_url: str) -> tuple[int | None, list[FailedBatchView]]:
    """The queue's message count and up to 10 failed-batch records, left in the queue
    (visibility timeout 0: they stay visible to whoever consumes the queue)."""
    sqs = clients.client("sqs")
    attributes = sqs.get_queue_attributes(
        QueueUrl=queue_url, AttributeNames=["ApproximateNumberOfMessages"]
    )["Attributes"]
    waiting = int(attributes.get("ApproximateNumberOfMessages", 0))
    if not waiting:
        return 0, []
    messages = sqs.receive_message(
        QueueUrl=queue_url,
        MaxNumberOfMessages=ON_FAILURE_PEEK,
        VisibilityTimeout=0,
        WaitTimeSeconds=0,
    ).get("Messages", [])
    batches = [batch for m in messages if (batch := _failed_batch(m.get("Body", ""))) is not None]
    return waiting, sorted(batches, key=lambda b: (b.partition_id, b.first_seq))


def _failed_batch(body: str) -> FailedBatchView | None:
    try:
        document = json.loads(body)
        info = document["shardlogBatchInfo"]
        context = document.get("requestContext", {})
        return FailedBatchView(
            partition_id=str(info["partitionId"]),
            first_seq=int(info["startSequenceNumber"]),
            last_seq=int(info["endSequenceNumber"]),
            condition=str(context.get("condition", "")),
            attempts=int(context.get("approximateInvokeCount", 0)),
            replay=str(info["replay"]),
            sent_at=str(document.get("timestamp", "")),
        )
    except (ValueError, KeyError, TypeError):  # not a failed-batch record: not shown
        return None


# --- lake ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class LakeView:
    table: str
    snapshots: list[dict[str, Any]] = field(default_factory=list)
    freshness: list[dict[str, Any]] = field(default_factory=list)
    runs: dict[str, dict[str, Any] | None] = field(default_factory=dict)
    runs_note: str = ""
    missing: str = ""  # why there is no table to show (none created yet)


def lake(deployment: Deployment, clients: Clients) -> LakeView:
    from shardlog.lake.catalog import open_table
    from shardlog.lake.commit import table_watermarks
    from shardlog.lake.exceptions import NoLakeTableError

    settings = deployment.lake_settings()
    heads = Tables(clients, deployment.config.tables).list_partitions()
    runs, runs_note = last_runs(deployment, clients)
    try:
        table = open_table(settings)
    except NoLakeTableError as exc:
        freshness = [_freshness(p, 0) for p in heads]
        return LakeView(settings.table, [], freshness, runs, runs_note, missing=str(exc))
    marks = table_watermarks(table)
    snapshots = sorted(table.metadata.snapshots, key=lambda s: s.timestamp_ms, reverse=True)
    current = table.metadata.current_snapshot_id
    return LakeView(
        table=settings.table,
        snapshots=[_snapshot(s, current) for s in snapshots[:SNAPSHOTS_SHOWN]],
        freshness=[_freshness(p, marks.get(p.partition_id, 0)) for p in heads],
        runs=runs,
        runs_note=runs_note,
    )


def _snapshot(snapshot: Any, current: int | None) -> dict[str, Any]:
    summary = snapshot.summary.additional_properties if snapshot.summary else {}
    operation = snapshot.summary.operation.value if snapshot.summary else ""
    return {
        "id": snapshot.snapshot_id,
        "current": snapshot.snapshot_id == current,
        "at": iso_ms(snapshot.timestamp_ms),
        "operation": operation,
        "runId": summary.get("shardlog.run-id", ""),
        "addedRecords": summary.get("added-records", ""),
        "totalRecords": summary.get("total-records", ""),
    }


def _freshness(partition: PartitionInfo, watermark: int) -> dict[str, Any]:
    return {
        "partitionId": partition.partition_id,
        "state": partition.state,
        "head": partition.next_seq,
        "watermark": watermark,
        "behind": max(0, partition.next_seq - watermark),
    }


def last_runs(
    deployment: Deployment, clients: Clients
) -> tuple[dict[str, dict[str, Any] | None], str]:
    """The newest run of each Spark job (compact, analytics, maintain) in the application's
    last ``RUNS_PAGE`` runs (one ListJobRuns; locally one ListApplications first)."""
    from shardlog.spark.jobs import JOBS, run_name

    emr = clients.client("emr-serverless")
    application = deployment.emr_application_id
    try:
        if application is None:
            application = _local_application(emr)
        if application is None:
            return {job: None for job in JOBS}, "no EMR Serverless application yet"
        page = emr.list_job_runs(applicationId=application, maxResults=RUNS_PAGE)
    except ClientError as exc:
        return {job: None for job in JOBS}, f"job runs not readable: {exc}"
    runs: dict[str, dict[str, Any] | None] = {}
    for job in JOBS:
        named = [r for r in page.get("jobRuns", []) if r.get("name") == run_name(job)]
        newest = max(named, key=lambda r: r["createdAt"], default=None)
        runs[job] = (
            {
                "id": newest["id"],
                "state": newest["state"],
                "createdAt": newest["createdAt"],
                "updatedAt": newest.get("updatedAt"),
            }
            if newest
            else None
        )
    return runs, f"the last {RUNS_PAGE} runs of application {application}"


def _local_application(emr: Any) -> str | None:
    """Against the embedded AWS: the application `shardlog spark run` made, if any."""
    from shardlog.local.spark import APPLICATION_NAME

    for application in emr.list_applications(maxResults=50).get("applications", []):
        if application.get("name") == APPLICATION_NAME:
            return str(application["id"])
    return None
