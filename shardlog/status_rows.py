"""The rows of `shardlog status --json` and `shardlog status --group G --json`, one code path
for the CLI and the console, so both show the same numbers.

Ingest: per partition its state, head, ingest checkpoint, lease owner and (optionally) lag.

The rows come from the live set (one Query of the live index, the ingest group's leases on
it by key), or with ``history`` (`--all`) from one Scan of the partitions table and one
Query of the ingest group's leases. The lag (records in the shard past the ingest
checkpoint) reads the shard itself: up to ``LAG_MAX_PAGES`` GetRecords plus one
GetShardIterator per partition that is not ENDED, so callers that are looked at often
(the console) ask for it only on demand.

A consumer group: ``shardlog.consumer.status.group_progress`` per partition, with the lag in
ms (one read of the oldest undelivered record per lagging partition), the group's kind and
its last seek (`shardlog group seek`: when, to what, by whom; the group item, one read).
"""

from __future__ import annotations

from typing import Any

from botocore.exceptions import ClientError

from shardlog import constants as C
from shardlog.aws import Clients
from shardlog.consumer.status import group_progress, lag_ms
from shardlog.dal.seek import read_group_summary
from shardlog.reader import LogReader
from shardlog.tables import Lease, PartitionInfo, TableNames, Tables

LAG_MAX_PAGES = 10
LAG_PAGE_RECORDS = 10_000


def ingest_rows(
    clients: Clients,
    stream_name: str,
    tables: TableNames,
    *,
    with_lag: bool = True,
    history: bool = False,
) -> list[dict[str, Any]]:
    """`shardlog status --json`'s rows; ``lagRecords`` None when not read or unknown.
    ``history`` (`--all`): retired partitions too."""
    lineage, leases = Tables(clients, tables).group_view(C.INGEST_GROUP, history=history)
    rows = []
    for partition in lineage.live:
        lease = leases.get(partition.partition_id)
        rows.append(
            {
                "partitionId": partition.partition_id,
                "state": partition.state,
                "nextSeq": partition.next_seq,
                "trimHorizonSeq": partition.trim_horizon,
                "ingestCheckpoint": lease.checkpoint if lease else None,
                "leaseOwner": lease.owner if lease else None,
                "lagRecords": ingest_lag(clients, stream_name, partition, lease)
                if with_lag
                else None,
                "parents": list(partition.parents),
                "retired": partition.retired,
            }
        )
    return rows


def ingest_lag(
    clients: Clients, stream: str, partition: PartitionInfo, lease: Lease | None
) -> int | None:
    """Records in the shard after the ingest checkpoint (bounded count; None if unknown)."""
    if partition.state == C.STATE_ENDED:
        return 0
    kwargs: dict[str, Any] = {"StreamName": stream, "ShardId": partition.partition_id}
    if lease and lease.checkpoint:
        kwargs.update(
            ShardIteratorType="AFTER_SEQUENCE_NUMBER", StartingSequenceNumber=lease.checkpoint
        )
    else:
        kwargs["ShardIteratorType"] = "TRIM_HORIZON"
    try:
        iterator = clients.kinesis.get_shard_iterator(**kwargs)["ShardIterator"]
        count = 0
        for _ in range(LAG_MAX_PAGES):
            if not iterator:
                break
            page = clients.kinesis.get_records(ShardIterator=iterator, Limit=LAG_PAGE_RECORDS)
            count += len(page.get("Records", []))
            if not page.get("Records") or page.get("MillisBehindLatest", 0) == 0:
                break
            iterator = page.get("NextShardIterator")
        return count
    except ClientError:  # the stream may be gone or the shard trimmed: lag unknown
        return None


def group_rows(
    clients: Clients,
    bucket: str,
    tables: TableNames,
    group: str,
    now_ms: int,
    *,
    history: bool = False,
) -> list[dict[str, Any]]:
    """`shardlog status --group G --json`'s rows (NotFoundError for an unknown group)."""
    names = Tables(clients, tables)
    rows = group_progress(names, group, now_ms, history=history)
    reader = LogReader(clients, bucket, tables, prefetch=1)
    summary = read_group_summary(clients, tables.consumers, group)
    kind = summary.kind or "workers"
    last_seek = summary.last_seek.as_json() if summary.last_seek else None
    return [
        {
            **row.as_json(),
            "lagMs": lag_ms(reader, row, now_ms),
            "groupKind": kind,
            "lastSeek": last_seek,
        }
        for row in rows
    ]
