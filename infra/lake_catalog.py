"""The lake's catalog: the Glue database compaction appends the lake table into, the Athena
workgroup that queries it, the named queries, and what the Spark jobs may do there.

Each builder makes its resources in the scope it is given (the Analytics construct), so
their logical ids are those of the construct that composes them.
"""

from __future__ import annotations

from aws_cdk import Aws
from aws_cdk import aws_athena as athena
from aws_cdk import aws_glue as glue
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from constructs import Construct

from infra import constants as IC

LAKE_DATABASE, LAKE_TABLE = IC.LAKE_DATABASE, IC.LAKE_TABLE
# The lake table (docs/LAKE.md): its data and metadata files are written once and never
# overwritten; a run that lost a commit race deletes its own files, and maintenance deletes
# files no snapshot references, hence DeleteObject, on the table's prefix only.
LAKE_OBJECT_ACTIONS = ["s3:GetObject", "s3:PutObject", "s3:DeleteObject"]
# pyiceberg's Glue catalog: read the database, create the table once, then commit by
# UpdateTable (conditional on the table's version). The stack creates the database.
LAKE_GLUE_ACTIONS = ["glue:GetDatabase", "glue:GetTable", "glue:CreateTable", "glue:UpdateTable"]


def lake_glue_arns() -> list[str]:
    """The Glue catalog, the lake database and its table: nothing else in Glue."""
    prefix = f"arn:{Aws.PARTITION}:glue:{Aws.REGION}:{Aws.ACCOUNT_ID}"
    return [
        f"{prefix}:catalog",
        f"{prefix}:database/{LAKE_DATABASE}",
        f"{prefix}:table/{LAKE_DATABASE}/{LAKE_TABLE}",
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
    scope: Construct, workgroup: athena.CfnWorkGroup, database: glue.CfnDatabase
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
