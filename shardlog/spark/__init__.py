"""The Spark side of shardlog: what the jobs in spark_jobs/ share, and how runs are started.

- ``jobs``: job names, their ``entryPointArguments`` and Spark parameters;
- ``watermark``: the compaction watermark (consumers group ``$compaction``), fenced writes;
- ``io``: executor-side I/O without JARs (boto3 + pyarrow): segments in, Parquet out;
- ``trigger``: start a run only when none of that job is active, idempotently;
- ``archive``: the dependency archive EMR Serverless runs the jobs with.

Nothing here imports pyspark or pyarrow at import time except ``io`` (executor code), so
the trigger Lambda and the CLI load without them. docs/SPARK.md is the guide.
"""
