"""SQL over the lake's Iceberg tables with DuckDB (``shardlog lake sql``), no Spark, no JARs.

The catalog (Glue, or SQLite without AWS) names each table's current metadata file; DuckDB's
``iceberg`` extension reads the table from it (the snapshot it names: a consistent view, as
of the moment the view was made) and its ``httpfs`` extension reads the files from S3 with
the caller's own credentials. Each table becomes a view of the same name: ``events`` (the raw
table), every declared typed table ``<t>`` and its dead-letter table ``<t>_rejected``
(docs/LAKE.md), so an analyst writes ``SELECT country, sum(amount) FROM orders GROUP BY 1``
instead of ``json_extract`` over ``events``.

Offline first: the extensions are loaded from the ``duckdb-extension-*`` wheels when they are
installed (``pip install 'shardlog[duckdb]'``), else DuckDB's own ``INSTALL`` fetches them.
The session is DuckDB's: a statement that writes (``COPY ... TO 's3://...'``) acts with the
caller's permissions, as any client of theirs would.
"""

from __future__ import annotations

import glob
import importlib.util
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from shardlog.exceptions import ShardlogError

if TYPE_CHECKING:  # pragma: no cover
    import duckdb

    from shardlog.lake.settings import LakeSettings

EXTENSIONS = ("httpfs", "avro", "iceberg")
INSTALL_HINT = "pip install 'shardlog[duckdb]'"


class LakeSqlError(ShardlogError):
    """DuckDB is missing, a table could not be opened, or the statement was refused."""


@dataclass(frozen=True)
class S3Access:
    """What DuckDB needs to read the table's files: the caller's credentials, and the
    endpoint when it is not AWS's own (the embedded AWS)."""

    region: str
    key_id: str | None = None
    secret: str | None = None
    session_token: str | None = None
    endpoint_url: str | None = None

    @classmethod
    def of(cls, settings: LakeSettings, credentials: Any = None) -> S3Access:
        """From the lake's catalog properties (the embedded AWS names its keys there), else
        from ``credentials`` (botocore's, frozen or not: the caller's session)."""
        props = settings.properties
        key, secret = props.get("s3.access-key-id"), props.get("s3.secret-access-key")
        token = props.get("s3.session-token")
        if key is None and credentials is not None:
            frozen = getattr(credentials, "get_frozen_credentials", lambda: credentials)()
            key, secret, token = frozen.access_key, frozen.secret_key, frozen.token
        return cls(
            region=props.get("s3.region", "us-east-1"),
            key_id=key,
            secret=secret,
            session_token=token,
            endpoint_url=props.get("s3.endpoint"),
        )

    def secret_sql(self) -> str:
        """DuckDB's ``CREATE SECRET`` for these credentials (never logged)."""
        options = {"TYPE": "s3", "REGION": _literal(self.region)}
        if self.key_id:
            options |= {"KEY_ID": _literal(self.key_id), "SECRET": _literal(self.secret or "")}
        if self.session_token:
            options["SESSION_TOKEN"] = _literal(self.session_token)
        if self.endpoint_url:
            url = urlparse(self.endpoint_url)
            options |= {
                "ENDPOINT": _literal(url.netloc),
                "URL_STYLE": _literal("path"),
                "USE_SSL": "true" if url.scheme == "https" else "false",
            }
        body = ", ".join(f"{k} {v}" for k, v in options.items())
        return f"CREATE OR REPLACE SECRET shardlog_lake ({body})"


def connect(tables: Mapping[str, str], access: S3Access | None = None) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB with one view per table (name -> its current metadata file)."""
    try:
        import duckdb
    except ImportError:
        raise LakeSqlError(f"DuckDB is not installed: {INSTALL_HINT}") from None
    con = duckdb.connect(":memory:")
    try:
        for name in EXTENSIONS:
            _load(con, name)
        if access is not None:
            con.execute(access.secret_sql())
        for name, metadata in tables.items():
            con.execute(
                f"CREATE VIEW {_identifier(name)} AS "
                f"SELECT * FROM iceberg_scan({_literal(metadata)})"
            )
    except duckdb.Error as exc:
        con.close()
        raise LakeSqlError(f"DuckDB could not open the lake: {_first_line(exc)}") from None
    return con


@dataclass(frozen=True)
class SqlResult:
    columns: list[str]
    rows: list[tuple[Any, ...]]
    truncated: bool  # more rows than the limit: only the first ``limit`` kept

    def as_dicts(self) -> Iterator[dict[str, Any]]:
        for row in self.rows:
            yield dict(zip(self.columns, row, strict=True))


def run_sql(con: duckdb.DuckDBPyConnection, statement: str, limit: int) -> SqlResult:
    """The statement's result, at most ``limit`` rows (one more is fetched to tell)."""
    import duckdb

    if not statement.strip():
        raise LakeSqlError("the SQL statement is empty")
    try:
        cursor = con.execute(statement)
        if cursor.description is None:  # a statement without a result (SET, CREATE ...)
            return SqlResult([], [], False)
        columns = [d[0] for d in cursor.description]
        rows = cursor.fetchmany(limit + 1)
    except duckdb.Error as exc:
        raise LakeSqlError(f"DuckDB refused the statement: {_first_line(exc)}") from None
    return SqlResult(columns, rows[:limit], len(rows) > limit)


def metadata_locations(settings: Sequence[LakeSettings]) -> dict[str, str]:
    """Each table that exists, by its short name, with its current metadata file (tables
    not created yet, e.g. a declared table before its first compaction, are left out)."""
    from shardlog.lake.catalog import metadata_location

    found: dict[str, str] = {}
    for table in settings:
        if (location := metadata_location(table)) is not None:
            found[table.table.split(".", 1)[1]] = location
    return found


def _load(con: duckdb.DuckDBPyConnection, name: str) -> None:
    """LOAD an extension from its wheel (offline) when installed, else through DuckDB."""
    spec = importlib.util.find_spec(f"duckdb_extension_{name}")
    if spec is not None and spec.origin:
        pattern = os.path.join(os.path.dirname(spec.origin), "extensions", "*", f"{name}.*")
        files = sorted(glob.glob(pattern))
        if files:
            con.execute(f"LOAD {_literal(files[-1])}")
            return
    con.execute(f"INSTALL {name}")
    con.execute(f"LOAD {name}")


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _identifier(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _first_line(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
