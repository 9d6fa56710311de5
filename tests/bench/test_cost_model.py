"""The cost model applies AWS's billing rules to measured usage: one row recomputed by hand."""

from __future__ import annotations

import math
import sys

import pytest

from bench import costmodel as M
from bench.pricing import GB, KB, PRICES_AS_OF, US_EAST_1
from tests.support import REPO_ROOT

P = US_EAST_1


def test_an_ingest_row_recomputed_by_hand_from_the_price_table() -> None:
    # What bench/cost.py measured for 3 ingest batches of 1,000 records (1 KiB each): per
    # batch one lease UpdateItem, one TransactGetItems of 2 items, one segment PutObject,
    # one TransactWriteItems of 2 items; every item well under 1 KB.
    tables = {"partitions": 310, "consumers": 240}
    calls = []
    for _ in range(3):
        calls += [
            M.DynamoCall("UpdateItem", "consumers"),
            M.DynamoCall("TransactGetItems", "partitions"),
            M.DynamoCall("TransactGetItems", "consumers"),
            M.DynamoCall("TransactWriteItems", "partitions"),
            M.DynamoCall("TransactWriteItems", "consumers"),
        ]
    wru, rru = M.dynamodb_units(calls, tables)
    assert (wru, rru) == (3 * (1 + 2 * 2), 3 * (2 * 2))  # transactions: 2 units per item
    usage = M.Usage(
        records=3000,
        requests={
            "dynamodb.UpdateItem": 3,
            "dynamodb.TransactGetItems": 3,
            "dynamodb.TransactWriteItems": 3,
            "s3.PutObject": 3,
        },
        dynamodb_wru=wru,
        dynamodb_rru=rru,
        lambda_invocations=3,
        lambda_gb_seconds=3 * 0.08,
    )

    cost = M.cost_per_million(usage, P)

    per_million_records = 1_000_000 / 3000
    assert cost["s3"] == pytest.approx(per_million_records * 3 * 0.005 / 1000)
    assert cost["dynamodb"] == pytest.approx(
        per_million_records * (15 * 0.625 + 12 * 0.125) / 1_000_000
    )
    assert cost["lambda"] == pytest.approx(
        per_million_records * (3 * 0.20 / 1_000_000 + 0.24 * 0.0000166667)
    )
    assert cost["sqs"] == cost["emr"] == 0
    # S3 $0.005 + DynamoDB $0.003625 + Lambda $0.001533 per million records
    assert sum(cost.values()) == pytest.approx(0.005 + 0.003625 + 0.001533, abs=1e-6)


def test_kinesis_provisioned_and_on_demand_by_hand() -> None:
    # 1,000 records/s on one shard: the shard-hour over 3.6 M records, one 25 KB unit each.
    assert M.kinesis_provisioned_per_million(1000, 1024, P) == pytest.approx(0.015 / 3.6 + 0.014)
    assert M.kinesis_provisioned_per_million(1000, 30 * KB, P) == pytest.approx(
        0.015 / 3.6 + 2 * 0.014
    )
    # On-demand: a 1,500-byte record is billed as 2 KB, in and out once.
    gb = 2 * KB * 1_000_000 / GB
    assert M.kinesis_on_demand_per_million(1000, 1500, P) == pytest.approx(
        gb * (0.08 + 0.04) + 0.04 / 3.6
    )


def test_firehose_rounds_each_record_up_to_5_kb() -> None:
    cost = M.firehose_per_million(1000, 1024, P)
    assert cost["firehose"] == pytest.approx(5 * KB * 1_000_000 / GB * 0.029)
    # 1 MB/s fills the 5 MiB buffer every 5.12 s: one PUT per 5,120 records.
    assert cost["s3"] == pytest.approx(1_000_000 / 5120 * 0.005 / 1000)


def test_dynamodb_units_follow_item_size_and_consistency() -> None:
    assert M.write_units(1024) == 1
    assert M.write_units(1025) == 2
    assert M.write_units(1025, transactional=True) == 4
    assert M.read_units(4096, consistent=True) == 1
    assert M.read_units(4097, consistent=False) == 1
    assert M.read_units(100, consistent=False) == 0.5
    assert M.read_units(100, consistent=True, transactional=True) == 2
    # A Scan reads the items' total size: 10 items of 1,000 bytes is 3 steps of 4 KB.
    assert M.dynamodb_units([M.DynamoCall("Scan", "t", 10)], {"t": 1000}) == (0, 1.5)


def test_item_size_counts_names_and_values() -> None:
    item = {"pk": {"S": "abc"}, "n": {"N": "12345"}, "l": {"L": [{"S": "x"}]}}
    # "pk" + "abc" = 5; "n" + (3 bytes for 5 digits + 1) = 5; "l" + 3 + (1 + 1) = 6
    assert M.item_size_bytes(item) == 5 + 5 + 6


def test_lambda_duration_scales_cpu_to_the_vcpu_share_and_adds_request_waits() -> None:
    # 50 ms of CPU at 1,024 MB runs 50 * 1769 / 1024 = 86.4 ms, plus 4 waits of 10 ms.
    expected_ms = math.ceil(50 * 1769 / 1024 + 40)
    assert M.lambda_gb_seconds(50, 4, 1024) == pytest.approx(expected_ms / 1000)
    assert M.lambda_gb_seconds(50, 4, 2048) == pytest.approx(math.ceil(50 + 40) / 1000 * 2)


def test_the_batch_a_window_gathers_is_capped_by_size_and_lambda_payload() -> None:
    assert M.lambda_batch_records(10, 1024, 1000, 1) == 10
    assert M.lambda_batch_records(5000, 1024, 1000, 1) == 1000
    per_record = 4 * math.ceil(10 * KB / 3) + M.KINESIS_EVENT_RECORD_OVERHEAD_BYTES
    assert M.lambda_batch_records(1000, 10 * KB, 1000, 1) == M.LAMBDA_PAYLOAD_BYTES // per_record


def test_the_model_is_pure() -> None:
    assert PRICES_AS_OF
    for module in ("bench.costmodel", "bench.pricing"):
        source = sys.modules[module].__file__
        assert source is not None
        with open(source) as f:
            text = f.read()
        assert "import boto3" not in text and "botocore" not in text


def test_the_library_ships_no_benchmark_code() -> None:
    """Prices and the cost model serve the benchmarks only: the package never imports them."""
    importers = [
        str(path.relative_to(REPO_ROOT))
        for path in sorted((REPO_ROOT / "shardlog").rglob("*.py"))
        if "from bench" in path.read_text() or "import bench" in path.read_text()
    ]
    assert importers == []
    assert not (REPO_ROOT / "shardlog" / "pricing.py").exists()
