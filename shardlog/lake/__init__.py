"""The lake table: the committed log as an Apache Iceberg table.

- ``settings``: where the table lives (catalog name, ``load_catalog`` properties, identifier,
  location); no pyiceberg import, so the local runtime records it without the Spark extra;
- ``schema``: the table's columns, partitioning and sort order;
- ``catalog``: opening or creating the table (Glue on AWS and on the embedded AWS);
- ``files``: Parquet data files of committed segments, written with pyarrow;
- ``commit``: the exactly-once append (data files and watermarks in one snapshot).

Everything here is plain pyiceberg and pyarrow: no Spark, no JAR. The compaction job does not
use it yet: it still writes Parquet directories with the ``$compaction`` watermark.
"""
