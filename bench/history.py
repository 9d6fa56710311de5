"""The hot paths against history: requests, read units and seconds per sweep, shard sync,
balance, `status` and a compaction's plan (its read of the partitions), with 0, 500 and
2,000 retired partitions beside a handful of live ones.

A long-lived stream that reshards leaves ENDED partitions behind, one item each in the
partitions table and one lease item per group in the consumers table. Before the live set,
every hot path Scanned the partitions table (and Queried each group's every lease); now it
Queries the sparse ``live`` index and reads the leases of the live partitions by key
(shardlog/retirement.py). Both are measured in the same run: **scan** is the same code with
its live-set reads answered by the full Scan and the group's full Query, as before.

Setup (not measured): ``--live`` OPEN partitions (the stream's shards, recorded by shard
sync), ``--groups`` consumer groups each with a lease on every partition (SHARD_END on the
retired ones, as a finished group leaves them) and the lake's watermark mirror; the history
is written straight to the tables. Each operation runs ``--repeats`` times; per run:

- **requests**: AWS requests (``shardlog.aws.RequestCounter``);
- **read units**: DynamoDB read request units by DynamoDB's rule (per started 4 KB of the
  items a Scan or Query reads, of each item a GetItem or BatchGetItem reads; half for an
  eventually consistent read), from the items in the answers (the embedded AWS's own
  ConsumedCapacity is a flat 1 a request);
- **ms**: wall time on the embedded AWS (noisy on a busy machine: compare ratios).

Usage: python bench/history.py [--history 0,500,2000] [--live N] [--groups N]
                               [--repeats N] [--operation NAME ...] [--json]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from typing import Any

import common  # first: the repository importable

from bench.costmodel import item_size_bytes, read_units
from shardlog import constants as C
from shardlog.aws import Clients, RequestCounter
from shardlog.clock import ManualClock
from shardlog.config import ShardlogConfig
from shardlog.consumer.settings import ConsumerSettings
from shardlog.consumer.worker import Worker
from shardlog.dal.consumers import LAKE, LAMBDA, create_group, lake_reader, write_checkpoints
from shardlog.dal.partitions import PartitionsTable
from shardlog.lambda_consumer.wake import sweep
from shardlog.local.embedded import EmbeddedAWS, provision
from shardlog.retirement import LakeReader, Retirement, RetirementResult
from shardlog.shardsync import ShardSync
from shardlog.status_rows import ingest_rows
from shardlog.tables import LiveLineage, Tables

HEAD = 1_000  # records in each retired partition


class ReadUnits:
    """DynamoDB read units of every read a Clients sends, from the items it gets back."""

    def __init__(self) -> None:
        self.units = 0.0

    def attach(self, clients: Clients) -> ReadUnits:
        clients.add_hook("after-call.dynamodb", self._after)
        return self

    def _after(self, parsed: dict[str, Any], model: Any, context: Any, **_: Any) -> None:
        params = context.get("shardlog_params", {}) if isinstance(context, dict) else {}
        operation = model.name
        consistent = bool(params.get("ConsistentRead"))
        if operation in ("Scan", "Query"):
            size = sum(item_size_bytes(i) for i in parsed.get("Items", []))
            self.units += read_units(size, consistent=consistent)
        elif operation == "GetItem" and "Item" in parsed:
            self.units += read_units(item_size_bytes(parsed["Item"]), consistent=True)
        elif operation == "BatchGetItem":
            for items in parsed.get("Responses", {}).values():
                self.units += sum(read_units(item_size_bytes(i), consistent=True) for i in items)


def _remember_params(params: dict[str, Any], context: Any, **_: Any) -> None:
    if isinstance(context, dict):
        context["shardlog_params"] = params


@dataclass
class Row:
    history: int
    operation: str
    reads: str  # "live" or "scan"
    requests: float
    read_units: float
    ms: float


@contextlib.contextmanager
def scan_reads() -> Iterator[None]:
    """The hot paths' reads as they were before the live set: a Scan of the partitions table
    and a Query of the group's every lease (the protocol code unchanged)."""

    def live_lineage(self: Tables) -> LiveLineage:
        every = self.list_partitions()
        return LiveLineage(every, {p.partition_id: p for p in every})

    def leases_on(self: Tables, group: str, _ids: Any) -> dict[str, Any]:
        return {lease.partition_id: lease for lease in self.list_leases(group)}

    def no_retirement(self: Retirement, live: Any = None) -> RetirementResult:
        return RetirementResult()  # shard sync had no retirement step

    patches: dict[tuple[type, str], Any] = {
        (Tables, "live_lineage"): live_lineage,
        (Tables, "leases_on"): leases_on,
        (Tables, "live_partitions"): Tables.list_partitions,
        (Retirement, "run"): no_retirement,
    }
    saved = {key: getattr(*key) for key in patches}
    for (owner, name), replacement in patches.items():
        setattr(owner, name, replacement)
    try:
        yield
    finally:
        for (owner, name), original in saved.items():
            setattr(owner, name, original)


