"""`shardlog spark summary`'s rendering: the table and the PNG chart."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from shardlog.spark.summary import render_table, write_chart

SUMMARY: dict[str, Any] = {
    "records": 3,
    "bytes": 30,
    "keys": 2,
    "duplicateRows": 0,
    "partitions": [{"partitionId": "shardId-000000000000", "rows": 3, "distinctSeqs": 3,
                    "minSeq": 0, "maxSeq": 2}],
    "hourly": [{"date": "2024-03-01", "hour": 23, "records": 2, "bytes": 20},
               {"date": "2024-03-02", "hour": 0, "records": 1, "bytes": 10}],
    "topKeys": [{"rank": 1, "partitionKey": "a", "records": 2, "bytes": 20},
                {"rank": 2, "partitionKey": "b", "records": 1, "bytes": 10}],
    "ingestDelayMs": {"count": 3, "min": 50, "mean": 700.0, "p50": 500, "p90": 1500,
                      "p99": 1500, "max": 1500},
    "delayHistogram": [{"upperMs": 100, "records": 1}, {"upperMs": 1000, "records": 1},
                       {"upperMs": None, "records": 1}],
}  # fmt: skip


def test_table_shows_every_section() -> None:
    text = render_table(SUMMARY)
    assert "records 3" in text and "duplicate rows 0" in text
    assert "shardId-000000000000" in text
    assert "2024-03-02" in text
    assert "   1 a" in text
    assert "p99 1,500" in text
    assert "< 0.1s" in text and ">= 1s" in text


def test_chart_is_a_png(tmp_path: Path) -> None:
    path = write_chart(SUMMARY, tmp_path / "chart.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
