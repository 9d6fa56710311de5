"""The analytics summary (``analytics/summary.json``) as text and as a PNG chart."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from botocore.exceptions import ClientError

from shardlog.aws import Clients
from shardlog.exceptions import ShardlogError, aws_error_code
from shardlog.spark.jobs import SUMMARY_KEY


def load_summary(clients: Clients, bucket: str) -> dict[str, Any]:
    try:
        body = clients.s3.get_object(Bucket=bucket, Key=SUMMARY_KEY)["Body"].read()
    except ClientError as exc:
        if aws_error_code(exc) in ("NoSuchKey", "404"):
            raise ShardlogError(
                f"no s3://{bucket}/{SUMMARY_KEY} yet: run `shardlog spark run analytics --wait`"
            ) from exc
        raise
    return dict(json.loads(body))


def _bucket_label(upper_ms: int | None, previous: int | None) -> str:
    def human(ms: int) -> str:
        return f"{ms // 60_000}min" if ms >= 60_000 else f"{ms / 1000:g}s"

    if upper_ms is None:
        return f">= {human(previous)}" if previous else "all"
    return f"< {human(upper_ms)}"


def render_table(summary: dict[str, Any]) -> str:
    """The summary as aligned plain-text tables."""
    delay = summary.get("ingestDelayMs", {})
    lines = [
        f"records {summary['records']:,}   bytes {summary['bytes']:,}   keys {summary['keys']:,}"
        f"   duplicate rows {summary['duplicateRows']}",
        "",
        f"{'partition':<24} {'rows':>10} {'min seq':>10} {'max seq':>10}",
    ]
    lines += [
        f"{p['partitionId']:<24} {p['rows']:>10,} {p['minSeq']:>10} {p['maxSeq']:>10}"
        for p in summary.get("partitions", [])
    ]
    lines += ["", f"{'date':<12} {'hour':>4} {'records':>10} {'bytes':>12}"]
    lines += [
        f"{h['date']:<12} {h['hour']:>4} {h['records']:>10,} {h['bytes']:>12,}"
        for h in summary.get("hourly", [])
    ]
    lines += ["", f"{'rank':>4} {'partition key':<32} {'records':>10} {'bytes':>12}"]
    lines += [
        f"{k['rank']:>4} {k['partitionKey'][:32]:<32} {k['records']:>10,} {k['bytes']:>12,}"
        for k in summary.get("topKeys", [])
    ]
    if delay.get("count"):
        lines += [
            "",
            "ingest delay (commit - arrival), ms: "
            + "  ".join(
                f"{name} {delay[name]:,.0f}" for name in ("min", "p50", "p90", "p99", "max")
            ),
        ]
        previous = None
        for bucket in summary.get("delayHistogram", []):
            label = _bucket_label(bucket["upperMs"], previous)
            lines.append(f"  {label:>10} {bucket['records']:>10,}")
            previous = bucket["upperMs"]
    return "\n".join(lines)


def write_chart(summary: dict[str, Any], path: str | Path) -> Path:
    """Records per hour and the ingest-delay histogram, side by side, as a PNG."""
    try:
        import matplotlib

        matplotlib.use("Agg")  # files only, no display
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise ShardlogError("the PNG needs matplotlib: pip install 'shardlog[spark]'") from exc
    hourly = summary.get("hourly", [])
    histogram = summary.get("delayHistogram", [])
    figure, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    left.bar([f"{h['date'][5:]} {h['hour']:02d}h" for h in hourly], [h["records"] for h in hourly])
    left.set_title("records per hour (UTC, arrival)")
    left.tick_params(axis="x", labelrotation=45)
    labels, previous = [], None
    for bucket in histogram:
        labels.append(_bucket_label(bucket["upperMs"], previous))
        previous = bucket["upperMs"]
    right.bar(labels, [b["records"] for b in histogram], color="tab:orange")
    right.set_title("ingest delay (commit - arrival)")
    figure.suptitle(f"shardlog: {summary['records']:,} records, {summary['keys']:,} keys")
    figure.tight_layout()
    target = Path(path)
    figure.savefig(target, format="png", dpi=100)
    plt.close(figure)
    return target
