"""The latency/cost dial of ingest, and what the log's storage costs per month it is kept.

**The dial.** Ingest pays per batch (the Lambda request, the write path's requests: 4 per
batch, 3 from a warm container, whatever the batch size, docs/ARCHITECTURE.md section 4; the
invocation's fixed time) and per record (the handler's CPU time per record). So in dollars
per million records, with ``b`` records per batch::

    share(b) = per_batch * 1e6 / b + per_record * 1e6

``IngestCostLine.fit`` takes the line through two measured batch sizes (bench/cost.py meters
the ingest handler at both on the embedded AWS); the rest is arithmetic on that line.

Records per batch at a steady ``r`` records/s per shard: Lambda gathers for the batching
window ``w`` but reads a shard at most once per poll (about a second with GetRecords; records
are pushed within about 70 ms through an enhanced fan-out consumer), so
``b = r * max(w, poll)``, capped by the batch size and Lambda's 6 MB payload
(``costmodel.lambda_batch_records``). A record then waits at most ``max(w, poll)`` before
its invocation: the latency the window costs.

**Storage.** S3 Standard per GB-month, of what the log stores per record (segments as
measured), as is and compressed by a ratio. Until segments are compressed by the log itself
the ratio is measured here: the demo's JSON records in one segment, by zlib at level 6.

Pure and stdlib-only but for the segment encoder; nothing here calls AWS.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

from bench import costmodel as M
from bench.pricing import PriceTable
from shardlog import settings as S

# Seconds between a shard's records and the invocation that carries them, without a window:
# Lambda polls each shard about once a second with GetRecords; an enhanced fan-out consumer
# gets records pushed, about 70 ms after the put (the Kinesis developer guide's figure).
POLL_S = 1.0
FAN_OUT_PUSH_S = 0.07
# The windows the table tries, in seconds: whole seconds, as the mapping takes them.
WINDOWS_S = (0, 1, 2, 5, 10, 20, 30, 60, 120, 300)
# The dial may raise the batch size to Lambda's largest so the window, not the size, decides.
DIAL_BATCH_SIZE = S.INGEST_BATCH_SIZE_MAX
ZLIB_LEVEL = 6
MONTH_S = 30 * 24 * 3600


@dataclass(frozen=True)
class IngestCostLine:
    """Ingest's $ per batch and $ per record: the shardlog share is their sum per record."""

    per_batch: float
    per_record: float

    @classmethod
    def fit(cls, small: tuple[int, float], large: tuple[int, float]) -> IngestCostLine:
        """The line through two measurements, each (records per batch, $ per million)."""
        (b1, c1), (b2, c2) = small, large
        if b1 == b2:
            raise ValueError(f"two different batch sizes are needed to fit, got {b1} twice")
        per_batch = (c1 - c2) / (1 / b1 - 1 / b2) / M.MILLION
        per_record = c1 / M.MILLION - per_batch / b1
        return cls(per_batch, per_record)

    def per_million(self, batch_records: int) -> float:
        return (self.per_batch / batch_records + self.per_record) * M.MILLION


def gather_s(window_s: float, fan_out: bool = False) -> float:
    """How long a record may wait for its invocation: the window, or the poll if longer."""
    return max(window_s, FAN_OUT_PUSH_S if fan_out else POLL_S)


def records_per_batch(
    rate: float,
    record_bytes: int,
    window_s: float,
    *,
    fan_out: bool = False,
    batch_size: int = DIAL_BATCH_SIZE,
) -> int:
    return M.lambda_batch_records(rate, record_bytes, batch_size, gather_s(window_s, fan_out))


@dataclass(frozen=True)
class DialRow:
    rate: int  # records/s per shard
    window_s: int
    batch: int  # records per invocation
    share: float  # $ per million: ingest Lambda + DynamoDB + S3
    target: float  # $ per million the share is held to (default: Firehose's)
    latency_s: float  # the most a record waits before its invocation
    fan_out: float  # $ per million an enhanced fan-out consumer adds (and latency ~0.07 s)

    @property
    def within(self) -> bool:
        return self.share <= self.target

    def as_dict(self) -> dict[str, float | int | bool]:
        return {
            "ratePerShard": self.rate,
            "windowSeconds": self.window_s,
            "recordsPerBatch": self.batch,
            "shardlogShare": round(self.share, 6),
            "target": round(self.target, 6),
            "withinTarget": self.within,
            "maxWaitSeconds": self.latency_s,
            "fanOutAdds": round(self.fan_out, 6),
        }


def dial_rows(
    line: IngestCostLine,
    rates: Sequence[int],
    record_bytes: int,
    target: float,
    prices: PriceTable,
    windows: Sequence[int] = WINDOWS_S,
) -> list[DialRow]:
    """Every (rate, window): the share, against the target, and the wait it implies."""
    rows = []
    for rate in rates:
        fan_out = M.kinesis_fan_out_per_million(rate, record_bytes, prices)
        for window in windows:
            batch = records_per_batch(rate, record_bytes, window)
            rows.append(
                DialRow(
                    rate, window, batch, line.per_million(batch), target, gather_s(window), fan_out
                )
            )
    return rows


