"""The cost benchmark's table, printed, and its chart.

A ``Row`` is one rate and record size: $ per million records for ingest (by service), the
consumers, compaction, Kinesis, Firehose and Safya's design, and the AWS requests per 1,000
records each workload sent.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import costmodel as M
from bench.pricing import PRICES_AS_OF, REGION


@dataclass
class Row:
    rate: int
    size: int
    batch: int
    ingest: dict[str, float]
    worker: float
    lambda_consumer: float
    compaction: float
    kinesis_provisioned: float
    kinesis_on_demand: float
    firehose: float
    safya_share: float
    storage_month: float
    requests_per_1000: dict[str, float] = field(default_factory=dict)
    stored_bytes_per_record: float = 0.0  # segments in S3, measured

    @property
    def ingest_share(self) -> float:
        return sum(self.ingest.values())

    @property
    def all_in(self) -> float:
        return self.ingest_share + self.kinesis_provisioned

    @property
    def safya_all_in(self) -> float:
        return self.safya_share + self.kinesis_provisioned

    def as_dict(self) -> dict[str, Any]:
        return {
            "ratePerShard": self.rate,
            "recordBytes": self.size,
            "recordsPerIngestBatch": self.batch,
            "ingest": {k: round(v, 6) for k, v in self.ingest.items()},
            "ingestShare": round(self.ingest_share, 6),
            "kinesisProvisioned": round(self.kinesis_provisioned, 6),
            "kinesisOnDemand": round(self.kinesis_on_demand, 6),
            "allIn": round(self.all_in, 6),
            "worker": round(self.worker, 6),
            "lambdaConsumer": round(self.lambda_consumer, 6),
            "compaction": round(self.compaction, 6),
            "firehose": round(self.firehose, 6),
            "safyaShare": round(self.safya_share, 6),
            "safyaAllIn": round(self.safya_share + self.kinesis_provisioned, 6),
            "storagePerMonth": round(self.storage_month, 6),
            "requestsPer1000Records": self.requests_per_1000,
        }


def per_1000(usage: M.Usage) -> float:
    billed = sum(n for k, n in usage.requests.items() if k.split(".")[0] in ("s3", "dynamodb"))
    return round(1000 * billed / usage.records, 2)


def print_table(rows: Sequence[Row]) -> None:
    print(f"$ per million records, {REGION} list prices of {PRICES_AS_OF} (bench/pricing.py)")
    print(
        f"{'rec/s/shard':>11} {'size':>6} {'batch':>5} | {'ingest':>8} {'+Kinesis':>9} | "
        f"{'worker':>8} {'Lambda c.':>9} {'compact':>8} | {'Firehose':>8} {'Safya':>8} "
        f"{'Safya+K':>8} | {'K on-dem':>8}"
    )
    for r in rows:
        print(
            f"{r.rate:>11} {r.size // 1024:>4}Ki {r.batch:>5} | {r.ingest_share:>8.4f} "
            f"{r.all_in:>9.4f} | {r.worker:>8.4f} {r.lambda_consumer:>9.4f} {r.compaction:>8.4f} "
            f"| {r.firehose:>8.4f} {r.safya_share:>8.4f} {r.safya_all_in:>8.4f}"
            f" | {r.kinesis_on_demand:>8.4f}"
        )
    print(
        "ingest = shardlog's share (ingest Lambda + DynamoDB + S3); +Kinesis = all-in with a "
        "provisioned shard;\nworker excludes its host; Lambda c. includes the group function's "
        "invoke requests, not its duration;\ncompaction = one hourly EMR Serverless run per "
        "shard (its minimum shared by more shards in practice);\nK on-dem = Kinesis on-demand "
        "instead of provisioned, for reference."
    )
    print("AWS requests (DynamoDB + S3) per 1,000 records, measured:")
    for r in rows:
        parts = ", ".join(f"{k} {v}" for k, v in r.requests_per_1000.items())
        print(f"  {r.rate:>5}/s {r.size // 1024:>2} KiB: {parts}")


def chart(rows: Sequence[Row], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [f"{r.rate}/s\n{r.size // 1024} KiB" for r in rows]
    series = {
        "shardlog ingest, all-in": [r.all_in for r in rows],
        "+ worker": [r.all_in + r.worker for r in rows],
        "+ Lambda consumer": [r.all_in + r.lambda_consumer for r in rows],
        "Firehose to S3": [r.firehose for r in rows],
        "Safya design, all-in": [r.safya_share + r.kinesis_provisioned for r in rows],
    }
    fig, ax = plt.subplots(figsize=(10, 5))
    width = 0.8 / len(series)
    for i, (name, values) in enumerate(series.items()):
        ax.bar([x + i * width for x in range(len(rows))], values, width, label=name)
    ax.set_xticks([x + 0.4 - width / 2 for x in range(len(rows))], labels)
    ax.set_yscale("log")
    ax.set_ylabel("$ per million records (log)")
    ax.set_title(f"Cost per million records by rate per shard and record size ({PRICES_AS_OF})")
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
