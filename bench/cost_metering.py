"""Metering for the cost benchmark: what a workload sends, in the units AWS bills.

A ``Meter`` counts every request of the clients a ``ShardlogConfig`` builds while
``metered`` is on (``RequestCounter``: requests by operation), plus each DynamoDB request's
table, items and consistency, and for a Scan or Query the items it read. ``usage_of`` turns
that into a ``costmodel.Usage`` with the read and write units DynamoDB would bill, sized by
each table's largest item. The workloads' own set-up goes through ``unmetered_clients``,
so it is never billed to them.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from bench import costmodel as M
from shardlog.aws import AwsConfig, Clients, RequestCounter
from shardlog.config import LOCAL_CREDENTIALS, ShardlogConfig
from shardlog.dal import TRANSACTIONAL_READ, TRANSACTIONAL_WRITE


def unmetered_clients(config: ShardlogConfig) -> Clients:
    """Clients of the embedded AWS that no meter counts (set-up, checks)."""
    key, secret = LOCAL_CREDENTIALS
    aws = AwsConfig(config.region, config.endpoint_url, key, secret)
    return Clients(endpoint_url=config.endpoint_url, config=aws)


class Meter:
    """Requests by operation, and each DynamoDB request's table, items and consistency."""

    def __init__(self) -> None:
        self.requests = RequestCounter()
        self._lock = threading.Lock()
        self.dynamo: list[M.DynamoCall] = []
        self._scan = threading.local()  # the table of the Scan or Query being answered

    def attach(self, clients: Clients) -> Clients:
        self.requests.attach(clients)
        clients.add_hook("before-parameter-build.dynamodb", self._on_dynamodb)
        clients.add_hook("after-call.dynamodb", self._on_dynamodb_answer)
        return clients

    @property
    def total(self) -> int:
        return self.requests.total

    def reset(self) -> None:
        self.requests.reset()
        with self._lock:
            self.dynamo.clear()

    def _on_dynamodb(self, params: dict[str, Any], model: Any, **_: Any) -> None:
        op = model.name
        if op in ("Scan", "Query"):
            self._scan.table = params.get("TableName", "")  # units follow what was read
            self._scan.consistent = bool(params.get("ConsistentRead", False))
            return
        if op == TRANSACTIONAL_WRITE:
            items = params.get("TransactItems", [])
            tables = [next(iter(i.values()))["TableName"] for i in items]
        elif op == TRANSACTIONAL_READ:
            tables = [i["Get"]["TableName"] for i in params.get("TransactItems", [])]
        elif "TableName" in params:
            tables = [params["TableName"]]
        else:
            return  # BatchGetItem/BatchWriteItem: shardlog sends none
        consistent = bool(params.get("ConsistentRead", False))
        with self._lock:
            self.dynamo += [M.DynamoCall(op, table, 1, consistent) for table in tables]

    def _on_dynamodb_answer(self, parsed: dict[str, Any], model: Any, **_: Any) -> None:
        if model.name not in ("Scan", "Query"):
            return
        scanned = int(parsed.get("ScannedCount", parsed.get("Count", 0)))
        call = M.DynamoCall(model.name, self._scan.table, max(1, scanned), self._scan.consistent)
        with self._lock:
            self.dynamo.append(call)


def metered(meter: Meter) -> Callable[[], None]:
    """Every Clients a ShardlogConfig builds from now on is metered; returns the undo."""
    original = ShardlogConfig.clients

    def clients(self: ShardlogConfig, principal: str | None = None) -> Clients:
        return meter.attach(original(self, principal))

    ShardlogConfig.clients = clients  # type: ignore[method-assign]

    def undo() -> None:
        ShardlogConfig.clients = original  # type: ignore[method-assign]

    return undo


@contextmanager
def cpu_and_requests(meter: Meter) -> Iterator[list[float]]:
    """Yields [cpu_ms, requests], filled in when the block ends (this thread's CPU only:
    the embedded AWS serves requests on other threads)."""
    out = [0.0, 0.0]
    cpu, requests = time.thread_time(), meter.total
    yield out
    out[0] = 1000 * (time.thread_time() - cpu)
    out[1] = meter.total - requests


def item_sizes(config: ShardlogConfig) -> dict[str, int]:
    """The largest item of each table, as DynamoDB sizes it (every item is billed at it)."""
    ddb = unmetered_clients(config).dynamodb  # unmetered
    sizes = {}
    for table in (config.partitions_table, config.consumers_table):
        items = ddb.scan(TableName=table).get("Items", [])
        sizes[table] = max((M.item_size_bytes(i) for i in items), default=0)
    return sizes


def usage_of(meter: Meter, config: ShardlogConfig, records: int, **fields: Any) -> M.Usage:
    wru, rru = M.dynamodb_units(list(meter.dynamo), item_sizes(config))
    return M.Usage(
        records=records,
        requests=dict(meter.requests.snapshot()),
        dynamodb_wru=wru,
        dynamodb_rru=rru,
        **fields,
    )
