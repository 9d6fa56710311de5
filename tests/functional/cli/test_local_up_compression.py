"""`shardlog local up --segment-compression`: the setting reaches the local ingest (what S3
holds says so), and a value the deployed stack would refuse is refused the same way."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from shardlog.cli.main import cli
from tests.support.cli import (
    kinesis_for,
    local_up_process,
    segment_versions,
    shardlog_subprocess,
    wait_for,
)


def test_local_up_stores_segments_as_the_setting_says(tmp_path: Path) -> None:
    """The codec that is not the default (zlib: what S3 holds under it is checked by
    test_local_up.py's run): every segment as it is, version 1."""
    state_file = tmp_path / "local.json"
    args = ("--shards", "1", "--segment-compression", "none")
    with local_up_process(state_file, *args) as state:
        records = [
            {"PartitionKey": f"key-{n % 7}", "Data": json.dumps({"k": n % 7, "n": n}).encode()}
            for n in range(300)
        ]
        kinesis_for(state).put_records(StreamName=state["streamName"], Records=records)

        def committed() -> bool:
            rows = json.loads(shardlog_subprocess(state_file, "status", "--json"))
            return sum(r["nextSeq"] for r in rows) >= len(records)

        wait_for(committed, "ingest to commit the records")
        assert segment_versions(state) == {1}
        lines = shardlog_subprocess(state_file, "read", "--partition", "shardId-000000000000")
        assert len(lines.splitlines()) == len(records)


def test_a_codec_the_stack_would_refuse_is_refused_before_anything_starts() -> None:
    result = CliRunner().invoke(
        cli, ["--state-file", "/nonexistent/local.json", "local", "up", "--segment-compression",
              "zstd"],
    )  # fmt: skip
    assert result.exit_code == 2
    assert "Invalid value for '--segment-compression': Input should be 'zlib' or 'none'" in (
        result.output
    )
