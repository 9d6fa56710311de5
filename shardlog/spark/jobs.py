"""The Spark jobs as EMR Serverless sees them: names, ``entryPointArguments``, parameters.

The trigger (Lambda and CLI) builds a run from here and the job scripts parse their
arguments with the same ``JobArgs``, so the two can never disagree on a flag.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from shardlog import constants as C
from shardlog.config import ShardlogConfig
from shardlog.lake.settings import LakeSettings

if TYPE_CHECKING:  # pragma: no cover
    from shardlog.lake.declared import LakeTables
    from shardlog.lake.rewrite import RewriteSettings

COMPACT = "compact"
ANALYTICS = "analytics"
MAINTAIN = "maintain"  # the lake table's maintenance (shardlog.lake.maintenance)
JOBS = (COMPACT, ANALYTICS, MAINTAIN)
DEFAULT_TOP_KEYS = 20
# EMR 7.1+ images carry Python 3.11 beside the default 3.9 (EMR release guide, application
# versions); shardlog needs 3.10+, so both the driver and the executors use it.
EMR_PYTHON = "/usr/bin/python3.11"
# spark.archives unpacks the archive into each container's working directory under this name.
DEPS_ALIAS = "shardlog_deps"
RUN_TIMEOUT_MINUTES = {COMPACT: 120, ANALYTICS: 60, MAINTAIN: 60}
# Where the stack deploys spark_jobs/ and the archive in the artifacts bucket (infra/constants.py
# JOB_SCRIPTS_PREFIX and SPARK_DEPS_PREFIX; tests/spark checks they agree).
SCRIPTS_PREFIX = "spark_jobs/"
DEPS_PREFIX = "spark_deps/"
ARCHIVE_NAME = "spark_jobs_deps.tar.gz"
# The analytics job's summary, which `shardlog spark summary` renders.
SUMMARY_KEY = f"{C.ANALYTICS_PREFIX}summary.json"


def run_name(job: str) -> str:
    """The job run name; the trigger finds a job's active runs by it."""
    _check(job)
    return f"shardlog-{job}"


def entry_point(scripts_uri: str, job: str) -> str:
    """``s3://<artifacts>/spark_jobs/`` + ``compact.py``: where the script was deployed."""
    _check(job)
    return f"{scripts_uri.rstrip('/')}/{job}.py"


def spark_submit_parameters(deps_uri: str | None) -> str:
    """Ship shardlog, pyarrow and boto3 as an archive, and run both sides on Python 3.11."""
    confs = [
        ("spark.emr-serverless.driverEnv.PYSPARK_PYTHON", EMR_PYTHON),
        ("spark.executorEnv.PYSPARK_PYTHON", EMR_PYTHON),
        ("spark.sql.session.timeZone", "UTC"),
    ]
    if deps_uri:
        confs += [
            ("spark.archives", f"{deps_uri}#{DEPS_ALIAS}"),
            ("spark.emr-serverless.driverEnv.PYTHONPATH", f"./{DEPS_ALIAS}"),
            ("spark.executorEnv.PYTHONPATH", f"./{DEPS_ALIAS}"),
        ]
    return " ".join(f"--conf {shlex.quote(f'{key}={value}')}" for key, value in confs)


def _declared_tables(config: ShardlogConfig) -> str:
    """The declared tables as JSON: the local state file's, else the environment's."""
    saved = config.extra.get(C.LOCAL_STATE_LAKE_TABLES)
    if saved:
        return json.dumps(saved, sort_keys=True)
    return os.environ.get(C.ENV_LAKE_TABLES, "")


def _check(job: str) -> None:
    if job not in JOBS:
        raise ValueError(f"unknown Spark job {job!r}; one of {', '.join(JOBS)}")


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not a positive integer")
    return value


