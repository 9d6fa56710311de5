"""`shardlog local up --segment-compression`: the setting reaches the local ingest (what S3
holds says so), and a value the deployed stack would refuse is refused the same way."""

from __future__ import annotations

import json
from pathlib import Path

import boto3
import pytest
from click.testing import CliRunner

from shardlog.cli.main import cli
from tests.support.cli import kinesis_for, local_up_process, shardlog_subprocess, wait_for


@pytest.mark.parametrize(("compression", "version"), [("none", 1), ("zlib", 3)])
def test_local_up_stores_segments_as_the_setting_says(
    tmp_path: Path, compression: str, version: int
) -> None:
    state_file = tmp_path / "local.json"
    args = ("--shards", "1", "--segment-compression", compression)
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
        s3 = boto3.client(
            "s3",
            endpoint_url=state["endpointUrl"],
            region_name=state["region"],
            aws_access_key_id="anything",
            aws_secret_access_key="anything",
        )
        listed = s3.list_objects_v2(Bucket=state["bucket"], Prefix="events/")["Contents"]
        versions = {
            s3.get_object(Bucket=state["bucket"], Key=o["Key"])["Body"].read()[4] for o in listed
        }
        assert version in versions and versions <= {1, version}
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
