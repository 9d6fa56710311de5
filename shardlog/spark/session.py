"""The one place the Spark jobs build their SparkSession."""

from __future__ import annotations

from pyspark.sql import SparkSession


def build_session(app_name: str) -> SparkSession:
    """On EMR Serverless the service configures the session; locally, spark-submit does.
    Dates and hours of the jobs are UTC whatever the machine's zone."""
    return (
        SparkSession.builder.appName(app_name)
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
