"""Demo-sized traffic through the whole local runtime (Kinesis -> ingest -> log) across a
split and a merge, then compaction into the lake table: every committed record exactly
once, the snapshot's watermarks equal to what the table holds, and the table opened by a
plain pyiceberg user from ``.shardlog/local.json`` alone."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from pyiceberg.catalog import load_catalog

from shardlog.lake.commit import WATERMARKS_PROPERTY
from shardlog.spark.jobs import JobArgs
from spark_jobs.compact import compact
from tests.spark.helpers import log_rows, rows_of
from tests.support.aws import AwsEnv
from tests.support.runtime import (
    e2e_runtime,
    produce_across_split_and_merge,
    wait_until_ingested,
)


def test_split_and_merge_traffic_lands_in_the_table_exactly_once(
    spark: Any, tmp_path: Path
) -> None:
    state = tmp_path / "local.json"
    runtime = e2e_runtime("lake", state_file=state)
    with runtime:
        args = JobArgs.from_config(runtime.config, max_records=100)
        # Compaction runs between the rounds too, as the schedule would while traffic flows.
        counts = produce_across_split_and_merge(
            runtime, per_step=200, between=lambda: compact(spark, args)
        )
        total = sum(counts.values())
        tables = wait_until_ingested(runtime, total)
        assert len(tables.list_partitions()) == 5  # 2 roots, 2 children of a split, 1 merged
        while compact(spark, args).records:
            pass

        # A pyiceberg user with nothing but the state file.
        entry = json.loads(state.read_text())["lake"]
        table = load_catalog(entry["catalog"], **entry["properties"]).load_table(entry["table"])
        rows = rows_of(table.scan().to_arrow())
        aws = AwsEnv(runtime.config, runtime.clients, runtime.ingest_requests)
        assert len(rows) == total == len({(r[0], r[1]) for r in rows})
        assert rows == log_rows(aws)
        held = Counter(r[0] for r in rows)
        summary = table.current_snapshot().summary  # type: ignore[union-attr]
        assert json.loads(summary[WATERMARKS_PROPERTY]) == dict(held)
        for partition_id, n in held.items():
            assert sorted(r[1] for r in rows if r[0] == partition_id) == list(range(n))
