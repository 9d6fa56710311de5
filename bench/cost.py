"""Cost benchmark: dollars per million records, from request counts measured here.

For each rate (records/s per shard) and record size it runs small workloads on the
embedded AWS (moto over HTTP) and meters every request they send (bench/cost_metering.py):
ingest, a worker, a Lambda consumer group, compaction and Safya's design
(bench/cost_scenarios.py); Firehose Direct PUT to S3 and Kinesis (provisioned, on-demand)
from their billing rules. The table and the chart: bench/cost_report.py.

Prices: bench/pricing.py (dated); rules: bench/costmodel.py. Lambda duration is the
handler's measured CPU time (scaled to the function's vCPU share) plus an allowance per AWS
request (--aws-request-ms). Kinesis GetRecords, DynamoDB Streams reads by Lambda triggers and
the local event sources' empty SQS polls are not billed per request and are not counted.
The last two lines are the shardlog share (ingest: Lambda + DynamoDB + S3) and the all-in
(plus a provisioned Kinesis shard) at 1,000 records/s per shard, 1 KiB records.

Then the latency/cost dial (bench/cost_dial.py): ingest metered at two batch sizes gives its
cost per batch and per record, and for each rate and batching window the table prints the
shardlog share against a target (default: Firehose's), the wait the window implies, and
what an enhanced fan-out consumer adds; and storage per million records per month kept, as
stored and compressed (--compression-ratio; default: the demo's JSON by zlib level 6).
--dial-only measures just what the dial and storage need (a few seconds).

Then compaction by volume beside the hourly schedule (bench/cost_volume.py): $ per million
records and the lake's worst lag at each rate (1 KiB records), for a threshold of
--volume-threshold records; --volume-only measures just that (compaction and the counter).
Usage: python bench/cost.py [--quick] [--dial-only] [--volume-only] [--chart PATH]
       [--json PATH] [--dial-json PATH] [--volume-json PATH] [--volume-threshold N]
       [--aws-request-ms MS] [--target DOLLARS] [--retention-months N] [--compression-ratio R]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import common  # noqa: F401  first: the repository importable, Powertools quiet

from bench import cost_dial as D
from bench import cost_scenarios as S
from bench import cost_volume as V
from bench import costmodel as M
from bench.cost_metering import Meter, metered
from bench.cost_report import Row, chart, per_1000, print_table
from bench.pricing import US_EAST_1, PriceTable
from shardlog.local.embedded import EmbeddedAWS

RATES = (10, 100, 1000)
SIZES = (1024, 10 * 1024)
# The two batch sizes the dial's cost line goes through (1 KiB records).
DIAL_BATCHES = (10, 1000)
DIAL_RECORD_BYTES = 1024


def measure(endpoint: str, shape: S.Shape, args: argparse.Namespace, meter: Meter,
            prices: PriceTable) -> Row:  # fmt: skip
    total = sum
    ms = args.aws_request_ms
    ingest_usage = S.ingest(endpoint, shape, meter, ms, batches=args.batches)
    worker_usage = S.worker(endpoint, shape, meter)
    lambda_usage = S.lambda_consumer(endpoint, shape, meter, ms)
    compaction_usage = S.compaction(endpoint, shape, meter, segments=args.segments)
    safya_usage = S.safya(endpoint, shape, meter, ms, records=args.safya_records)
    ingest_cost = M.cost_per_million(ingest_usage, prices)
    bytes_per_record = S.ingest_usage_bytes_per_record(endpoint, ingest_usage)
    return Row(
        rate=shape.rate,
        size=shape.size,
        batch=shape.batch,
        ingest={k: v for k, v in ingest_cost.items() if k in ("lambda", "dynamodb", "s3")},
        worker=total(M.cost_per_million(worker_usage, prices).values()),
        lambda_consumer=total(M.cost_per_million(lambda_usage, prices).values()),
        compaction=total(M.cost_per_million(compaction_usage, prices).values()),
        kinesis_provisioned=M.kinesis_provisioned_per_million(shape.rate, shape.size, prices),
        kinesis_on_demand=M.kinesis_on_demand_per_million(shape.rate, shape.size, prices),
        firehose=total(M.firehose_per_million(shape.rate, shape.size, prices).values()),
        safya_share=total(M.cost_per_million(safya_usage, prices).values()),
        storage_month=M.storage_per_million_month(bytes_per_record, prices),
        stored_bytes_per_record=bytes_per_record,
        requests_per_1000={
            "ingest": per_1000(ingest_usage),
            "worker": per_1000(worker_usage),
            "lambdaConsumer": per_1000(lambda_usage),
            "compaction": per_1000(compaction_usage),
            "safya": per_1000(safya_usage),
        },
    )


def ingest_line(endpoint: str, args: argparse.Namespace, meter: Meter,
                prices: PriceTable) -> tuple[D.IngestCostLine, float]:  # fmt: skip
    """Ingest's $ per batch and per record, from the handler metered at two batch sizes;
    and the bytes the log stored per record."""
    points = []
    stored = 0.0
    for batch in DIAL_BATCHES:
        shape = S.Shape(1, DIAL_RECORD_BYTES, 1, records_per_batch=batch)
        usage = S.ingest(endpoint, shape, meter, args.aws_request_ms, batches=args.batches)
        cost = M.cost_per_million(usage, prices)
        points.append((batch, cost["lambda"] + cost["dynamodb"] + cost["s3"]))
        stored = S.ingest_usage_bytes_per_record(endpoint, usage)
    return D.IngestCostLine.fit(points[0], points[1]), stored


def dial(endpoint: str, args: argparse.Namespace, meter: Meter, prices: PriceTable,
         rows: list[Row]) -> dict[str, object]:  # fmt: skip
    """Print the dial and storage tables; return them for --json."""
    line, stored = ingest_line(endpoint, args, meter, prices)
    firehose = sum(M.firehose_per_million(10, DIAL_RECORD_BYTES, prices).values())
    target = firehose if args.target is None else args.target
    name = f"Firehose ${firehose:.4f}" if args.target is None else f"${target:.4f}"
    dial_rows = D.dial_rows(line, RATES, DIAL_RECORD_BYTES, target, prices)
    D.print_dial(dial_rows, DIAL_RECORD_BYTES, name)
    ratio = args.compression_ratio
    source = "given"
    if ratio is None:
        ratio, source = D.demo_json_compression_ratio(), "the demo's JSON, zlib level 6"
    measured = {r.size: r.stored_bytes_per_record for r in rows} or {DIAL_RECORD_BYTES: stored}
    storage = [
        D.StorageRow(size, per_record, ratio, args.retention_months, prices)
        for size, per_record in sorted(measured.items())
    ]
    D.print_storage(storage, source)
    return {
        "ingestPerBatch": line.per_batch,
        "ingestPerRecord": line.per_record,
        "dial": [r.as_dict() for r in dial_rows],
        "storage": [r.as_dict() for r in storage],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer batches, shorter runs")
    parser.add_argument("--chart", type=Path, default=Path("build/bench/cost.png"))
    parser.add_argument("--json", type=Path, default=None, help="also write the rows here")
    parser.add_argument("--aws-request-ms", type=float, default=M.DEFAULT_AWS_REQUEST_MS)
    parser.add_argument("--dial-json", type=Path, default=None, help="the dial and storage here")
    parser.add_argument("--dial-only", action="store_true", help="only the dial and storage")
    parser.add_argument("--target", type=float, default=None, help="$/million (default: Firehose)")
    parser.add_argument("--retention-months", type=int, default=12)
    parser.add_argument("--compression-ratio", type=float, default=None, help="compressed/stored")
    parser.add_argument("--volume-only", action="store_true", help="only compaction by volume")
    parser.add_argument("--volume-threshold", type=int, default=V.DEFAULT_THRESHOLD)
    parser.add_argument("--volume-json", type=Path, default=None, help="the volume rows here")
    args = parser.parse_args(argv)
    args.batches = 3 if args.quick else 6
    args.segments = 3 if args.quick else 8
    args.safya_records = 50 if args.quick else 200
    seconds = 10 if args.quick else 30

    meter = Meter()
    undo = metered(meter)
    rows: list[Row] = []
    dialled: object = None
    volume: list[V.VolumeRow] = []
    try:
        with EmbeddedAWS() as aws:
            if args.volume_only:
                volume = volume_rows(aws.endpoint_url, args, meter, seconds, None)
                return write_json(args.volume_json, [r.as_dict() for r in volume])
            for rate in () if args.dial_only else RATES:
                for size in SIZES:
                    print(f"measuring {rate} records/s per shard, {size} B ...", file=sys.stderr,
                          flush=True)  # fmt: skip
                    rows.append(measure(aws.endpoint_url, S.Shape(rate, size, seconds), args, meter,
                                        US_EAST_1))  # fmt: skip
            if rows:
                report_rows(rows, args)
            print("measuring the dial: ingest at two batch sizes ...", file=sys.stderr, flush=True)
            dialled = dial(aws.endpoint_url, args, meter, US_EAST_1, rows)
            if rows:
                volume = volume_rows(aws.endpoint_url, args, meter, seconds, rows)
    finally:
        undo()
    write_json(args.json, [r.as_dict() for r in rows])
    write_json(args.dial_json, dialled)
    return write_json(args.volume_json, [r.as_dict() for r in volume])


def write_json(path: Path | None, payload: object) -> int:
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(payload, indent=2) + "\n")
    return 0


def volume_rows(endpoint: str, args: argparse.Namespace, meter: Meter, seconds: int,
                rows: list[Row] | None) -> list[V.VolumeRow]:  # fmt: skip
    """Compaction by volume at each rate, 1 KiB records: the hourly compaction as measured
    for the main table (or measured here), the trigger's counter metered."""
    hourly = {r.rate: r.compaction for r in rows or () if r.size == DIAL_RECORD_BYTES}
    out = []
    for rate in RATES:
        print(f"measuring compaction by volume at {rate} records/s ...", file=sys.stderr,
              flush=True)  # fmt: skip
        shape = S.Shape(rate, DIAL_RECORD_BYTES, seconds)
        if rate not in hourly:
            usage = S.compaction(endpoint, shape, meter, segments=args.segments)
            hourly[rate] = sum(M.cost_per_million(usage, US_EAST_1).values())
        counted = V.counter(endpoint, shape, meter, args.aws_request_ms, commits=args.segments * 3)
        out.append(V.volume_row(rate, args.volume_threshold, hourly[rate], counted, US_EAST_1))
    V.print_volume(out)
    return out


def report_rows(rows: list[Row], args: argparse.Namespace) -> None:
    print_table(rows)
    chart(rows, args.chart)
    print(f"chart: {args.chart}")
    headline = next(r for r in rows if r.rate == 1000 and r.size == 1024)
    print(f"shardlog share at 1000 records/s per shard, 1 KiB records: "
          f"${headline.ingest_share:.4f} per million")  # fmt: skip
    print(f"all-in at 1000 records/s per shard, 1 KiB records: ${headline.all_in:.4f} per million")


if __name__ == "__main__":
    raise SystemExit(main())
