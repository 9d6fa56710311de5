"""Writes the local Spark JVMs' class archive (``shardlog.spark.class_archive``) from a known
workload: ``python -m shardlog.local.spark_classes`` (``make spark-classes``).

A dynamic class archive holds the classes its writer loaded, so it is written by a
spark-submit of ``workload`` (this file, ``--workload``): a session, Arrow batches through
``mapInArrow``, ``from_json`` to a struct, an aggregation with a shuffle, what the jobs do.
The archive is published only after that JVM exited cleanly (``ClassArchive.publish``).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from shardlog.local.emr_serverless import local_spark_conf, spark_submit_executable
from shardlog.spark.class_archive import ClassArchive, launch_options, local_class_archive
from shardlog.spark.session import LOCAL_MASTER, local_environment


def build(archive: ClassArchive | None = None) -> Path | None:
    """The archive, written by a spark-submit of ``workload`` when there is none (None: off)."""
    archive = archive or local_class_archive()
    if archive is None:
        return None
    java_options, written = launch_options(archive)
    if written is None:
        return archive.path
    command = [str(spark_submit_executable()), "--master", LOCAL_MASTER]
    command += [*local_spark_conf(None, java_options=java_options), __file__, "--workload"]
    env = dict(os.environ) | local_environment(sys.executable)
    try:
        done = subprocess.run(command, env=env, capture_output=True, timeout=600)
        if done.returncode != 0:
            raise RuntimeError(
                f"the class archive's spark-submit exited {done.returncode}: "
                f"{done.stdout.decode(errors='replace')[-2000:]}"
            )
        archive.publish(written, done.returncode)
    finally:
        written.unlink(missing_ok=True)
    return archive.path


def workload() -> None:
    """What the jobs make a local Spark JVM load, in a few seconds."""
    from collections.abc import Iterable

    import pyarrow as pa
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    spark = SparkSession.builder.getOrCreate()

    def through_arrow(batches: Iterable[pa.RecordBatch]) -> Iterable[pa.RecordBatch]:
        for batch in batches:
            yield pa.RecordBatch.from_pydict({"id": batch.column(0), "n": batch.column(1)})

    rows = spark.range(2_000).select(
        "id", F.to_json(F.struct((F.col("id") % 7).alias("k"))).alias("n")
    )
    mapped = rows.mapInArrow(through_arrow, "id long, n string")
    parsed = mapped.select("id", F.from_json("n", "struct<k:int>").alias("v"))
    totals = parsed.groupBy("v.k").agg(F.count("*"), F.max("id")).orderBy("k").collect()
    assert len(totals) == 7, totals
    spark.stop()


if __name__ == "__main__":
    if sys.argv[1:] == ["--workload"]:
        workload()
    else:
        built = build()
        print(f"class archive: {built or 'off (SHARDLOG_SPARK_CLASS_ARCHIVE=0 or no java)'}")
