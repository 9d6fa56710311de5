"""The lake's catalog: the Glue database compaction appends the lake table into, the Athena
workgroup that queries it, the named queries, and what the Spark jobs may do there.

Each builder makes its resources in the scope it is given (the Analytics construct), so
their logical ids are those of the construct that composes them.
"""

from __future__ import annotations

import json
from typing import Any

from aws_cdk import Aws
from aws_cdk import aws_athena as athena
from aws_cdk import aws_glue as glue
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from constructs import Construct, Node

from infra import constants as IC
from infra.settings import SettingsError
from shardlog.lake.declared import LakeDeclarationError, LakeTables, parse_lake_tables

LAKE_DATABASE, LAKE_TABLE = IC.LAKE_DATABASE, IC.LAKE_TABLE
# The lake table (docs/LAKE.md): its data and metadata files are written once and never
# overwritten; a run that lost a commit race deletes its own files, and maintenance deletes
# files no snapshot references, hence DeleteObject, on the table's prefix only.
LAKE_OBJECT_ACTIONS = ["s3:GetObject", "s3:PutObject", "s3:DeleteObject"]
# pyiceberg's Glue catalog: read the database, create the table once, then commit by
# UpdateTable (conditional on the table's version). The stack creates the database.
LAKE_GLUE_ACTIONS = ["glue:GetDatabase", "glue:GetTable", "glue:CreateTable", "glue:UpdateTable"]
# The declarations reach each compaction run through the Spark trigger's environment (all
# of a Lambda function's variables share 4 KB): compact JSON of at most this many characters.
MAX_LAKE_TABLES_CHARS = 2048


def declared_tables(node: Node) -> LakeTables:
    """The typed tables of ``shardlog:lakeTables`` (cdk.json, or ``-c`` as JSON text),
    checked at synth: one error naming each refused field and its limit."""
    raw: Any = node.try_get_context(IC.CTX_LAKE_TABLES)
    if isinstance(raw, str):
        try:
            raw = json.loads(raw) if raw.strip() else None
        except ValueError as exc:
            raise SettingsError(f"context {IC.CTX_LAKE_TABLES} is not JSON: {exc}") from exc
    try:
        tables = parse_lake_tables(raw, IC.CTX_LAKE_TABLES)
    except LakeDeclarationError as exc:
        raise SettingsError(str(exc)) from exc
    size = len(lake_tables_json(tables))
    if size > MAX_LAKE_TABLES_CHARS:
        raise SettingsError(
            f"context {IC.CTX_LAKE_TABLES}: {size} characters of compact JSON, at most "
            f"{MAX_LAKE_TABLES_CHARS} (they travel in the Spark trigger's environment)"
        )
    return tables


def lake_tables_json(tables: LakeTables) -> str:
    """The declarations as the Spark trigger passes them to each compaction run."""
    return json.dumps(tables.to_json(), separators=(",", ":"), sort_keys=True)


def lake_table_names(tables: LakeTables) -> list[str]:
    """Every lake table of the stack: the raw one, each typed one and its dead-letter one."""
    return [LAKE_TABLE, *(n for t in tables.tables for n in (t.name, t.rejected_name))]


def lake_glue_arns(tables: LakeTables | None = None) -> list[str]:
    """The Glue catalog, the lake database and its tables: nothing else in Glue."""
    prefix = f"arn:{Aws.PARTITION}:glue:{Aws.REGION}:{Aws.ACCOUNT_ID}"
    return [
        f"{prefix}:catalog",
        f"{prefix}:database/{LAKE_DATABASE}",
        *(
            f"{prefix}:table/{LAKE_DATABASE}/{name}"
            for name in lake_table_names(tables or LakeTables())
        ),
    ]


def lake_database(scope: Construct) -> glue.CfnDatabase:
    return glue.CfnDatabase(
        scope,
        "LakeDatabase",
        catalog_id=Aws.ACCOUNT_ID,
        database_input=glue.CfnDatabase.DatabaseInputProperty(
            name=LAKE_DATABASE,
            description="shardlog: the lake table (docs/LAKE.md), appended by compaction",
        ),
    )


def athena_workgroup(scope: Construct, results: s3.IBucket, key: kms.IKey) -> athena.CfnWorkGroup:
    """Athena engine 3 (Iceberg), results encrypted with ``key``, enforced."""
    location = f"s3://{results.bucket_name}/{IC.ATHENA_RESULTS_PREFIX}"
    return athena.CfnWorkGroup(
        scope,
        "AthenaWorkgroup",
        name=IC.ATHENA_WORKGROUP,
        description="shardlog: queries of the lake table",
        recursive_delete_option=False,
        work_group_configuration=athena.CfnWorkGroup.WorkGroupConfigurationProperty(
            enforce_work_group_configuration=True,
            publish_cloud_watch_metrics_enabled=True,
            engine_version=athena.CfnWorkGroup.EngineVersionProperty(
                selected_engine_version="Athena engine version 3"
            ),
            result_configuration=athena.CfnWorkGroup.ResultConfigurationProperty(
                output_location=location,
                encryption_configuration=athena.CfnWorkGroup.EncryptionConfigurationProperty(
                    encryption_option="SSE_KMS", kms_key=key.key_arn
                ),
            ),
        ),
    )


def named_queries(
    scope: Construct,
    workgroup: athena.CfnWorkGroup,
    database: glue.CfnDatabase,
    tables: LakeTables | None = None,
) -> list[athena.CfnNamedQuery]:
    table = f'"{LAKE_DATABASE}"."{LAKE_TABLE}"'
    queries = {
        "RecordsPerKeyToday": (
            "shardlog: records per partition key today",
            f"SELECT partition_key, count(*) AS records FROM {table}\n"
            "WHERE arrival_time >= date_trunc('day', current_timestamp)\n"
            "GROUP BY partition_key ORDER BY records DESC LIMIT 20",
        ),
        "Watermarks": (
            "shardlog: the watermarks each compaction committed",
            f"SELECT committed_at, snapshot_id, summary['shardlog.watermarks'] AS watermarks\n"
            f'FROM "{LAKE_DATABASE}"."{LAKE_TABLE}$snapshots" ORDER BY committed_at DESC',
        ),
    }
    for declared in (tables or LakeTables()).tables:
        queries |= typed_queries(declared.name, declared.rejected_name)
    named = []
    for construct_id, (name, sql) in queries.items():
        query = athena.CfnNamedQuery(
            scope,
            construct_id,
            name=name,
            database=LAKE_DATABASE,
            work_group=IC.ATHENA_WORKGROUP,
            query_string=sql,
        )
        query.add_dependency(workgroup)
        query.add_dependency(database)
        named.append(query)
    return named


def typed_queries(name: str, rejected: str) -> dict[str, tuple[str, str]]:
    """A declared table's named queries: its newest rows, and its refusals by field."""
    construct = "".join(word.capitalize() for word in name.split("_"))
    return {
        f"Typed{construct}Latest": (
            f"shardlog: the newest rows of {name}",
            f'SELECT * FROM "{LAKE_DATABASE}"."{name}"\n'
            "WHERE arrival_time >= date_trunc('day', current_timestamp)\n"
            "ORDER BY arrival_time DESC LIMIT 100",
        ),
        f"Rejected{construct}ByField": (
            f"shardlog: records refused into {rejected}, by field and reason",
            "SELECT error_field, error_reason, count(*) AS records, max(arrival_time) AS latest\n"
            f'FROM "{LAKE_DATABASE}"."{rejected}"\n'
            "GROUP BY error_field, error_reason ORDER BY records DESC LIMIT 50",
        ),
    }
