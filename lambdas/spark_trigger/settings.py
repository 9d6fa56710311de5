"""The Spark trigger's settings, validated once at cold start."""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import BaseModel, Field

from lambdas.settings import settings_from_env
from shardlog import constants as C
from shardlog.settings import BucketName, CompactionMaxRecords, TableName
from shardlog.spark.jobs import JobArgs
from shardlog.spark.trigger import SparkTarget


class SparkTriggerSettings(BaseModel, frozen=True):
    application_id: str = Field(min_length=1, max_length=64)
    execution_role_arn: str = Field(pattern=r"^arn:aws[a-z-]*:iam::\d{12}:role/.+")
    spark_jobs_uri: str = Field(pattern=r"^s3://.+/$")
    # Built by `make spark-archive` and deployed with the stack; without it the jobs would
    # fail on EMR importing shardlog, so a deployment without it fails here, loudly.
    spark_deps_uri: str = Field(pattern=r"^s3://.+\.(tar\.gz|tgz|zip)$")
    bucket: BucketName
    partitions_table: TableName
    consumers_table: TableName
    region: str = Field(default=C.DEFAULT_REGION, min_length=1)
    compaction_max_records: CompactionMaxRecords = C.DEFAULT_COMPACTION_MAX_RECORDS

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> SparkTriggerSettings:
        names = {
            "application_id": C.ENV_EMR_APPLICATION_ID,
            "execution_role_arn": C.ENV_EMR_EXECUTION_ROLE_ARN,
            "spark_jobs_uri": C.ENV_SPARK_JOBS_URI,
            "spark_deps_uri": C.ENV_SPARK_DEPS_URI,
            "bucket": C.ENV_BUCKET_NAME,
            "partitions_table": C.ENV_PARTITIONS_TABLE,
            "consumers_table": C.ENV_CONSUMERS_TABLE,
            "region": C.ENV_REGION,
            "compaction_max_records": C.ENV_COMPACTION_MAX_RECORDS,
        }
        return settings_from_env(cls, names, "Spark trigger", environ)

    def target(self) -> SparkTarget:
        return SparkTarget(
            application_id=self.application_id,
            execution_role_arn=self.execution_role_arn,
            scripts_uri=self.spark_jobs_uri,
            deps_uri=self.spark_deps_uri,
        )

    def job_args(self, endpoint_url: str | None = None) -> JobArgs:
        return JobArgs(
            bucket=self.bucket,
            partitions_table=self.partitions_table,
            consumers_table=self.consumers_table,
            region=self.region,
            endpoint_url=endpoint_url,
            max_records=self.compaction_max_records,
        )
