"""The capacity model's arithmetic (scripts/capacity.py), by hand, at the edges of its quotas;
and docs/SCALE.md's table is the script's output."""

from __future__ import annotations

import json
import re

import pytest
from click.testing import CliRunner

from scripts import capacity as K
from tests.support import REPO_ROOT


def test_a_batch_is_what_the_window_gathers_within_the_size_and_payload() -> None:
    assert K.Workload(1, rate=10, window_s=60).records_per_batch == 600
    assert K.Workload(1, rate=10, window_s=60).commits_per_s == pytest.approx(1 / 60)
    assert K.Workload(1, rate=10, window_s=0).records_per_batch == 10  # a poll a second
    assert K.Workload(1, rate=1000, window_s=60).records_per_batch == 1000  # the batch size
    big = K.Workload(1, rate=1000, window_s=60, batch_size=10_000, record_bytes=10 * 1024)
    assert big.records_per_batch == 6 * 1024 * 1024 // (4 * 3414 + 400)  # Lambda's payload


def test_one_commit_costs_the_documented_budgets() -> None:
    """docs/ARCHITECTURE.md section 4: 4 requests a batch, 3 from a warm container; a Lambda
    group's wake: 4 reads, 3 lease writes, 2 listings and the segment, the invoke, a receive
    and a delete."""
    cold = K.requests_per_commit(K.Workload(1, lambda_groups=0, warm=False))
    warm = K.requests_per_commit(K.Workload(1, lambda_groups=0))
    assert sum(cold.values()) == 4 and sum(warm.values()) == 3
    assert "dynamodb:TransactGetItems" not in warm
    one_group = K.requests_per_commit(K.Workload(1, lambda_groups=1))
    two_groups = K.requests_per_commit(K.Workload(1, lambda_groups=2))
    wake = {k: two_groups[k] - one_group.get(k, 0) for k in two_groups}
    assert wake == {
        "dynamodb:GetItem": 4,
        "dynamodb:UpdateItem": 3,
        "s3:ListObjectsV2": 2,
        "s3:GetObject": 1,
        "lambda:Invoke": 1,
        "sqs:ReceiveMessage": 1,
        "sqs:DeleteMessageBatch": 1,
        "dynamodb:TransactWriteItems": 0,
        "s3:PutObject": 0,
    }


def test_two_shards_by_hand() -> None:
    """2 shards, 1,000 records/s each, 1 s window, one Lambda group, no workers."""
    demand = K.model(K.Workload(2, lambda_groups=1))
    r = demand.requests
    # ingest: 2 commits/s x (lease, segment, commit); runner: 2 wakes/s x 4 GetItem, 3 UpdateItem
    assert r["dynamodb:UpdateItem"] == 2 * 1 + 2 * 3
    assert r["dynamodb:TransactWriteItems"] == 2
    assert r["s3:PutObject"] == 2 and r["s3:GetObject"] == 2
    assert r["dynamodb:GetItem"] == 2 * 4 and r["s3:ListObjectsV2"] == 2 * 2
    # The waker: 2 commits/s from one stream shard polled 4 times a second: 2 invocations of
    # 1 wake each, one SendMessageBatch each.
    assert r["sqs:SendMessageBatch"] == 2
    assert r["dynamodb:Scan"] == pytest.approx(1 / 60)  # the sweep
    q = demand.quotas
    assert q["dynamodb.key.write"] == 3 * 2  # $ingest: lease + transaction, per commit
    assert q["s3.put"] == 2
    assert q["lambda.concurrency"] == 2 * 2 + 2 * 2 * 0.2 + 0.2  # ingest, runners+function, waker


@pytest.mark.parametrize(("shards", "hit"), [(300, False), (301, True)])
def test_a_standard_fifo_wake_queue_takes_300_wakes_a_second(shards: int, hit: bool) -> None:
    use = {
        u.quota.key: u.use for u in K.uses(K.Workload(shards, rate=100, high_throughput_fifo=False))
    }
    assert (use["sqs.fifo"] > 1.0) is hit
    assert use["sqs.fifo"] == pytest.approx(shards / 300)


