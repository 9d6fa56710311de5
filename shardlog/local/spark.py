"""The analytics side of the embedded AWS: what infra/analytics.py creates on AWS.

An EMR Serverless application (on the stack's release label), a job execution role, and an
artifacts bucket holding spark_jobs/ at the prefix the stack deploys it to. Job runs of the
application execute with a local spark-submit (shardlog/local/emr_serverless.py). Idempotent:
``shardlog spark run`` calls it before each run against the embedded AWS.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from botocore.exceptions import ClientError

from shardlog import constants as C
from shardlog.aws import Clients
from shardlog.config import ShardlogConfig
from shardlog.exceptions import aws_error_code
from shardlog.spark.exceptions import JobRunError
from shardlog.spark.jobs import ANALYTICS, COMPACT, SCRIPTS_PREFIX, JobArgs
from shardlog.spark.trigger import SparkTarget, SparkTrigger
from shardlog.tables import Tables

ARTIFACTS_BUCKET = "shardlog-artifacts"
APPLICATION_NAME = C.LOCAL_SPARK_APPLICATION
EXECUTION_ROLE_NAME = "shardlog-spark-execution"
_ASSUME_ROLE = {
    "Version": "2012-10-17",
    "Statement": [
        {
            "Effect": "Allow",
            "Principal": {"Service": "emr-serverless.amazonaws.com"},
            "Action": "sts:AssumeRole",
        }
    ],
}


def spark_jobs_dir() -> Path:
    import spark_jobs

    # __path__, not __file__: an editable install made before spark_jobs/ held an
    # __init__.py imports it as a namespace package, which has no __file__.
    return Path(next(iter(spark_jobs.__path__))).resolve()


def deploy_scripts(clients: Clients, bucket: str, scripts_dir: Path) -> list[str]:
    """Upload the job scripts, as the stack's BucketDeployment does."""
    try:
        clients.s3.create_bucket(Bucket=bucket)
    except ClientError as exc:
        if aws_error_code(exc) not in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
            raise
    keys = []
    for script in sorted(scripts_dir.glob("*.py")):
        key = f"{SCRIPTS_PREFIX}{script.name}"
        clients.s3.put_object(Bucket=bucket, Key=key, Body=script.read_bytes())
        keys.append(key)
    return keys


def _execution_role_arn(clients: Clients) -> str:
    iam = clients.client("iam")
    try:
        role = iam.create_role(
            RoleName=EXECUTION_ROLE_NAME, AssumeRolePolicyDocument=json.dumps(_ASSUME_ROLE)
        )
    except ClientError as exc:
        if aws_error_code(exc) != "EntityAlreadyExists":
            raise
        role = iam.get_role(RoleName=EXECUTION_ROLE_NAME)
    return str(role["Role"]["Arn"])


def _application_id(clients: Clients, name: str) -> str:
    emr = clients.client("emr-serverless")
    for page in emr.get_paginator("list_applications").paginate():
        for app in page["applications"]:
            if app["name"] == name and app["state"] != "TERMINATED":
                return str(app["id"])
    created = emr.create_application(name=name, releaseLabel=C.EMR_RELEASE_LABEL, type="SPARK")
    return str(created["applicationId"])


def provision_spark(
    clients: Clients,
    *,
    application_name: str = APPLICATION_NAME,
    artifacts_bucket: str = ARTIFACTS_BUCKET,
    scripts_dir: Path | None = None,
) -> SparkTarget:
    deploy_scripts(clients, artifacts_bucket, scripts_dir or spark_jobs_dir())
    return SparkTarget(
        application_id=_application_id(clients, application_name),
        execution_role_arn=_execution_role_arn(clients),
        scripts_uri=f"s3://{artifacts_bucket}/{SCRIPTS_PREFIX}",
    )


def run_jobs_and_verify(
    clients: Clients,
    config: ShardlogConfig,
    *,
    timeout_s: float = 900.0,
    log: Callable[[str], None] = lambda _msg: None,
) -> tuple[dict[str, Any], list[str]]:
    """Compaction then analytics through StartJobRun, as the schedules would start them;
    then check the compacted rows are exactly the committed log: (summary, violations)."""
    from shardlog.spark.summary import load_summary, render_table

    target = provision_spark(clients)
    trigger = SparkTrigger(clients.client("emr-serverless"), target, JobArgs.from_config(config))
    now = datetime.now(UTC)
    for job in (COMPACT, ANALYTICS):
        started = time.monotonic()
        result = trigger.trigger(job, now)
        if result.job_run_id is None:
            return {}, [f"spark {job}: not started, active runs {result.active_run_ids}"]
        try:
            trigger.wait(result.job_run_id, timeout_s, poll_s=0.5)
        except JobRunError as exc:
            return {}, [f"spark {job}: {exc}"]
        log(
            f"spark {job}: job run {result.job_run_id} SUCCESS in {time.monotonic() - started:.1f}s"
        )
    summary = load_summary(clients, config.bucket)
    log(render_table(summary))
    heads = {p.partition_id: p.next_seq for p in Tables(clients, config.tables).list_partitions()}
    violations = []
    if summary["duplicateRows"]:
        violations.append(f"compacted Parquet has {summary['duplicateRows']} duplicate rows")
    rows = {p["partitionId"]: p for p in summary["partitions"]}
    for partition_id, head in heads.items():
        got = rows.get(partition_id)
        if head and (
            got is None or (got["rows"], got["minSeq"], got["maxSeq"]) != (head, 0, head - 1)
        ):
            violations.append(f"{partition_id}: log has seqs [0, {head}), compacted rows are {got}")
    if summary["records"] != sum(heads.values()):
        violations.append(
            f"compacted {summary['records']} rows, the log holds {sum(heads.values())} records"
        )
    lake, lake_violations = verify_lake(JobArgs.from_config(config), heads)
    typed, typed_violations = verify_typed(JobArgs.from_config(config), heads)
    summary = {**summary, "lake": {**lake, "typed": typed}}
    return summary, violations + lake_violations + typed_violations


