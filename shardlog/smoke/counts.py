"""Counting the smoke test's rows in the lake table: through Athena, or through pyiceberg.

Both answer the same question for the same filter: how many rows, and how many distinct
record ids, have one of the smoke's partition keys and arrived at or after a time (the
time bounds the scan to the day partitions the smoke can be in). A counter is polled:
``start`` submits the count, ``result`` answers None until it is known, so the smoke's own
clock and deadline decide how long to wait.

- ``AthenaCount`` (a deployed stack on AWS): ``StartQueryExecution`` of ``count_query`` in
  the stack's workgroup (which holds the result location and its key), then
  ``GetQueryExecution`` until the query ends and ``GetQueryResults``. Athena reads the
  Iceberg table through the Glue catalog, as a user's queries do.
- ``LakeCount`` (the embedded AWS, whose Athena stores queries but runs none): the same
  filter through ``shardlog.lake.query`` on the table's current snapshot, read by pyiceberg
  through the same Glue catalog.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from shardlog.aws import Clients
from shardlog.exceptions import ShardlogError
from shardlog.lake.settings import LakeSettings
from shardlog.stack import DeployedStack

ATHENA_DONE = ("SUCCEEDED", "FAILED", "CANCELLED")


class CountFailed(ShardlogError):
    """The count ran and failed (an Athena query that ended FAILED or CANCELLED)."""


@dataclass(frozen=True)
class RowCount:
    rows: int
    record_ids: int  # distinct
    how: str  # where it was counted, for the step's line


class RowCounter(Protocol):
    def start(self, table: str, keys: Sequence[str], since: datetime) -> str:
        """Submit the count; returns a handle for ``result``."""
        ...

    def result(self, handle: str) -> RowCount | None:
        """The count, or None while it is running; CountFailed when it failed."""
        ...


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def count_query(table: str, keys: Sequence[str], since: datetime) -> str:
    """Athena (engine 3) SQL counting rows and distinct record ids of ``keys`` in ``table``
    (``<database>.<table>``) that arrived at or after ``since``."""
    database, _, name = table.partition(".")
    if not database or not name:
        raise ValueError(f"lake table must be <database>.<table>, not {table!r}")
    if not keys:
        raise ValueError("count_query needs at least one partition key")
    moment = since.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return (
        "SELECT count(*) AS row_count, count(DISTINCT record_id) AS record_ids "
        f'FROM "{database}"."{name}" '
        f"WHERE partition_key IN ({', '.join(_literal(k) for k in keys)}) "
        f"AND arrival_time >= from_iso8601_timestamp({_literal(moment)})"
    )


class AthenaCount:
    def __init__(self, athena: Any, workgroup: str) -> None:
        self.athena = athena  # a boto3 Athena client
        self.workgroup = workgroup

    def start(self, table: str, keys: Sequence[str], since: datetime) -> str:
        response = self.athena.start_query_execution(
            QueryString=count_query(table, keys, since), WorkGroup=self.workgroup
        )
        return str(response["QueryExecutionId"])

    def result(self, handle: str) -> RowCount | None:
        execution = self.athena.get_query_execution(QueryExecutionId=handle)["QueryExecution"]
        state = execution["Status"]["State"]
        if state not in ATHENA_DONE:
            return None
        if state != "SUCCEEDED":
            reason = execution["Status"].get("StateChangeReason", "no reason given")
            raise CountFailed(f"Athena query {handle} ended {state}: {reason}")
        rows = self.athena.get_query_results(QueryExecutionId=handle)["ResultSet"]["Rows"]
        return _parse(rows, f"Athena, workgroup {self.workgroup}, query {handle}")


def _parse(rows: list[dict[str, Any]], how: str) -> RowCount:
    """The header row and one row of two numbers, as GetQueryResults gives a count."""
    values = [[cell.get("VarCharValue") for cell in row["Data"]] for row in rows]
    if len(values) != 2 or values[0] != ["row_count", "record_ids"] or len(values[1]) != 2:
        raise CountFailed(f"unexpected result of the count ({how}): {values}")
    row_count, record_ids = values[1]
    if not (str(row_count).isdigit() and str(record_ids).isdigit()):
        raise CountFailed(f"unexpected result of the count ({how}): {values}")
    return RowCount(int(str(row_count)), int(str(record_ids)), how)


class LakeCount:
    def __init__(self, lake: LakeSettings) -> None:
        self.lake = lake
        self._counts: dict[str, RowCount] = {}

    def start(self, table: str, keys: Sequence[str], since: datetime) -> str:
        from shardlog.lake.catalog import open_table
        from shardlog.lake.query import MAX_QUERY_LIMIT, LakeQuery, query_table

        if table != self.lake.table:
            raise ValueError(f"this counter reads {self.lake.table}, not {table}")
        snapshot = open_table(self.lake)
        query = LakeQuery(partition_keys=tuple(keys), since=since, limit=MAX_QUERY_LIMIT)
        rows = query_table(snapshot, query)
        ids = {i for i in rows["record_id"].to_pylist() if i is not None}
        handle = str(len(self._counts))
        current = snapshot.current_snapshot()
        where = f"snapshot {current.snapshot_id}" if current else "no snapshot"
        self._counts[handle] = RowCount(rows.num_rows, len(ids), f"pyiceberg, {where}")
        return handle

    def result(self, handle: str) -> RowCount | None:
        return self._counts[handle]


def row_counter(stack: DeployedStack, clients: Clients) -> RowCounter:
    """Athena in the stack's workgroup; on the embedded AWS (an endpoint on 127.0.0.1),
    whose Athena runs no query, pyiceberg on the same table."""
    config = stack.config()
    if config.is_local:
        lake = LakeSettings.for_deployment(
            config.bucket, config.region, config.endpoint_url, stack.lake_table
        )
        return LakeCount(lake)
    return AthenaCount(clients.client("athena"), stack.athena_workgroup)
