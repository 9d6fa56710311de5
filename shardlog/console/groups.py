"""A consumer group's page: `shardlog status --group G --json`'s rows, the retry state, the
lag trend and a Lambda group's on-failure batches (a peek that leaves them in the queue)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from shardlog import constants as C
from shardlog.aws import Clients
from shardlog.console.queries import (
    INTERNAL_GROUPS,
    ON_FAILURE_PEEK,
    SERVICE_DIMENSION,
    Series,
    metric_series,
)
from shardlog.console.source import Deployment
from shardlog.dal.consumers import LaneProgress, group_items
from shardlog.exceptions import NotFoundError
from shardlog.status_rows import group_rows
from shardlog.tables import from_ddb


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
    return sorted(n for n in names - INTERNAL_GROUPS if not n.startswith(C.GROUP_ITEM_PREFIX))


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
    """Per partition, a Lambda group's batches being retried and give-ups not yet sent."""
    states: dict[str, dict[str, Any]] = {}
    for item in group_items(clients, deployment.config.consumers_table, name):
        partition_id = item[C.ATTR_PARTITION_ID]["S"]
        state = retry_state(from_ddb(item))
        if state and not partition_id.startswith(C.GROUP_ITEM_PREFIX):
            states[partition_id] = state
    return states


def retry_state(item: Mapping[str, Any]) -> dict[str, Any]:
    """One lease item's retries and pending give-ups, lane by lane at a parallelization
    factor above 1 (``lane K`` before each label), as the runner stored them."""
    progress = LaneProgress.from_item(item)
    state: dict[str, Any] = {}
    for lane in sorted({*progress.retries, *progress.pending}):
        prefix = f"lane {lane} " if progress.factor > 1 else ""
        if (retry := progress.retries.get(lane)) is not None:
            state |= {
                f"{prefix}retryStartSeq": retry.start,
                f"{prefix}retryEndSeq": retry.end,
                f"{prefix}retryBatchSize": retry.size,
                f"{prefix}retryAttempts": retry.attempts,
            }
        if lane in progress.pending:
            state[f"{prefix}pendingOnFailure"] = "yes"
    return state


def _with_on_failure(
    view: GroupView, clients: Clients, queue_url: str | None, destination: str | None
) -> GroupView:
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
