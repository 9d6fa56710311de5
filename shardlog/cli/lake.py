"""`shardlog lake`: query the lake table (docs/LAKE.md) through pyiceberg."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING

import click

from shardlog import constants as C
from shardlog.config import ShardlogConfig
from shardlog.exceptions import ShardlogError

if TYPE_CHECKING:  # pragma: no cover
    from shardlog.lake.schema import TableSchema
    from shardlog.lake.settings import LakeSettings


def _config(ctx: click.Context) -> ShardlogConfig:
    return ctx.find_object(ShardlogConfig) or ShardlogConfig.resolve()


def _time(_ctx: click.Context, param: click.Parameter, value: str | None) -> datetime | None:
    if value is None:
        return None
    try:
        when = datetime.fromisoformat(value)
    except ValueError:
        raise click.BadParameter(
            f"{value!r} is not an ISO 8601 time (e.g. 2026-11-25T03:00:00Z)"
        ) from None
    if when.tzinfo is None:
        raise click.BadParameter(f"{value!r} has no time zone: add Z or an offset")
    return when


# Rows a lake command prints at most (held in memory).
_LIMIT = click.option(
    "--limit",
    default=C.LAKE_QUERY_DEFAULT_LIMIT,
    show_default=True,
    type=click.IntRange(1, C.LAKE_QUERY_MAX_LIMIT),
    help="Rows at most.",
)


@click.group("lake")
def lake() -> None:
    """The lake table: the committed log as an Apache Iceberg table (docs/LAKE.md)."""


@lake.command("query")
@click.option("--partition-key", "partition_keys", multiple=True, help="Repeat for any of several.")
@click.option("--partition", "partitions", multiple=True, help="Partition id; repeatable.")
@click.option("--since", callback=_time, help="Arrival time at or after (ISO 8601, with zone).")
@click.option("--until", callback=_time, help="Arrival time before (ISO 8601, with zone).")
@_LIMIT
@click.option(
    "--fresh",
    is_flag=True,
    help="Add the committed log beyond the table's watermark (records not compacted yet).",
)
@click.option(
    "--table",
    "table_name",
    default=None,
    help="A declared typed table, or its dead-letter table <T>_rejected (docs/LAKE.md); "
    "default: the raw table.",
)
@click.option(
    "--where",
    "where_terms",
    multiple=True,
    metavar="COLUMN=VALUE",
    help="Rows whose COLUMN (a scalar column of --table) equals VALUE; repeatable (all hold).",
)
@click.option("--endpoint-url", help="AWS endpoint; overrides the global option.")
@click.option("--json", "as_json", is_flag=True, help="JSON lines, one row each.")
@click.pass_context
def query(
    ctx: click.Context,
    partition_keys: tuple[str, ...],
    partitions: tuple[str, ...],
    since: datetime | None,
    until: datetime | None,
    limit: int,
    fresh: bool,
    table_name: str | None,
    where_terms: tuple[str, ...],
    endpoint_url: str | None,
    as_json: bool,
) -> None:
    """Rows of the lake table matching every filter, by partition and seq."""
    from shardlog.lake.catalog import open_table
    from shardlog.lake.query import (
        RAW_COLUMNS,
        LakeQuery,
        json_rows,
        query_table,
        render_rows,
        run_query,
    )
    from shardlog.lake.query import where as where_filter
    from shardlog.lake.schema import EVENTS
    from shardlog.tables import Tables

    config = _config(ctx)
    if endpoint_url:
        config = replace(config, endpoint_url=endpoint_url, extra={**config.extra, "lake": None})
    if fresh and table_name:
        raise click.BadParameter(
            "--fresh reads the raw log: not with --table", param_hint="--fresh"
        )
    try:
        settings, schema = _lake_table(config, table_name)
        spec = LakeQuery(
            partition_keys, partitions, since, until, limit, where_filter(schema, where_terms)
        )
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
    except ShardlogError as exc:
        raise click.BadParameter(str(exc), param_hint="--table") from None
    try:
        table = open_table(settings, schema=schema)
        clients = config.clients() if fresh else None
        heads = Tables(clients, config.tables).list_partitions() if clients else []
        if schema is EVENTS:
            rows = run_query(
                table, spec, fresh=fresh, clients=clients, bucket=config.bucket, partitions=heads
            )
        else:  # a declared table: its own columns, never fresh
            rows = query_table(table, spec, schema)
    except ShardlogError as exc:
        raise click.ClickException(str(exc)) from None
    if as_json:
        for row in json_rows(rows, schema):
            click.echo(json.dumps(row, sort_keys=True, default=str))
        return
    columns = RAW_COLUMNS if schema is EVENTS else [c.json_name for c in schema.columns]
    click.echo(render_rows(list(json_rows(rows, schema)), columns))


def _lake_table(config: ShardlogConfig, name: str | None) -> tuple[LakeSettings, TableSchema]:
    """The settings and shape of the raw table, or of a declared table (``--table``)."""
    from shardlog.lake.declared import rejected_schema
    from shardlog.lake.schema import EVENTS
    from shardlog.lake.settings import LakeSettings
    from shardlog.spark.jobs import JobArgs

    raw = LakeSettings.from_config(config)
    if name is None:
        return raw, EVENTS
    declared = JobArgs.from_config(config).declared().table(name)
    schema = rejected_schema() if name == declared.rejected_name else declared.typed_schema()
    return raw.sibling(name), schema


@lake.command("sql")
@click.argument("statement")
@_LIMIT
@click.option("--endpoint-url", help="AWS endpoint; overrides the global option.")
@click.option("--json", "as_json", is_flag=True, help="JSON lines, one row each.")
@click.pass_context
def sql(
    ctx: click.Context, statement: str, limit: int, endpoint_url: str | None, as_json: bool
) -> None:
    """Run STATEMENT with DuckDB over the lake's tables: `events`, each declared table and
    its `<T>_rejected` (docs/LAKE.md, "SQL with DuckDB")."""
    from shardlog.lake.exceptions import NoLakeTableError
    from shardlog.lake.settings import LakeSettings
    from shardlog.lake.sql import S3Access, connect, metadata_locations, run_sql
    from shardlog.spark.jobs import JobArgs

    config = _config(ctx)
    if endpoint_url:
        config = replace(config, endpoint_url=endpoint_url, extra={**config.extra, "lake": None})
    # Errors are shardlog's own (ShardlogGroup prints them as one line, exit 2).
    raw = LakeSettings.from_config(config)
    declared = JobArgs.from_config(config).declared()
    names = [n for t in declared.tables for n in (t.name, t.rejected_name)]
    tables = metadata_locations([raw, *(raw.sibling(n) for n in names)])
    if not tables:
        raise NoLakeTableError(
            f"no lake table yet ({raw.table}): run `shardlog spark run compact` first"
        )
    credentials = None if config.endpoint_url else config.clients().session.get_credentials()
    with connect(tables, S3Access.of(raw, credentials)) as con:
        result = run_sql(con, statement, limit)
    from shardlog.lake.query import render_rows

    rows = [{k: _json_value(v) for k, v in row.items()} for row in result.as_dicts()]
    if as_json:
        for row in rows:
            click.echo(json.dumps(row, sort_keys=True))
    else:
        click.echo(render_rows(rows, result.columns))
    if result.truncated:
        click.echo(f"(only the first {limit} rows: --limit to see more)", err=True)


def _json_value(value: object) -> object:
    """DuckDB's Python values as `lake query --json` writes them: bytes in base64, decimals
    exact as text, times in ISO 8601."""
    import base64
    from datetime import date, time
    from decimal import Decimal

    if value is None or isinstance(value, bool | int | float | str | list | dict):
        return value
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, datetime | date | time):
        return value.isoformat()
    if isinstance(value, Decimal):
        return str(value)
    return str(value)


class Refused(click.ClickException):
    """A one-line error, exit status 2 (the change or the table refused; nothing done)."""

    exit_code = 2


@lake.command("backfill")
@click.option(
    "--table", "table_name", required=True, help="The declared typed table to derive anew."
)
@click.option(
    "--dry-run", is_flag=True, help="Say the schema changes and records to re-read; change nothing."
)
@click.option("--endpoint-url", help="AWS endpoint; overrides the global option.")
@click.option("--json", "as_json", is_flag=True, help="The report as one JSON object.")
@click.pass_context
def backfill(
    ctx: click.Context, table_name: str, dry_run: bool, endpoint_url: str | None, as_json: bool
) -> None:
    """Evolve a declared table's schema to its declaration and re-derive its rows (and its
    dead-letter table's) from the log from seq 0, exactly once, while compaction runs.

    Runs Spark in local mode in this process (docs/LAKE.md, Backfill)."""
    import os
    import sys
    import uuid

    from shardlog.spark.backfill import backfill as run
    from shardlog.spark.jobs import JobArgs
    from shardlog.spark.session import local_environment, local_session

    config = _config(ctx)
    if endpoint_url:
        config = replace(config, endpoint_url=endpoint_url, extra={**config.extra, "lake": None})
    args = JobArgs.from_config(config)
    try:
        name = args.declared().table(table_name).name
    except ShardlogError as exc:
        raise Refused(f"--table: {exc}") from None
    if name != table_name:
        raise Refused(f"--table: {table_name} is {name}'s dead-letter table: backfill {name}")
    spark = None
    if not dry_run:  # a dry run reads the catalog only
        os.environ.update(local_environment(sys.executable))
        spark = local_session("shardlog-backfill")  # the running session, if there is one
    hide = as_json or dry_run
    with click.progressbar(
        length=1, label=f"backfilling {name}", file=sys.stderr, hidden=hide
    ) as bar:
        try:
            report = run(
                spark,
                config.clients(),
                args,
                name,
                uuid.uuid4().hex[:16],
                dry_run=dry_run,
                progress=lambda n: _advance(bar, n),
            )
        except ShardlogError as exc:
            raise Refused(str(exc)) from None
    if as_json:
        click.echo(json.dumps(report.as_dict(), sort_keys=True))
        return
    changes = ", ".join(report.changes) or "none"
    if dry_run:
        click.echo(f"{report.table}: schema changes {changes}; {report.records} records to re-read")
        return
    click.echo(
        f"{report.table}: schema changes {changes}; re-read {report.records} records: "
        f"{report.typed} typed, {report.rejected} rejected, in {report.attempts} attempt(s)"
    )


def _advance(bar: object, records: int) -> None:
    """The bar's length is unknown until the table is read: it grows with the work."""
    bar.length = max(bar.length or 0, bar.pos + records)  # type: ignore[attr-defined]
    bar.update(records)  # type: ignore[attr-defined]


