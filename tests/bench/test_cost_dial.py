"""The latency/cost dial and storage: the arithmetic bench/cost.py prints, checked by hand."""

from __future__ import annotations

import math

import pytest

from bench import cost_dial as D
from bench import costmodel as M
from bench.pricing import KB, US_EAST_1

P = US_EAST_1
# One ingest batch's fixed cost by the price table (tests/bench/test_cost_model.py's row):
# a PutObject, 5 WRU and 4 RRU, a Lambda request and 40 ms at 1 GB for 4 requests' waits.
PER_BATCH = 0.005 / 1000 + (5 * 0.625 + 4 * 0.125) / 1e6 + 0.20 / 1e6 + 0.04 * 0.0000166667
PER_RECORD = 0.02 / 1000 * 0.0000166667  # 20 us of CPU per record at 1 GB
LINE = D.IngestCostLine(PER_BATCH, PER_RECORD)
FIREHOSE_1K = sum(M.firehose_per_million(10, 1024, P).values())


def test_the_line_through_two_measurements_is_recovered() -> None:
    fitted = D.IngestCostLine.fit((10, LINE.per_million(10)), (1000, LINE.per_million(1000)))
    assert fitted.per_batch == pytest.approx(PER_BATCH)
    assert fitted.per_record == pytest.approx(PER_RECORD)
    assert fitted.per_million(600) == pytest.approx(1e6 * (PER_BATCH / 600 + PER_RECORD))
    with pytest.raises(ValueError, match="two different batch sizes"):
        D.IngestCostLine.fit((10, 1.0), (10, 2.0))


def test_a_batch_gathers_for_the_window_or_the_poll_whichever_is_longer() -> None:
    assert D.records_per_batch(10, 1024, 60) == 600
    assert D.records_per_batch(10, 1024, 0) == 10  # polled once a second
    assert D.records_per_batch(10, 1024, 0, fan_out=True) == 1  # pushed: ~70 ms
    assert D.records_per_batch(1000, 100, 60) == 10_000  # Lambda's largest batch size
    assert D.records_per_batch(1000, 1024, 60) == M.LAMBDA_PAYLOAD_BYTES // (4 * 342 + 400)
    per_record = 4 * math.ceil(10 * KB / 3) + M.KINESIS_EVENT_RECORD_OVERHEAD_BYTES
    assert D.records_per_batch(1000, 10 * KB, 60) == M.LAMBDA_PAYLOAD_BYTES // per_record
    assert D.gather_s(0) == D.POLL_S == 1.0
    assert D.gather_s(0, fan_out=True) == D.FAN_OUT_PUSH_S
    assert D.gather_s(60) == 60


def test_at_10_per_second_a_60_second_window_is_at_or_below_firehose() -> None:
    """The issue's case: 1 s windows cost several times Firehose at 10 records/s per shard,
    a 60 s window brings the share under it, and a record then waits up to a minute."""
    rows = D.dial_rows(LINE, [10, 100, 1000], 1024, FIREHOSE_1K, P)
    by = {(r.rate, r.window_s): r for r in rows}
    assert by[(10, 1)].share > 5 * FIREHOSE_1K
    assert by[(10, 60)].within and by[(10, 60)].latency_s == 60
    assert by[(10, 60)].batch == 600
    chosen = D.cheapest_windows(rows)
    row_10 = chosen[10]
    assert row_10 is not None and row_10.window_s <= 60
    # Each shorter window in the table misses the target: the choice is the shortest.
    assert all(not r.within for r in rows if r.rate == 10 and r.window_s < row_10.window_s)
    assert chosen[1000] is not None and chosen[1000].window_s <= 1


def test_no_window_is_named_when_none_reaches_the_target() -> None:
    rows = D.dial_rows(LINE, [10], 1024, 0.0001, P)
    assert D.cheapest_windows(rows) == {10: None}


def test_fan_out_adds_its_consumer_shard_hour_and_retrieval() -> None:
    (row, *_) = D.dial_rows(LINE, [10], 1024, FIREHOSE_1K, P)
    expected = (0.015 / (10 * 3600) + 1024 / 1024**3 * 0.013) * 1e6
    assert row.fan_out == pytest.approx(expected)


def test_storage_per_million_per_month_and_for_the_retention() -> None:
    row = D.StorageRow(1024, 1100.0, 0.25, 12, P)
    per_month = 1100 * 1e6 / 1024**3 * 0.023
    assert row.per_month == pytest.approx(per_month)
    assert row.per_month_compressed == pytest.approx(per_month / 4)
    as_dict = row.as_dict()
    assert as_dict["perMillionForRetention"] == pytest.approx(12 * per_month, abs=1e-6)


def test_the_demo_json_compresses_by_zlib() -> None:
    ratio = D.demo_json_compression_ratio(records=2000)
    assert 0.05 < ratio < 0.5
