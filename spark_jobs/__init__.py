"""PySpark jobs: entry points on EMR Serverless and in local mode (docs/SPARK.md)."""
