"""The lake table: the committed log as an Apache Iceberg table (docs/LAKE.md).

- ``schema``: the table's columns, partitioning and sort order;
- ``catalog``: where the table lives (Glue on AWS and on the embedded AWS) and opening it;
- ``commit``: the exactly-once append (data files and watermarks in one snapshot);
- ``maintenance``: expiring snapshots and removing files no snapshot references;
- ``query``: filtered reads, and the fresh read that adds the log beyond the table.

Everything here is plain pyiceberg and pyarrow: no Spark, no JAR. The compaction job
(``spark_jobs/compact.py``) writes the files in its executors and commits through ``commit``.
"""