def test_high_throughput_lifts_the_wake_queue_limit() -> None:
    before = K.uses(K.Workload(500, rate=100, high_throughput_fifo=False))
    after = K.uses(K.Workload(500, rate=100))
    assert before[0].quota.key == "sqs.fifo" and before[0].use > 1
    assert after[0].quota.key != "sqs.fifo" and "sqs.fifo" not in {u.quota.key for u in after}


@pytest.mark.parametrize(("shards", "hit"), [(333, False), (334, True)])
def test_the_ingest_lease_items_share_one_partition_key(shards: int, hit: bool) -> None:
    """3 WRU a commit to `$ingest`: a commit a second per shard passes 1,000 WRU/s at 334."""
    use = {u.quota.key: u.use for u in K.uses(K.Workload(shards, lambda_groups=0, rate=100))}
    assert (use["dynamodb.key.write"] > 1.0) is hit


def test_a_longer_window_lifts_the_hot_key() -> None:
    one_second = {u.quota.key: u.use for u in K.uses(K.Workload(1000, rate=100))}
    ten_seconds = {u.quota.key: u.use for u in K.uses(K.Workload(1000, rate=100, window_s=10))}
    assert one_second["dynamodb.key.write"] == pytest.approx(3.0)
    assert ten_seconds["dynamodb.key.write"] == pytest.approx(0.3)


def test_the_snapshot_summary_grows_with_every_partition_ever_created() -> None:
    budget = 100 * 1024 * 1024
    edge = budget // (K.SNAPSHOTS_KEPT * K.WATERMARK_BYTES)
    at = {u.quota.key: u for u in K.uses(K.Workload(100, partitions_ever=edge))}
    past = {u.quota.key: u for u in K.uses(K.Workload(100, partitions_ever=edge + 1))}
    assert at["iceberg.metadata"].use <= 1.0 < past["iceberg.metadata"].use


def test_fan_out_takes_ingest_off_the_shared_read_limit() -> None:
    shared = {u.quota.key: u.demand for u in K.uses(K.Workload(1, rate=1000))}
    fanned = {u.quota.key: u.demand for u in K.uses(K.Workload(1, rate=1000, fan_out=True))}
    assert shared["kinesis.read"] == 1000 * 1024 and fanned["kinesis.read"] == 0


def test_the_first_limit_is_the_most_used_quota() -> None:
    found = K.uses(K.Workload(10_000, rate=100))
    assert found[0] == K.first_limit(K.Workload(10_000, rate=100))
    assert [u.use for u in found] == sorted((u.use for u in found), reverse=True)
    assert found[0].use > 1


def test_the_command_prints_json_and_the_table() -> None:
    result = CliRunner().invoke(K.main, ["--shards", "64", "--json"])
    assert result.exit_code == 0, result.output
    (report,) = json.loads(result.output)
    assert report["workload"]["shards"] == 64
    assert report["firstLimit"]["quota"] in K.QUOTAS
    table = CliRunner().invoke(K.main, ["--table", "--rate", "100"])
    assert table.exit_code == 0 and table.output.count("\n") == 2 + len(K.TABLE_SHARDS)


def test_docs_scale_holds_the_tables_the_script_prints() -> None:
    """docs/SCALE.md's tables are generated: the command above each, run now, prints it."""
    text = (REPO_ROOT / "docs" / "SCALE.md").read_text()
    commands = re.findall(r"`python scripts/capacity\.py (--table[^`\n]*)`\n\n", text)
    assert len(commands) == 3, "docs/SCALE.md names the command above each of its tables"
    for command in commands:
        result = CliRunner().invoke(K.main, command.split())
        assert result.exit_code == 0, result.output
        assert f"`\n\n{result.output.strip()}\n" in text, command