def cheapest_windows(rows: Sequence[DialRow]) -> dict[int, DialRow | None]:
    """Per rate, the shortest window whose share is within the target (None: no window is)."""
    chosen: dict[int, DialRow | None] = {}
    for row in sorted(rows, key=lambda r: (r.rate, r.window_s)):
        if row.rate not in chosen:
            chosen[row.rate] = None
        if chosen[row.rate] is None and row.within:
            chosen[row.rate] = row
    return chosen


def print_dial(rows: Sequence[DialRow], record_bytes: int, target_name: str) -> None:
    print(
        f"\nThe dial: $ per million records of {record_bytes // 1024} KiB, shardlog share "
        f"(ingest) by batching window, against {target_name}"
    )
    print(
        f"{'rec/s/shard':>11} {'window':>7} {'batch':>6} {'share':>8} {'target':>8} "
        f"{'ok':>3} {'max wait':>9} | {'fan-out +':>9}"
    )
    for r in rows:
        print(
            f"{r.rate:>11} {r.window_s:>6}s {r.batch:>6} {r.share:>8.4f} {r.target:>8.4f} "
            f"{'yes' if r.within else 'no':>3} {r.latency_s:>8.2f}s | {r.fan_out:>9.4f}"
        )
    print(
        "Per rate, the shortest window within the target (shardlog:ingestBatchingWindowMs; "
        f"batch size up to {DIAL_BATCH_SIZE}, shardlog:ingestBatchSize):"
    )
    for rate, row in cheapest_windows(rows).items():
        if row is None:
            print(f"  {rate:>5}/s: no window up to {WINDOWS_S[-1]} s reaches the target")
        else:
            print(
                f"  {rate:>5}/s: {row.window_s} s ({row.window_s * 1000} ms), "
                f"${row.share:.4f} per million, records wait up to {row.latency_s:.2f} s"
            )


# --- storage --------------------------------------------------------------------------------
def demo_json_compression_ratio(records: int = 10_000, level: int = ZLIB_LEVEL) -> float:
    """Compressed / stored bytes of one segment of the demo's JSON records (zlib)."""
    from shardlog.format import IncomingRecord, encode_segment
    from shardlog.local.demo import demo_records

    incoming = [
        IncomingRecord(r.partition_key, r.data, str(10**20 + i), 1_700_000_000_000 + i)
        for i, r in enumerate(demo_records(records, keys=100))
    ]
    raw = encode_segment("shardId-000000000000", 0, incoming, 1_700_000_000_000)
    return len(zlib.compress(raw, level)) / len(raw)


@dataclass(frozen=True)
class StorageRow:
    record_bytes: int
    stored_bytes_per_record: float  # segments in S3, measured
    ratio: float  # compressed / stored
    months: int
    prices: PriceTable

    @property
    def per_month(self) -> float:
        """$ per million records for each month they are kept, as stored."""
        return M.storage_per_million_month(self.stored_bytes_per_record, self.prices)

    @property
    def per_month_compressed(self) -> float:
        return self.per_month * self.ratio

    def as_dict(self) -> dict[str, float | int]:
        return {
            "recordBytes": self.record_bytes,
            "storedBytesPerRecord": round(self.stored_bytes_per_record, 1),
            "compressionRatio": round(self.ratio, 4),
            "perMillionPerMonth": round(self.per_month, 6),
            "perMillionPerMonthCompressed": round(self.per_month_compressed, 6),
            "retentionMonths": self.months,
            "perMillionForRetention": round(self.per_month * self.months, 6),
            "perMillionForRetentionCompressed": round(self.per_month_compressed * self.months, 6),
        }


def shard_month_records(rate: float) -> float:
    """Records one shard receives in a month at ``rate`` records/s."""
    return rate * MONTH_S


def print_storage(rows: Sequence[StorageRow], ratio_source: str) -> None:
    if not rows:
        return
    months = rows[0].months
    print(
        f"\nStorage (S3 Standard): $ per million records per month kept, and for {months} "
        f"months; compressed at {rows[0].ratio:.3f} ({ratio_source})"
    )
    print(
        f"{'size':>6} {'B/record':>9} | {'per month':>9} {'compressed':>10} | "
        f"{f'{months} months':>10} {'compressed':>10}"
    )
    for r in rows:
        print(
            f"{r.record_bytes // 1024:>4}Ki {r.stored_bytes_per_record:>9.0f} | "
            f"{r.per_month:>9.4f} {r.per_month_compressed:>10.4f} | "
            f"{r.per_month * months:>10.4f} {r.per_month_compressed * months:>10.4f}"
        )
    gb = shard_month_records(1000) * rows[0].stored_bytes_per_record / 1024**3
    print(
        f"  one shard at 1,000 records/s of {rows[0].record_bytes // 1024} KiB stores "
        f"{gb:,.0f} GB a month ({math.ceil(gb / 1024)} TB), {gb * rows[0].ratio:,.0f} GB "
        "compressed; every month kept adds as much again"
    )
