"""`shardlog lake query` against the embedded AWS: filters pushed to pyiceberg, JSON lines
or a table, ``--fresh`` adding the log beyond the table's watermark, and its limits."""

from __future__ import annotations

import base64
import json
import socket
import uuid
from typing import Any

import pytest

from shardlog import constants as C
from shardlog.lake.catalog import open_table
from shardlog.lake.commit import LakeAppend, append
from shardlog.lake.files import s3_uri, write_data_files
from shardlog.lake.query import LakeQuery
from shardlog.lake.settings import LakeSettings
from shardlog.segments import SegmentStore
from shardlog.spark.jobs import JobArgs
from tests.support.aws import AwsEnv
from tests.support.cli import run_cli
from tests.support.factories import BASE_ARRIVAL_MS, incoming_records, writer_for

P0, P1 = "shardId-000000000000", "shardId-000000000001"


def compact_now(aws: AwsEnv, lake: LakeSettings, ranges: dict[str, tuple[int, int]]) -> None:
    """What a compaction run commits, without Spark: ``ranges`` are segment-aligned."""
    store = SegmentStore(aws.clients, aws.config.bucket)
    segments = [s for p, (a, b) in ranges.items() for s in store.segments(p, a, b)]
    run_id = uuid.uuid4().hex[:16]
    files = write_data_files(aws.clients.s3, lake, segments, run_id)
    append(
        open_table(lake, create=True),
        LakeAppend(ranges, [s3_uri(lake.bucket, f.key) for f in files], run_id),
    )


@pytest.fixture
def lake(aws: AwsEnv, clock: Any) -> LakeSettings:
    writer = writer_for(aws, clock, segment_max_records=50)
    writer.append(P0, incoming_records(100, start=0, keys=("a", "b")))
    writer.append(P1, incoming_records(50, start=0, keys=("c",)))
    settings = JobArgs.from_config(aws.config).lake()
    compact_now(aws, settings, {P0: (0, 100), P1: (0, 50)})
    return settings


def query(aws: AwsEnv, *args: str) -> Any:
    return run_cli(aws, "lake", "query", *args)


def lines(result: Any) -> list[dict[str, Any]]:
    assert result.exit_code == 0, result.output
    return [json.loads(line) for line in result.output.splitlines()]


def test_json_lines_hold_every_row_by_partition_and_seq(aws: AwsEnv, lake: LakeSettings) -> None:
    rows = lines(query(aws, "--json"))
    assert [(r["partitionId"], r["seq"]) for r in rows] == [(P0, i) for i in range(100)] + [
        (P1, i) for i in range(50)
    ]
    first = rows[0]
    assert base64.b64decode(first["data"]) == b"a:0" and first["partitionKey"] == "a"
    assert first["arrivalTime"].endswith("Z") and first["committedAt"].endswith("Z")


def test_filters_on_key_partition_and_time(aws: AwsEnv, lake: LakeSettings) -> None:
    assert {r["partitionKey"] for r in lines(query(aws, "--json", "--partition-key", "b"))} == {"b"}
    assert len(lines(query(aws, "--json", "--partition-key", "b", "--partition-key", "c"))) == 100
    assert {r["partitionId"] for r in lines(query(aws, "--json", "--partition", P1))} == {P1}
    # Arrival times are BASE_ARRIVAL_MS + i: [since, until) takes seqs 10..19 of each partition.
    since = _iso(BASE_ARRIVAL_MS + 10)
    until = _iso(BASE_ARRIVAL_MS + 20)
    rows = lines(query(aws, "--json", "--since", since, "--until", until))
    assert [(r["partitionId"], r["seq"]) for r in rows] == [(P0, i) for i in range(10, 20)] + [
        (P1, i) for i in range(10, 20)
    ]


def test_a_table_for_people(aws: AwsEnv, lake: LakeSettings) -> None:
    result = query(aws, "--partition", P1, "--limit", "2")
    assert result.exit_code == 0, result.output
    header, first, _second, count = result.output.splitlines()
    assert header.split() == ["partitionId", "seq", "partitionKey", "arrivalTime", "data"]
    assert first.split()[:3] == [P1, "0", "c"] and first.split()[-1] == "c:0"
    assert count == "(2 rows)"


def test_fresh_adds_the_log_beyond_the_watermark(
    aws: AwsEnv, lake: LakeSettings, clock: Any
) -> None:
    writer_for(aws, clock, segment_max_records=50).append(
        P0, incoming_records(30, start=100, keys=("a", "b"))
    )
    assert len(lines(query(aws, "--json"))) == 150  # the table alone: not compacted yet
    fresh = lines(query(aws, "--json", "--fresh"))
    assert [(r["partitionId"], r["seq"]) for r in fresh] == [(P0, i) for i in range(130)] + [
        (P1, i) for i in range(50)
    ]
    only_new = lines(query(aws, "--json", "--fresh", "--partition-key", "a", "--partition", P0))
    assert [r["seq"] for r in only_new] == list(range(0, 130, 2))
    compact_now(aws, lake, {P0: (100, 130)})  # now in the table: still each record once
    assert lines(query(aws, "--json", "--fresh")) == fresh


def test_limit_at_and_past_its_edges(aws: AwsEnv, lake: LakeSettings) -> None:
    assert len(lines(query(aws, "--json", "--limit", "1"))) == 1
    assert len(lines(query(aws, "--json", "--limit", str(C.LAKE_QUERY_MAX_LIMIT)))) == 150
    for bad in ("0", str(C.LAKE_QUERY_MAX_LIMIT + 1)):
        result = query(aws, "--limit", bad)
        assert result.exit_code == 2 and "--limit" in result.output
        assert f"1<=x<={C.LAKE_QUERY_MAX_LIMIT}" in result.output


def test_filter_values_at_and_past_their_limit(aws: AwsEnv, lake: LakeSettings) -> None:
    n = C.LAKE_QUERY_MAX_FILTER_VALUES
    at = [a for i in range(n) for a in ("--partition-key", f"k{i}")]
    assert lines(query(aws, "--json", *at)) == []
    past = query(aws, *at, "--partition-key", "one-more")
    assert past.exit_code == 2
    assert f"partition key filter: at most {n} values, not {n + 1}" in past.output
    with pytest.raises(ValueError, match=f"partition filter: at most {n} values"):
        LakeQuery(partitions=tuple(f"p{i}" for i in range(n + 1)))


def test_bad_times_are_refused_by_name(aws: AwsEnv, lake: LakeSettings) -> None:
    no_zone = query(aws, "--since", "2026-11-25T03:00:00")
    assert (
        no_zone.exit_code == 2 and "--since" in no_zone.output and "no time zone" in no_zone.output
    )
    garbage = query(aws, "--until", "yesterday")
    assert garbage.exit_code == 2 and "--until" in garbage.output
    backwards = query(aws, "--since", "2026-11-25T03:00:00Z", "--until", "2026-11-25T03:00:00Z")
    assert backwards.exit_code == 2 and "must be before until" in backwards.output


def test_no_table_yet_says_what_to_run(aws: AwsEnv) -> None:
    result = query(aws)
    assert result.exit_code != 0
    assert "no lake table" in result.output and "shardlog spark run compact" in result.output


@pytest.mark.usefixtures("glue_answers_at_once")
def test_an_unreachable_catalog_is_one_clear_line(aws: AwsEnv) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{probe.getsockname()[1]}"
    result = query(aws, "--endpoint-url", closed)
    assert result.exit_code != 0
    assert f"({closed}) unreachable" in result.output and "Traceback" not in result.output


def _iso(ms: int) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")
