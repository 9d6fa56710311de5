"""The lake page: the table's snapshots and watermarks (pyiceberg), the partitions' heads,
and the newest run of each Spark job (EMR Serverless)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import ClientError

from shardlog.aws import Clients
from shardlog.console.queries import RUNS_PAGE, SNAPSHOTS_SHOWN, iso_ms
from shardlog.console.source import Deployment
from shardlog.tables import PartitionInfo, Tables


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
