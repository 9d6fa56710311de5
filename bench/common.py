"""What every benchmark shares: the import path, a quiet Powertools, and a measurement row.

Import it first in a benchmark script (``import common``): it makes the repository
importable when the script runs as ``python bench/<name>.py``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from shardlog import constants as C
from shardlog.config import ShardlogConfig
from shardlog.lambda_consumer.events import kinesis_event_record
from shardlog.local.quiet import quiet_powertools

if TYPE_CHECKING:  # pragma: no cover
    from shardlog.format import IncomingRecord

BENCH_STREAM_ARN = f"arn:aws:kinesis:{C.DEFAULT_REGION}:000000000000:stream/bench"

# Handlers run in this process: no EMF lines on stdout, no X-Ray, warnings only.
quiet_powertools()


def kinesis_event(shard_id: str, records: Sequence[IncomingRecord]) -> dict[str, Any]:
    """The event a Kinesis event source mapping hands the ingest handler for ``records``."""
    return {
        "Records": [
            kinesis_event_record(
                shard_id=shard_id,
                partition_key=r.partition_key,
                sequence_number=r.kinesis_sequence_number,
                data=r.data,
                arrival_s=r.arrival_ms / 1000,
                event_source_arn=BENCH_STREAM_ARN,
                region=C.DEFAULT_REGION,
                invoke_identity_arn="arn:aws:iam::000000000000:role/bench-ingest",
            )
            for r in records
        ]
    }


def named_log(name: str, endpoint_url: str | None = None) -> ShardlogConfig:
    """A log of its own: stream, bucket and tables named after ``name``, so runs in one
    process (moto's state is per process) never share a stream, a bucket or a table."""
    return ShardlogConfig(
        stream_name=name,
        bucket=name,
        partitions_table=f"{name}-partitions",
        consumers_table=f"{name}-consumers",
        endpoint_url=endpoint_url,
    )


@dataclass
class Measurement:
    """One timed path of a benchmark: ``records`` handled in ``seconds``."""

    name: str
    records: int
    seconds: float

    @property
    def records_per_s(self) -> float:
        return self.records / self.seconds

    def per_1000_records(self, count: float) -> float:
        return 1000 * count / self.records


TICKS = os.sysconf("SC_CLK_TCK")


def proc_stat(path: str) -> list[str] | None:
    """A /proc ``stat`` file's fields after the command's name (0: state, 1: parent,
    11 to 14: user, system, and reaped children's user and system CPU in ``TICKS``); None
    when the process or thread is gone, or there is no /proc."""
    try:
        return Path(path).read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None


def tree_cpu_seconds(root: int | None = None) -> float:
    """CPU seconds (user and system) of a process and every live descendant, each with its
    reaped children's: what a run in this process, its JVM and Spark's Python workers have
    cost together (Linux /proc)."""
    children: dict[int, list[int]] = {}
    spent: dict[int, float] = {}
    for entry in filter(str.isdigit, os.listdir("/proc")):
        fields = proc_stat(f"/proc/{entry}/stat")
        if fields is not None:
            children.setdefault(int(fields[1]), []).append(int(entry))
            spent[int(entry)] = sum(int(f) for f in fields[11:15]) / TICKS
    total, frontier = 0.0, [os.getpid() if root is None else root]
    while frontier:
        pid = frontier.pop()
        total += spent.get(pid, 0.0)
        frontier += children.get(pid, [])
    return total