def _at_least(minimum: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        value = int(text)
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{value} is below the minimum {minimum}")
        return value

    return parse


def _within(minimum: int, maximum: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        value = _at_least(minimum)(text)
        if value > maximum:
            raise argparse.ArgumentTypeError(f"{value} is above the maximum {maximum}")
        return value

    return parse


@dataclass(frozen=True)
class JobArgs:
    """What a job needs to find the log: its ``entryPointArguments``."""

    bucket: str
    partitions_table: str
    consumers_table: str
    region: str = C.DEFAULT_REGION
    endpoint_url: str | None = None
    max_records: int = C.DEFAULT_COMPACTION_MAX_RECORDS
    top_keys: int = DEFAULT_TOP_KEYS
    lake_table: str = C.DEFAULT_LAKE_TABLE  # <Glue database>.<table>
    snapshot_retention_hours: int = C.DEFAULT_LAKE_SNAPSHOT_RETENTION_HOURS
    orphan_grace_hours: int = C.DEFAULT_LAKE_ORPHAN_GRACE_HOURS
    target_file_mib: int = C.DEFAULT_LAKE_TARGET_FILE_MIB
    small_file_mib: int = C.DEFAULT_LAKE_SMALL_FILE_MIB
    # The declared typed tables, a JSON array (shardlog.lake.declared); "" for none.
    lake_tables: str = ""

    @classmethod
    def from_config(cls, config: ShardlogConfig, **overrides: int) -> JobArgs:
        return cls(
            bucket=config.bucket,
            partitions_table=config.partitions_table,
            consumers_table=config.consumers_table,
            region=config.region,
            endpoint_url=config.endpoint_url,
            lake_table=LakeSettings.from_config(config).table,
            lake_tables=_declared_tables(config),
            **overrides,
        )

    def declared(self) -> LakeTables:
        """The declared typed tables, checked (``LakeDeclarationError`` naming the field)."""
        from shardlog.lake.declared import parse_lake_tables  # pyiceberg: not in the Lambdas

        data = json.loads(self.lake_tables) if self.lake_tables else None
        return parse_lake_tables(data, "--lake-tables")

    def lake(self) -> LakeSettings:
        """Where the lake table lives: derived from the arguments, the same in every job."""
        return LakeSettings.for_deployment(
            self.bucket, self.region, self.endpoint_url, self.lake_table
        )

    def rewrite(self) -> RewriteSettings:
        """Maintenance's right-sized files (``shardlog.lake.rewrite``)."""
        from shardlog.lake.rewrite import RewriteSettings  # pyarrow: not in the Lambdas

        return RewriteSettings.of_mib(self.target_file_mib, self.small_file_mib)

    def config(self) -> ShardlogConfig:
        return ShardlogConfig(
            bucket=self.bucket,
            partitions_table=self.partitions_table,
            consumers_table=self.consumers_table,
            region=self.region,
            endpoint_url=self.endpoint_url,
        )

    def to_argv(self) -> list[str]:
        argv = [
            "--bucket",
            self.bucket,
            "--partitions-table",
            self.partitions_table,
            "--consumers-table",
            self.consumers_table,
            "--region",
            self.region,
            "--max-records",
            str(self.max_records),
            "--top-keys",
            str(self.top_keys),
            "--lake-table",
            self.lake_table,
            "--snapshot-retention-hours",
            str(self.snapshot_retention_hours),
            "--orphan-grace-hours",
            str(self.orphan_grace_hours),
            "--target-file-mib",
            str(self.target_file_mib),
            "--small-file-mib",
            str(self.small_file_mib),
        ]
        if self.endpoint_url:
            argv += ["--endpoint-url", self.endpoint_url]
        if self.lake_tables:
            argv += ["--lake-tables", self.lake_tables]
        return argv

    @classmethod
    def parser(cls, description: str) -> argparse.ArgumentParser:
        parser = argparse.ArgumentParser(description=description)
        parser.add_argument("--bucket", required=True, help="The log bucket.")
        parser.add_argument("--partitions-table", required=True)
        parser.add_argument("--consumers-table", required=True)
        parser.add_argument("--region", default=C.DEFAULT_REGION)
        parser.add_argument(
            "--endpoint-url", default=None, help="The embedded AWS's URL (local runs only)."
        )
        parser.add_argument(
            "--max-records",
            type=_positive,
            default=C.DEFAULT_COMPACTION_MAX_RECORDS,
            help="Compaction: records per partition per run at most (whole segments).",
        )
        parser.add_argument(
            "--top-keys", type=_positive, default=DEFAULT_TOP_KEYS, help="Analytics: top N keys."
        )
        parser.add_argument(
            "--lake-table",
            default=C.DEFAULT_LAKE_TABLE,
            help="The lake table, <Glue database>.<table> (docs/LAKE.md).",
        )
        parser.add_argument(
            "--snapshot-retention-hours",
            type=_at_least(C.MIN_LAKE_SNAPSHOT_RETENTION_HOURS),
            default=C.DEFAULT_LAKE_SNAPSHOT_RETENTION_HOURS,
            help="Maintenance: expire snapshots older than this (never the current one).",
        )
        parser.add_argument(
            "--orphan-grace-hours",
            type=_at_least(C.MIN_LAKE_ORPHAN_GRACE_HOURS),
            default=C.DEFAULT_LAKE_ORPHAN_GRACE_HOURS,
            help="Maintenance: remove unreferenced files older than this (> a compaction run).",
        )
        size = _within(1, C.MAX_LAKE_TARGET_FILE_MIB)
        parser.add_argument(
            "--target-file-mib",
            type=size,
            default=C.DEFAULT_LAKE_TARGET_FILE_MIB,
            help="Maintenance: rewrite a day's small files into files near this size.",
        )
        parser.add_argument(
            "--small-file-mib",
            type=size,
            default=C.DEFAULT_LAKE_SMALL_FILE_MIB,
            help="Maintenance: files below this size are rewritten (at most the target).",
        )
        parser.add_argument(
            "--lake-tables",
            default="",
            help="Compaction: the declared typed tables, a JSON array (docs/LAKE.md).",
        )
        return parser

    @classmethod
    def parse(cls, argv: Sequence[str] | None, description: str = "") -> JobArgs:
        parser = cls.parser(description)
        ns = parser.parse_args(argv)
        if ns.small_file_mib > ns.target_file_mib:
            parser.error(
                f"argument --small-file-mib: {ns.small_file_mib} is above --target-file-mib "
                f"{ns.target_file_mib}: files above the target are not small"
            )
        return cls(
            bucket=ns.bucket,
            partitions_table=ns.partitions_table,
            consumers_table=ns.consumers_table,
            region=ns.region,
            endpoint_url=ns.endpoint_url,
            max_records=ns.max_records,
            top_keys=ns.top_keys,
            lake_table=ns.lake_table,
            snapshot_retention_hours=ns.snapshot_retention_hours,
            orphan_grace_hours=ns.orphan_grace_hours,
            target_file_mib=ns.target_file_mib,
            small_file_mib=ns.small_file_mib,
            lake_tables=ns.lake_tables,
        )
