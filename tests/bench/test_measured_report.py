"""`make measured` (bench/report.py) rewrites the generated block of docs/PERFORMANCE.md and
nothing else: README.md and the page's hand-written text stay byte for byte."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from bench import report
from tests.support import DOCS, REPO_ROOT


def results() -> dict[str, Any]:
    """What the benchmarks measured, in the shape report.json keeps (figures made up)."""
    ingest_row = {
        "recordsPerSecond": 70_000.0,
        "requestsPer1000Records": 3.02,
        "cpuMsPer1000Records": 13.0,
        "requestCpuMsPer1000Records": 11.5,
        "requestCpuMsPer1000RecordsByOperation": {"TransactWriteItems": 4.8, "UpdateItem": 3.8},
        "requestCpuBoundVsBaseline": 388.0,
    }
    baseline = dict(ingest_row, recordsPerSecond=200.0, requestsPer1000Records=2000.0)
    latency = {"p50": 500.0, "p95": 1000.0, "p99": 1100.0, "max": 1200.0}
    phase = {"plan": 0.1, "write": 1.0}
    compact_path = {
        "records": 200_000,
        "seconds": 1.3,
        "recordsPerSecond": 155_000.0,
        "files": 4,
        "bytes": 2**21,
        "phaseSeconds": phase,
    }
    cost_row = {
        "ratePerShard": 1000,
        "recordBytes": 1024,
        "ingestShare": 0.0091,
        "allIn": 0.0273,
        "worker": 0.0098,
        "lambdaConsumer": 0.025,
        "compaction": 0.0051,
        "firehose": 0.1393,
        "safyaAllIn": 5.9968,
    }
    return {
        "full": False,
        "started": "2026-11-26 11:00",
        "host": "2 cores, 8 GiB RAM, Python 3.11.2 on Linux x86_64; load average 0.1 when started",
        "getItemCpuMs": 1.84,
        "ingest": [
            dict(ingest_row, path="shardlog (segments)"),
            dict(ingest_row, path="shardlog via Lambda handler", recordsPerSecond=64_400.0),
            dict(baseline, path="baseline (Safya: increment + PutObject per record)"),
        ],
        "latency": [
            {
                "rate": 1000,
                "windowMs": 1000,
                "paths": {"produce-to-committed": latency},
                "ingestRequestsPer1000Records": 11.11,
                "achievedRate": 1000.0,
            }
        ],
        "compactArgs": ["--records", "200000"],
        "compaction": {
            "paths": [
                dict(compact_path, path="spark_jobs/compact.py on local[2] -> Iceberg"),
                dict(compact_path, path="baseline: one process, pyarrow"),
            ],
            "sparkVsBaseline": 1.0,
            "tableCommitSeconds": 0.1,
            "tableFreshnessSecondsAfterRun": 10.0,
            "freshQuery": {
                "query": "--partition-key key-7",
                "plainSeconds": 0.07,
                "freshSeconds": 0.3,
                "uncompactedRecords": 20_000,
                "freshOverPlain": 4.3,
            },
        },
        "cost": [cost_row],
        "costHeadline": ["shardlog share ...: $0.0091 per million", "all-in ...: $0.0273"],
    }


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A copy of the repository's documents, as `make measured` finds them."""
    shutil.copy(REPO_ROOT / "README.md", tmp_path / "README.md")
    shutil.copytree(DOCS, tmp_path / "docs")
    return tmp_path


def outside_the_block(text: str) -> tuple[str, str]:
    head, rest = text.split(report.BEGIN, 1)
    return head, rest.split(report.END, 1)[1]


def test_the_report_rewrites_the_performance_block_and_leaves_the_readme_untouched(
    repo: Path, tmp_path: Path
) -> None:
    readme = (repo / "README.md").read_bytes()
    page = repo / "docs" / "PERFORMANCE.md"
    before = page.read_text()
    kept = tmp_path / "report.json"
    kept.write_text(json.dumps(results()))

    assert report.main(["--root", str(repo), "--from-results", str(kept)]) == 0

    assert (repo / "README.md").read_bytes() == readme
    after = page.read_text()
    assert outside_the_block(after) == outside_the_block(before)
    generated = report.render(results())
    assert generated in after and generated not in before
    assert "on 2026-11-26 11:00 UTC" in after
    assert "| shardlog (segments) | 70,000 | 3.02 |" in after
    assert "| 1,000 | 1 KiB | $0.0091 | $0.0273 |" in after
    # every other document is as it was
    for document in DOCS.glob("*.md"):
        if document.name != "PERFORMANCE.md":
            assert (repo / "docs" / document.name).read_bytes() == document.read_bytes()


def test_a_dry_run_prints_the_block_and_writes_nothing(
    repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    page = repo / "docs" / "PERFORMANCE.md"
    before = page.read_bytes()
    kept = tmp_path / "report.json"
    kept.write_text(json.dumps(results()))

    report.main(["--root", str(repo), "--from-results", str(kept), "--dry-run"])

    assert page.read_bytes() == before
    assert capsys.readouterr().out.strip() == report.render(results())


def test_a_page_without_the_block_is_refused_unchanged(repo: Path) -> None:
    page = repo / "docs" / "PERFORMANCE.md"
    page.write_text("# Performance\n\nno generated block here\n")

    with pytest.raises(SystemExit, match=r"PERFORMANCE\.md has no <!-- measured:begin -->"):
        report.rewrite(page, report.render(results()))

    assert page.read_text() == "# Performance\n\nno generated block here\n"