def verify_lake(args: JobArgs, heads: dict[str, int]) -> tuple[dict[str, Any], list[str]]:
    """The lake table against the log's heads: each partition's rows are exactly seqs
    [0, head), once, and the snapshot's watermark is the head. Also a sample query."""
    from shardlog.lake.catalog import open_table
    from shardlog.lake.commit import table_watermarks
    from shardlog.lake.query import LakeQuery, json_rows, run_query

    table = open_table(args.lake())
    snapshot = table.current_snapshot()
    rows = table.scan(selected_fields=("partition_id", "seq")).to_arrow()
    seqs: dict[str, list[int]] = {}
    for partition_id, seq in zip(
        rows["partition_id"].to_pylist(), rows["seq"].to_pylist(), strict=True
    ):
        seqs.setdefault(partition_id, []).append(seq)
    marks = table_watermarks(table)
    violations = [
        f"lake table {args.lake_table}: {partition_id} holds {len(seqs.get(partition_id, []))} "
        f"rows, watermark {marks.get(partition_id, 0)}, the log has seqs [0, {head})"
        for partition_id, head in sorted(heads.items())
        if sorted(seqs.get(partition_id, [])) != list(range(head))
        or marks.get(partition_id, 0) != head
    ]
    first = min(heads, default=None)
    sample_query = LakeQuery(partitions=(first,) if first else (), limit=5)
    sample = list(json_rows(run_query(table, sample_query)))
    lake = {
        "table": args.lake_table,
        "rows": rows.num_rows,
        "snapshotId": snapshot.snapshot_id if snapshot else None,
        "sampleQuery": f"shardlog lake query --partition {first} --limit 5",
        "sample": sample,
    }
    return lake, violations


def verify_typed(args: JobArgs, heads: dict[str, int]) -> tuple[list[dict[str, Any]], list[str]]:
    """Each declared typed table against the raw lake table: every record (of a table with
    no record filter) is in the typed table or its dead-letter table, once; a typed row's
    scalar values equal its payload's, a rejected row holds the record's bytes; the typed
    table's watermarks are the heads. Per table: its counts and a few refusals."""
    from shardlog.lake.catalog import open_table
    from shardlog.lake.commit import table_watermarks
    from shardlog.lake.declared import column_name
    from shardlog.spark.typed import TypedTables

    declared = args.declared().tables
    if not declared:
        return [], []
    raw = open_table(args.lake()).scan(selected_fields=("partition_id", "seq", "data"))
    data = {(r["partition_id"], r["seq"]): r["data"] for r in raw.to_arrow().to_pylist()}
    summaries, violations = [], []
    for table in declared:
        where = TypedTables.beside(args.lake(), table)
        typed_table, rejected_table = where.open(create=False)
        rows = typed_table.scan().to_arrow().to_pylist()
        rejected = rejected_table.scan().to_arrow().to_pylist()
        keys = [(r["partition_id"], r["seq"]) for r in rows + rejected]
        name = where.typed.table
        if len(keys) != len(set(keys)):
            violations.append(f"{name}: {len(keys) - len(set(keys))} records landed twice")
        if table.filter is None and set(keys) != set(data):
            violations.append(
                f"{name}: {len(set(data) - set(keys))} records in neither it nor its "
                f"dead-letter table, {len(set(keys) - set(data))} not in the log"
            )
        plain = {k: p.type for k, p in table.payload.properties.items() if p.format is None}
        for row in rows:
            payload = json.loads(data[(row["partition_id"], row["seq"])])
            wrong = [
                k
                for k, kind in plain.items()
                if _same_json_type(kind, payload.get(k)) and row[column_name(k)] != payload[k]
            ]
            if wrong:
                violations.append(f"{name}: {row['partition_id']}/{row['seq']}: {wrong} differ")
        violations += [
            f"{name}_rejected: {r['partition_id']}/{r['seq']} holds other bytes than the log"
            for r in rejected
            if r["data"] != data.get((r["partition_id"], r["seq"]))
        ]
        marks = table_watermarks(typed_table)
        if marks != {p: h for p, h in heads.items() if h}:
            violations.append(f"{name}: watermarks {marks}, the log's heads {heads}")
        summaries.append(
            {
                "table": name,
                "rows": len(rows),
                "rejected": len(rejected),
                "refusals": sorted({f"{r['error_field']}: {r['error_reason']}" for r in rejected}),
                "sampleQuery": f"shardlog lake query --table {table.rejected_name} --limit 5",
            }
        )
    return summaries, violations[:20]


def _same_json_type(kind: str, value: object) -> bool:
    """Whether a payload's value is of its declared JSON type as Python reads it (the
    values the demo compares exactly)."""
    expected = {"string": (str,), "integer": (int,), "boolean": (bool,)}.get(kind, ())
    return isinstance(value, expected) and (kind == "boolean") == isinstance(value, bool)
