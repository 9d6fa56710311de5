"""Compressed segments: what they save and what they cost (docs/FORMAT.md, section 10).

Three measurements, one run:

1. **Ratio and speed per codec** (no AWS): segments of the demo's JSON records
   (``shardlog demo``'s data, with Kinesis-like 56-digit sequence numbers) and of random
   bytes, each compressed by zlib at levels 1, 6 and 9 and, where the ``zstandard`` wheel is
   importable (the dev environment has it through pyiceberg; Lambda's runtime does not),
   zstd at levels 1 and 3: stored bytes per raw byte, compress and decompress MB/s of the
   raw segment, and ``decode_segment`` MB/s of the whole object as a reader pays it.
2. **Ingest records/s with and without compression** (embedded AWS, in this process):
   ``LogWriter.append`` of the same batches with ``segmentCompression`` zlib and none,
   timed interleaved (bench/ingest.py's ``timed``), on JSON and on random bytes; with the
   requests per 1,000 records (compression must not change them) and the bytes stored.
3. **What zstd would cost Lambda**: the installed size of the ``zstandard`` package and its
   import time in a fresh interpreter (a cold start pays it).

Usage: python bench/codec.py [--records N] [--batch-size N] [--json]
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import json
import random
import subprocess
import sys
import time
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import common  # first: makes the repository importable
import ingest

from shardlog.config import ShardlogConfig
from shardlog.format import (
    COMPRESSIONS,
    Compression,
    IncomingRecord,
    decode_segment,
    encode_segment,
)
from shardlog.local.demo import demo_records
from shardlog.local.embedded import EmbeddedAWS, provision
from shardlog.local.kinesis_fidelity import SEQUENCE_BASE
from shardlog.segments import partition_prefix
from shardlog.shardsync import ShardSync
from shardlog.writer import LogWriter, WriterSettings

PARTITION = "shardId-000000000000"
ZSTD_LEVELS = (1, 3)
ZLIB_LEVELS = (1, 6, 9)
MIN_SECONDS = 0.3  # each speed is timed over at least this long


def json_sample(count: int) -> list[IncomingRecord]:
    """The demo's records (shardlog/local/demo.py) as Kinesis would hand them to ingest."""
    return [
        IncomingRecord(r.partition_key, r.data, str(SEQUENCE_BASE + 3 * i), 1_700_000_000_000 + i)
        for i, r in enumerate(demo_records(count, keys=1_000))
    ]


def random_sample(count: int, size: int = 1024) -> list[IncomingRecord]:
    rng = random.Random(27)
    return [
        IncomingRecord(f"key-{i % 1000:05d}", rng.randbytes(size), str(SEQUENCE_BASE + 3 * i),
                       1_700_000_000_000 + i)
        for i in range(count)
    ]  # fmt: skip


def mb_per_s(work: Callable[[], object], size: int) -> float:
    """``size`` bytes handled per call of ``work``, in MB/s (10^6), over >= MIN_SECONDS."""
    calls, start = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - start) < MIN_SECONDS or calls < 3:
        work()
        calls += 1
    return size * calls / elapsed / 1e6


def codecs() -> dict[str, tuple[Callable[[bytes], bytes], Callable[[bytes], bytes]]]:
    """name -> (compress, decompress) of every codec measured."""
    found: dict[str, tuple[Callable[[bytes], bytes], Callable[[bytes], bytes]]] = {
        f"zlib-{level}": (functools.partial(zlib.compress, level=level), zlib.decompress)
        for level in ZLIB_LEVELS
    }
    if importlib.util.find_spec("zstandard") is not None:
        import zstandard

        for level in ZSTD_LEVELS:
            compressor = zstandard.ZstdCompressor(level=level)
            found[f"zstd-{level}"] = (compressor.compress, zstandard.ZstdDecompressor().decompress)
    return found


def codec_rows(name: str, records: list[IncomingRecord]) -> list[dict[str, Any]]:
    """Each codec on the records section of one segment of ``records``."""
    plain = encode_segment(PARTITION, 0, records, 0)
    header = 28 + len(PARTITION)
    section = plain[header:-4]
    rows: list[dict[str, Any]] = [
        {
            "sample": name,
            "codec": "none",
            "segmentBytes": len(plain),
            "ratio": 1.0,
            "decodeMBps": round(mb_per_s(functools.partial(decode_segment, plain), len(plain)), 1),
        }
    ]
    for codec, (compress, decompress) in codecs().items():
        packed = compress(section)
        assert decompress(packed) == section
        rows.append(
            {
                "sample": name,
                "codec": codec,
                "segmentBytes": len(plain),
                "ratio": round((header + 6 + len(packed) + 4) / len(plain), 4),
                "compressMBps": round(
                    mb_per_s(functools.partial(compress, section), len(section)), 1
                ),
                "decompressMBps": round(
                    mb_per_s(functools.partial(decompress, packed), len(section)), 1
                ),
            }
        )
    stored = encode_segment(PARTITION, 0, records, 0, compression="zlib")
    rows.append(
        {
            "sample": name,
            "codec": "as the writer stores it (zlib-6 when it pays)",
            "segmentBytes": len(plain),
            "ratio": round(len(stored) / len(plain), 4),
            "decodeMBps": round(mb_per_s(functools.partial(decode_segment, stored), len(plain)), 1),
        }
    )
    return rows


