"""The look-up of a resent record (idempotent produce), on a shard with a full window of
segments: the AWS requests it sends, by operation, and its time on the embedded AWS.

A busy shard gets a batch, so a segment, about every second: with the default 600 s window
that is 600 segments inside the window (``--window-segments``), here below 200 older ones
(``--older-segments``). One resent record arrives just after the last segment; its original
is the oldest record inside the window, so the look-up must read the whole window (the
worst case). Two cases:

- **same shard**: the resend goes to the shard that holds its original;
- **child before shard sync**: the shard was split after its last segment and the resend
  goes to a child shard sync has not recorded yet (no partition item): the look-up must
  learn the child's parent (ListShards) and read the parent's window.

Segments are written straight to the embedded S3 with the partition's head (setup, not
measured), ``--records-per-segment`` records each. Prints the requests by operation, the
total and the look-up's time for each case; ``--json`` for a machine-readable line. Run it
from another checkout that has the data-access layer (``shardlog/dal/``) to compare.

Usage: python bench/dedupe.py [--window-segments N] [--older-segments N]
                              [--records-per-segment N] [--json]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from typing import Any

import common  # first: the repository importable

from shardlog import constants as C
from shardlog.aws import RequestCounter
from shardlog.config import ShardlogConfig
from shardlog.dal.partitions import PartitionsTable
from shardlog.format import IncomingRecord, encode_segment
from shardlog.local.embedded import EmbeddedAWS, provision
from shardlog.local.kinesis_fidelity import SEQUENCE_BASE
from shardlog.segments import SegmentStore
from shardlog.shardsync import ShardSync
from shardlog.writer import LogWriter, WriterSettings

WINDOW_MS = C.DEFAULT_DEDUPE_WINDOW_S * 1000
BASE_ARRIVAL_MS = 1_700_000_000_000
PARENT = "shardId-000000000000"
CHILD = "shardId-000000000001"


def build(config: ShardlogConfig, segments: int, per_segment: int) -> IncomingRecord:
    """``segments`` segments on PARENT, a second apart (arrival), committed; the record the
    resend copies: the oldest one inside the window of a resend just after the last."""
    clients = config.clients()
    ShardSync(clients, config.stream_name, config.tables).sync()  # the parent's lineage
    store = SegmentStore(clients, config.bucket)
    oldest_inside = None
    resend_at = BASE_ARRIVAL_MS + (segments - 1) * 1000 + 1
    for index in range(segments):
        arrival = BASE_ARRIVAL_MS + index * 1000
        records = [
            IncomingRecord(
                f"k{j}",
                b"x" * 100,
                str(SEQUENCE_BASE + 10 * (index * per_segment + j + 1)),
                arrival,
                f"producer:{index * per_segment + j}",
            )
            for j in range(per_segment)
        ]
        if oldest_inside is None and arrival >= resend_at - WINDOW_MS:
            oldest_inside = records[0]
        assert store.create(
            PARENT,
            index * per_segment,
            encode_segment(PARENT, index * per_segment, records, arrival),
        )
    PartitionsTable(clients, config.tables).set_head(PARENT, segments * per_segment)
    assert oldest_inside is not None
    return oldest_inside


def look_up(
    config: ShardlogConfig, partition_id: str, original: IncomingRecord, sequence: int
) -> dict[str, Any]:
    """One batch holding one resend of ``original``, by a fresh writer: its requests."""
    settings: dict[str, Any] = {"bucket": config.bucket, "tables": config.tables}
    if "stream" in {f.name for f in dataclasses.fields(WriterSettings)}:
        settings["stream"] = config.stream_name  # the writer lists shards for lineage
    writer = LogWriter(config.clients(), WriterSettings(**settings))
    requests = RequestCounter().attach(writer.clients)
    resend = original._replace(
        kinesis_sequence_number=str(SEQUENCE_BASE + sequence),
        arrival_ms=original.arrival_ms + WINDOW_MS,
        resent=True,
    )
    started = time.perf_counter()
    result = writer.append(partition_id, [resend])
    seconds = time.perf_counter() - started
    counted = requests.snapshot()
    return {
        "dropped": result.deduplicated,
        "requests": sum(counted.values()),
        "by_operation": dict(sorted(counted.items())),
        "seconds": round(seconds, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--window-segments", type=int, default=600)
    parser.add_argument("--older-segments", type=int, default=200)
    parser.add_argument("--records-per-segment", type=int, default=20)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    segments = args.window_segments + args.older_segments
    with EmbeddedAWS() as aws:
        config = common.named_log("dedupe-bench", aws.endpoint_url)
        provision(config.clients(), config, shard_count=1)
        original = build(config, segments, args.records_per_segment)
        top = SEQUENCE_BASE + 10 * (segments * args.records_per_segment + 10)
        same = look_up(config, PARENT, original, top)
        config.clients().kinesis.split_shard(
            StreamName=config.stream_name, ShardToSplit=PARENT, NewStartingHashKey=str(2**127)
        )
        child = look_up(config, CHILD, original, top + 10)
    report = {
        "window_segments": args.window_segments,
        "older_segments": args.older_segments,
        "records_per_segment": args.records_per_segment,
        "same shard": same,
        "child before shard sync": child,
    }
    if args.json:
        print(json.dumps(report))
        return
    print(
        f"look-up of one resent record: {args.window_segments} segments inside the 600 s "
        f"window, {args.older_segments} older, {args.records_per_segment} records each"
    )
    for case in ("same shard", "child before shard sync"):
        row = report[case]
        assert isinstance(row, dict)
        print(
            f"  {case:<24} {row['requests']:>5} requests in {row['seconds']:.2f} s, "
            f"copy dropped: {bool(row['dropped'])}"
        )
        print(f"  {'':<24} {row['by_operation']}")


if __name__ == "__main__":
    main()
