"""What each console page reads, through the code the CLI uses (so the numbers agree), and
what each page view may cost in AWS requests (``request_bound``).

This module reads the overview; ``messages``, ``groups`` and ``lake`` the other pages.

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

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from shardlog import constants as C
from shardlog.aws import Clients
from shardlog.console.source import Deployment
from shardlog.exceptions import ValidationError
from shardlog.status_rows import ingest_rows

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
        # (a HEAD, then the GET: pyarrow's file system opens a file by its size first)
        "lake": 3 + 3,
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