def build(config: ShardlogConfig, history: int, live: int, groups: list[str]) -> Clients:
    """The stream's ``live`` shards recorded, the groups, and ``history`` retired partitions
    with every group's finished lease and the lake's watermark on them."""
    clients = config.clients()
    provision(clients, config, shard_count=live)
    ShardSync(clients, config.stream_name, config.tables).sync()
    for group in groups:
        create_group(clients, config.consumers_table, group, LAMBDA, 0, "TRIM_HORIZON", {})
    retired = [f"shardId-history-{i:06d}" for i in range(history)]
    PartitionsTable(clients, config.tables).write_history(retired, HEAD, 0)
    for group, checkpoint in [*((g, C.SHARD_END) for g in groups), (C.COMPACTION_GROUP, "")]:
        write_checkpoints(clients, config.consumers_table, group, retired, checkpoint or str(HEAD))
    # The raw lake table, registered as a reader of the log and caught up (retirement.py).
    create_group(clients, config.consumers_table, C.COMPACTION_GROUP, LAKE, 0, "TRIM_HORIZON", {})
    return clients


def operations(
    clients: Clients, config: ShardlogConfig, groups: list[str]
) -> dict[str, Callable[[], object]]:
    clock = ManualClock()
    tables = Tables(clients, config.tables)
    sync = ShardSync(
        clients, config.stream_name, config.tables, retirement=Retirement(clients, config.tables)
    )
    worker = Worker(
        groups[0],
        lambda records, checkpointer: None,
        config,
        settings=ConsumerSettings(take_interval_ms=1, idle_poll_interval_ms=0),
        clock=clock,
        clients=clients,
    )
    worker._balance(clock.now_ms())  # its group record and lease items, once (not measured)
    return {
        "sweep": lambda: sweep(tables, groups, clock.now_ms(), "bench"),
        "shard sync": sync.sync,
        "balance": lambda: worker._balance(clock.now_ms()),
        "status": lambda: ingest_rows(clients, config.stream_name, config.tables, with_lag=False),
        "compaction plan": lambda: LakeReader.open(clients, config.tables, lake_reader(), clock),
    }


def measure(
    clients: Clients, history: int, name: str, op: Callable[[], object], reads: str, repeats: int
) -> Row:
    counter = RequestCounter().attach(clients)
    units = ReadUnits().attach(clients)
    op()  # warm (clients, caches)
    counter.reset()
    units.units = 0.0
    started = time.perf_counter()
    for _ in range(repeats):
        op()
    seconds = time.perf_counter() - started
    return Row(
        history,
        name,
        reads,
        counter.total / repeats,
        round(units.units / repeats, 1),
        round(1000 * seconds / repeats, 1),
    )


def run(
    history: int,
    live: int,
    group_count: int,
    repeats: int,
    endpoint: str,
    only: frozenset[str] = frozenset(),
) -> list[Row]:
    config = common.named_log(f"history-{history}-{time.time_ns() % 10**9}", endpoint)
    groups = [f"group-{i}" for i in range(group_count)]
    clients = build(config, history, live, groups)
    clients.add_hook("before-call.dynamodb", _remember_params)
    rows = []
    for name, op in operations(clients, config, groups).items():
        if only and name not in only:
            continue
        rows.append(measure(clients, history, name, op, "live", repeats))
        with scan_reads():
            rows.append(measure(clients, history, name, op, "scan", repeats))
    return rows


def table(rows: list[Row]) -> str:
    lines = [
        "| history | operation | reads | requests | read units | ms |",
        "|---:|---|---|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r.history} | {r.operation} | {r.reads} | {r.requests:g} | "
            f"{r.read_units:g} | {r.ms:g} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--history", default="0,500,2000")
    parser.add_argument("--live", type=int, default=4)
    parser.add_argument("--groups", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--operation", action="append", default=[], help="only this one (repeatable)"
    )
    args = parser.parse_args()
    with EmbeddedAWS() as aws:
        endpoint = aws.endpoint_url
        rows = [
            row
            for history in (int(h) for h in args.history.split(","))
            for row in run(
                history, args.live, args.groups, args.repeats, endpoint, frozenset(args.operation)
            )
        ]
    if args.json:
        print(json.dumps([asdict(r) for r in rows]))
    else:
        print(table(rows))


if __name__ == "__main__":
    main()