@lake.command("maintain")
@click.option(
    "--snapshot-retention-hours",
    default=C.DEFAULT_LAKE_SNAPSHOT_RETENTION_HOURS,
    show_default=True,
    type=click.IntRange(min=C.MIN_LAKE_SNAPSHOT_RETENTION_HOURS),
    help="Expire snapshots older than this (never the current one).",
)
@click.option(
    "--orphan-grace-hours",
    default=C.DEFAULT_LAKE_ORPHAN_GRACE_HOURS,
    show_default=True,
    type=click.IntRange(min=C.MIN_LAKE_ORPHAN_GRACE_HOURS),
    help="Remove unreferenced files older than this (longer than any compaction run).",
)
@click.option(
    "--target-file-mib",
    default=C.DEFAULT_LAKE_TARGET_FILE_MIB,
    show_default=True,
    type=click.IntRange(1, C.MAX_LAKE_TARGET_FILE_MIB),
    help="Rewrite each day's small files into files near this size.",
)
@click.option(
    "--small-file-mib",
    default=C.DEFAULT_LAKE_SMALL_FILE_MIB,
    show_default=True,
    type=click.IntRange(1, C.MAX_LAKE_TARGET_FILE_MIB),
    help="Files below this size are rewritten (at most --target-file-mib).",
)
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def maintain(
    ctx: click.Context,
    snapshot_retention_hours: int,
    orphan_grace_hours: int,
    target_file_mib: int,
    small_file_mib: int,
    as_json: bool,
) -> None:
    """Expire old snapshots, rewrite each day's small files into files near a target size,
    and remove files no snapshot references (crashed runs' files, replaced ones)."""
    from datetime import UTC, timedelta

    from shardlog.lake.catalog import open_table
    from shardlog.lake.maintenance import maintain as run_maintenance
    from shardlog.lake.rewrite import RewriteSettings
    from shardlog.lake.settings import LakeSettings

    if small_file_mib > target_file_mib:
        raise click.BadParameter(
            f"{small_file_mib} is above --target-file-mib {target_file_mib}: files above "
            "the target are not small",
            param_hint="'--small-file-mib'",
        )
    config = _config(ctx)
    settings = LakeSettings.from_config(config)
    try:
        report = run_maintenance(
            config.clients().s3,
            settings,
            open_table(settings),
            datetime.now(UTC),
            snapshot_retention=timedelta(hours=snapshot_retention_hours),
            orphan_grace=timedelta(hours=orphan_grace_hours),
            rewrite=RewriteSettings.of_mib(target_file_mib, small_file_mib),
        )
    except ShardlogError as exc:
        raise click.ClickException(str(exc)) from None
    if as_json:
        click.echo(json.dumps(report.as_dict(), sort_keys=True))
        return
    click.echo(
        f"{settings.table}: expired {len(report.expired_snapshots)} snapshot(s), removed "
        f"{len(report.removed_files)} unreferenced file(s), kept {report.kept_young_files} "
        f"younger than {orphan_grace_hours} h"
    )
    for day in report.rewritten:
        click.echo(
            f"  {day.day}: {day.files_before} file(s) -> {day.files_after} "
            f"({day.replaced} small file(s) of {day.records:,} records rewritten into "
            f"{day.written}, {day.bytes_before / 2**20:.1f} -> {day.bytes_after / 2**20:.1f} MiB)"
        )
