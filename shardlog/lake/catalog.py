"""Opening (and, for the compaction job, creating) the lake table through its catalog.

Every catalog failure leaves here as ``CatalogUnavailableError`` (could not talk to it) or
``LakeSchemaError`` (reached it, but the table is not shardlog's), with the cause kept.
The table is created with the properties the commit protocol relies on
(``shardlog.lake.commit``): pyiceberg's own commit retry off, and a name mapping, so the
executors' Parquet files (plain pyarrow, no field ids) are read by column name.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from botocore.exceptions import BotoCoreError, ClientError

from shardlog.aws import new_botocore_session
from shardlog.lake.exceptions import CatalogUnavailableError, LakeSchemaError, NoLakeTableError
from shardlog.lake.schema import EVENTS, TableSchema
from shardlog.lake.settings import LakeSettings

if TYPE_CHECKING:  # pragma: no cover
    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table

# pyiceberg 0.12 re-applies an append to a concurrent snapshot by itself on a failed commit
# (default: 4 retries): two racing compactions would both land. Retries are shardlog's, in
# shardlog.lake.commit, after the watermark re-check.
COMMIT_RETRIES_PROPERTY = "commit.retry.num-retries"
NAME_MAPPING_PROPERTY = "schema.name-mapping.default"
TABLE_PROPERTIES = {
    COMMIT_RETRIES_PROPERTY: "0",
    "write.parquet.compression-codec": "zstd",
    "format-version": "2",
}
# What "could not reach the catalog" looks like from botocore (Glue) and SQLAlchemy (SQL).
_UNREACHABLE: tuple[type[BaseException], ...] = (BotoCoreError, ClientError, OSError)


def load_lake_catalog(settings: LakeSettings) -> Catalog:
    from pyiceberg.catalog import BOTOCORE_SESSION, load_catalog

    properties: dict[str, Any] = dict(settings.properties)
    if properties.get("type") == "glue":  # its Glue client on the process's service models
        properties[BOTOCORE_SESSION] = new_botocore_session()
    try:
        return load_catalog(settings.catalog_name, **properties)
    except _UNREACHABLE as exc:
        raise _unreachable(settings, exc) from exc


def open_table(
    settings: LakeSettings,
    *,
    create: bool = False,
    schema: TableSchema = EVENTS,
    evolve: Callable[[Table], object] | None = None,
) -> Table:
    """The lake table, checked to have the declared shape; created first (in that shape)
    when ``create`` is set; ``evolve`` brings an existing table's schema to the shape
    first (a declared table: ``shardlog.lake.evolution``)."""
    from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

    catalog = load_lake_catalog(settings)
    try:
        try:
            table = catalog.load_table(settings.table)
        except (NoSuchTableError, NoSuchNamespaceError) as exc:
            if not create:
                raise NoLakeTableError(
                    f"no lake table {settings.table} yet: run `shardlog spark run compact` first"
                ) from exc
            table = _create(catalog, settings, schema)
        if evolve is not None:
            evolve(table)
        _check(table, settings, schema)
        return _with_protocol_properties(table)
    except _UNREACHABLE as exc:
        raise _unreachable(settings, exc) from exc


def metadata_location(settings: LakeSettings) -> str | None:
    """The table's current metadata file (what another engine reads the table from), or
    None when the table does not exist yet."""
    from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

    try:
        return str(load_lake_catalog(settings).load_table(settings.table).metadata_location)
    except (NoSuchTableError, NoSuchNamespaceError):
        return None
    except _UNREACHABLE as exc:
        raise _unreachable(settings, exc) from exc


def _create(catalog: Catalog, settings: LakeSettings, schema: TableSchema) -> Table:
    from pyiceberg.exceptions import NoSuchNamespaceError

    try:  # on AWS the stack creates the database: the job's role may not (CreateDatabase)
        catalog.load_namespace_properties(settings.database)
    except NoSuchNamespaceError:
        catalog.create_namespace_if_not_exists(settings.database)
    return catalog.create_table_if_not_exists(
        settings.table,
        schema=schema.iceberg(),
        location=settings.location,
        partition_spec=schema.partition_spec(),
        sort_order=schema.sort_order(),
        properties=TABLE_PROPERTIES,
    )


def _check(table: Table, settings: LakeSettings, schema: TableSchema) -> None:
    schema.check(table.schema(), settings.table)
    if settings.location and table.location().rstrip("/") != settings.location.rstrip("/"):
        raise LakeSchemaError(
            f"table {settings.table} lives at {table.location()}, not {settings.location}: "
            "another deployment's table"
        )


def _with_protocol_properties(table: Table) -> Table:
    """Switch pyiceberg's commit retry off and set the name mapping, if not yet."""
    wanted = {COMMIT_RETRIES_PROPERTY: "0"}
    if NAME_MAPPING_PROPERTY not in table.properties:
        wanted[NAME_MAPPING_PROPERTY] = table.schema().name_mapping.model_dump_json()
    if all(table.properties.get(k) == v for k, v in wanted.items()):
        return table
    with table.transaction() as transaction:
        transaction.set_properties(wanted)
    return table.refresh()


def _unreachable(settings: LakeSettings, exc: BaseException) -> CatalogUnavailableError:
    where = settings.properties.get("glue.endpoint") or settings.properties.get("uri")
    where = where or f"Glue in {settings.properties.get('glue.region', 'the default region')}"
    return CatalogUnavailableError(
        f"lake catalog {settings.catalog_name} ({where}) unreachable for {settings.table}: "
        f"{type(exc).__name__}: {exc}"
    )
