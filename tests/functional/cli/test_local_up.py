"""Acceptance: plain boto3 (no shardlog code) produces into `shardlog local up` across a
split and a merge; every record appears in `shardlog read` exactly once, in per-key order,
from segments stored as the default setting says (zlib, where it pays); the console it
starts beside the API serves the same partitions."""

from __future__ import annotations

import base64
import json
from collections import defaultdict
from typing import Any

from shardlog import constants as C
from tests.support.cli import kinesis_for, segment_versions, shardlog_subprocess, wait_for
from tests.support.console import cells, http


def test_plain_boto3_across_split_and_merge(local_up: Any) -> None:
    state_file, state = local_up
    kinesis = kinesis_for(state)
    stream = state["streamName"]
    counters: dict[str, int] = defaultdict(int)

    def put_batch(count: int) -> None:
        entries = []
        for i in range(count):
            key = f"key-{(len(entries) * 7 + i) % 40}"
            entries.append(
                {"PartitionKey": key, "Data": json.dumps({"k": key, "n": counters[key]}).encode()}
            )
            counters[key] += 1
        for start in range(0, len(entries), 40):  # at most one record per key per call
            chunk = entries[start : start + 40]
            assert kinesis.put_records(StreamName=stream, Records=chunk)["FailedRecordCount"] == 0

    put_batch(200)
    shards = kinesis.list_shards(StreamName=stream)["Shards"]
    first = shards[0]
    low, high = (int(first["HashKeyRange"][k]) for k in ("StartingHashKey", "EndingHashKey"))
    kinesis.split_shard(
        StreamName=stream, ShardToSplit=first["ShardId"], NewStartingHashKey=str((low + high) // 2)
    )
    put_batch(200)
    kinesis.merge_shards(
        StreamName=stream,
        ShardToMerge=shards[1]["ShardId"],
        AdjacentShardToMerge=shards[2]["ShardId"],
    )
    put_batch(200)
    total = sum(counters.values())

    def committed() -> bool:
        rows = json.loads(shardlog_subprocess(state_file, "status", "--json"))
        return sum(r["nextSeq"] for r in rows) >= total

    wait_for(committed, "ingest to catch up")
    shardlog_subprocess(state_file, "sync")
    rows = json.loads(shardlog_subprocess(state_file, "status", "--json"))
    assert len(rows) == 6
    ids = {r["partitionId"]: r for r in rows}
    # The console of this runtime: its URL in the state file, every partition on its page.
    wait_for(lambda: "consoleUrl" in json.loads(state_file.read_text()), "the console's URL")
    url = json.loads(state_file.read_text())["consoleUrl"]
    assert url.startswith("http://127.0.0.1:")
    status, page = http(url + "/")
    assert status == 200 and "read-only" in page
    assert sorted(cells(page).tables["partitions"]) == sorted(ids)
    ordered: list[str] = []
    while len(ordered) < len(ids):  # parents before children
        ordered += [
            pid
            for pid, row in sorted(ids.items())
            if pid not in ordered and all(p in ordered for p in row["parents"])
        ]
    seen: dict[str, list[int]] = defaultdict(list)
    for pid in ordered:
        lines = shardlog_subprocess(state_file, "read", "--partition", pid).splitlines()
        assert [json.loads(line)["seq"] for line in lines] == list(range(ids[pid]["nextSeq"]))
        for line in lines:
            body = json.loads(base64.b64decode(json.loads(line)["data"]))
            seen[body["k"]].append(body["n"])
    assert {k: v for k, v in seen.items()} == {k: list(range(n)) for k, n in counters.items()}
    # The default codec: zlib where it saves a tenth, else the segment as it is.
    assert C.DEFAULT_SEGMENT_COMPRESSION == "zlib"
    versions = segment_versions(state)
    assert 3 in versions and versions <= {1, 3}