def writer_path(config: ShardlogConfig, records: list[IncomingRecord], batch: int,
                compression: Compression, partition: str) -> ingest.Path:  # fmt: skip
    """LogWriter.append per batch with ``compression``, after a warm-up batch elsewhere."""
    clients, counter, cpu = ingest.counted(config)
    settings = WriterSettings(config.bucket, config.tables, segment_compression=compression)
    writer = LogWriter(clients, settings)
    writer.append(f"{partition}-warm-up", records[:batch])
    batches = [
        ingest.ready(functools.partial(writer.append, partition, records[i : i + batch]))
        for i in range(0, len(records), batch)
    ]
    return ingest.Path(f"{partition} ({compression})", len(records), batches, counter, cpu)


def stored_bytes(config: ShardlogConfig, partition: str) -> int:
    pages = config.clients().s3.get_paginator("list_objects_v2")
    prefix = partition_prefix(partition)
    return sum(
        o["Size"] for page in pages.paginate(Bucket=config.bucket, Prefix=prefix)
        for o in page.get("Contents", [])
    )  # fmt: skip


def ingest_rows(count: int, batch: int) -> list[dict[str, Any]]:
    """Ingest of the same records with and without compression, timed interleaved: the demo's
    JSON, then random bytes (a quarter as many records: ten times the bytes each)."""
    samples = {"demo JSON": json_sample(count), "random 1 KiB": random_sample(count // 4)}
    rows = []
    with EmbeddedAWS() as aws:
        config = common.named_log("bench-codec", aws.endpoint_url)
        provision(config.clients(), config, shard_count=1)
        ShardSync(config.clients(), config.stream_name, config.tables).sync()
        for sample, records in samples.items():
            partitions: dict[Compression, str] = {
                c: f"shardId-{sample[:4]}-{c}" for c in COMPRESSIONS
            }
            paths = [
                writer_path(config, records, batch, compression, partition)
                for compression, partition in partitions.items()
            ]
            for (compression, partition), row in zip(
                partitions.items(), ingest.timed(*paths), strict=True
            ):
                rows.append(
                    {
                        "sample": sample,
                        "compression": compression,
                        "records": row.records,
                        "recordsPerSecond": round(row.records_per_s, 1),
                        "requestsPer1000Records": round(row.requests_per_1000, 2),
                        "cpuMsPer1000Records": round(row.per_1000_records(1000 * row.cpu_s), 2),
                        "storedBytesPerRecord": round(
                            stored_bytes(config, partition) / len(records), 1
                        ),
                    }
                )
    return rows


def zstd_cost() -> dict[str, Any]:
    """What the ``zstandard`` wheel would add to the Lambda asset: bytes and import time."""
    spec = importlib.util.find_spec("zstandard")
    if spec is None or spec.origin is None:
        return {"available": False}
    package = Path(spec.origin).parent
    size = sum(p.stat().st_size for p in package.rglob("*") if p.is_file())
    code = "import time; t = time.perf_counter(); import zstandard; print(time.perf_counter() - t)"
    imports = [
        float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             check=True).stdout)
        for _ in range(5)
    ]  # fmt: skip
    return {
        "available": True,
        "installedBytes": size,
        "importMs": round(1000 * sorted(imports)[len(imports) // 2], 1),  # the median
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=20_000, help="records per ingest sample")
    parser.add_argument("--batch-size", type=int, default=1_000, help="records per segment")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    size = args.batch_size
    report: dict[str, Any] = {
        "codecs": codec_rows("demo JSON", json_sample(size))
        + codec_rows("random 1 KiB", random_sample(size)),
        "ingest": ingest_rows(args.records, size),
        "zstandard": zstd_cost(),
    }
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(f"Segments of {size} records; ratio = bytes stored / bytes uncompressed")
    print(f"{'sample':<14} {'codec':<46} {'ratio':>7} {'comp MB/s':>10} {'decomp MB/s':>12} "
          f"{'decode MB/s':>12}")  # fmt: skip
    for row in report["codecs"]:
        print(
            f"{row['sample']:<14} {row['codec']:<46} {row['ratio']:>7.3f} "
            f"{row.get('compressMBps', ''):>10} {row.get('decompressMBps', ''):>12} "
            f"{row.get('decodeMBps', ''):>12}"
        )
    print("\nIngest (LogWriter.append per batch, embedded AWS, timed interleaved)")
    print(f"{'sample':<14} {'compression':<12} {'records':>8} {'records/s':>10} "
          f"{'req/1k rec':>11} {'CPU ms/1k':>10} {'stored B/rec':>13}")  # fmt: skip
    for row in report["ingest"]:
        print(
            f"{row['sample']:<14} {row['compression']:<12} {row['records']:>8} "
            f"{row['recordsPerSecond']:>10.0f} {row['requestsPer1000Records']:>11.2f} "
            f"{row['cpuMsPer1000Records']:>10.1f} {row['storedBytesPerRecord']:>13.1f}"
        )
    zstd = report["zstandard"]
    if zstd["available"]:
        print(f"\nzstandard: {zstd['installedBytes'] / 2**20:.1f} MiB installed, import "
              f"{zstd['importMs']} ms in a fresh interpreter")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
