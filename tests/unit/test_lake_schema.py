"""The lake table's shape is declared once (``shardlog.lake.schema.EVENTS``) and every other
shape is derived from it: a new column is one declaration plus its mapper.

The derived shapes are first pinned to what was written by hand before the declaration
existed (so deriving them changed nothing), then a copy of the declaration gains a column
and each shape is shown to gain it: the Iceberg schema, the Arrow schema, the Spark schema,
the data files, a table created in a catalog (pyiceberg's SQL catalog on a local
directory), its query and the query's JSON rows.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.transforms import DayTransform
from pyiceberg.types import (
    BinaryType,
    ListType,
    LongType,
    NestedField,
    StringType,
    TimestamptzType,
    UUIDType,
)

from shardlog.format import LogRecord, Segment
from shardlog.lake.catalog import open_table
from shardlog.lake.exceptions import LakeSchemaError
from shardlog.lake.files import EVENT_RECORDS, SegmentMapping, parquet_bytes
from shardlog.lake.query import LakeQuery, json_rows, query_table
from shardlog.lake.schema import EVENTS, Column, PartitionBy, TableSchema
from shardlog.lake.settings import LakeSettings
from shardlog.spark.io import RECORD_SCHEMA

UTC_MICROS = pa.timestamp("us", tz="UTC")
# The shapes as they were written by hand, before the one declaration.
HAND_WRITTEN_ARROW = pa.schema(
    [
        pa.field("partition_id", pa.string(), nullable=False),
        pa.field("seq", pa.int64(), nullable=False),
        pa.field("partition_key", pa.string(), nullable=False),
        pa.field("data", pa.binary(), nullable=False),
        pa.field("kinesis_sequence_number", pa.string(), nullable=False),
        pa.field("arrival_time", UTC_MICROS, nullable=False),
        pa.field("committed_at", UTC_MICROS, nullable=False),
        pa.field("record_id", pa.string(), nullable=True),
    ]
)
HAND_WRITTEN_SPARK = (
    "partition_id string, seq long, partition_key string, data binary, "
    "kinesis_sequence_number string, arrival_time timestamp, committed_at timestamp, "
    "record_id string"
)
HAND_WRITTEN_JSON_KEYS = [
    "partitionId",
    "seq",
    "partitionKey",
    "data",
    "kinesisSequenceNumber",
    "arrivalTime",
    "committedAt",
    "recordId",
]
NEW = Column(9, "producer_region", StringType(), False, "the region the producer wrote from")
ARRIVAL_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z


def region_of(segment: Segment) -> list[str | None]:
    """The new column's mapper: the one other edit a new column needs."""
    return [f"region-of-{r.partition_key}" for r in segment.records]


def segment(partition_id: str = "shardId-0", count: int = 3) -> Segment:
    records = tuple(
        LogRecord(
            partition_id,
            seq,
            f"k{seq}",
            b"\x00" + bytes([seq]),
            str(1000 + seq),
            ARRIVAL_MS + seq,
            record_id=None if seq % 2 else f"id-{seq}",
        )
        for seq in range(count)
    )
    return Segment(partition_id, 0, ARRIVAL_MS + 5_000, records)


def test_the_raw_tables_shapes_are_those_written_by_hand_before() -> None:
    assert EVENTS.arrow() == HAND_WRITTEN_ARROW
    assert EVENTS.spark_ddl() == RECORD_SCHEMA == HAND_WRITTEN_SPARK
    iceberg = EVENTS.iceberg()
    assert [(f.field_id, f.name, f.required) for f in iceberg.fields] == [
        (i, name, name != "record_id") for i, name in enumerate(HAND_WRITTEN_ARROW.names, 1)
    ]
    assert iceberg.identifier_field_ids == [1, 2]
    spec = EVENTS.partition_spec().fields
    assert [(f.source_id, f.field_id, f.name) for f in spec] == [(6, 1000, "arrival_day")]
    assert isinstance(spec[0].transform, DayTransform)
    assert [f.source_id for f in EVENTS.sort_order().fields] == [1, 2]
    assert [f.name for f in EVENTS.spark_struct().fields] == HAND_WRITTEN_ARROW.names


def test_a_new_column_is_its_declaration_and_its_mapper(tmp_path: Path) -> None:
    mapping = EVENT_RECORDS.with_column(NEW, region_of)
    wider = mapping.schema
    assert EVENTS.names == tuple(HAND_WRITTEN_ARROW.names)  # a copy: the original unchanged

    assert wider.iceberg().find_field(9) == NestedField(
        9, "producer_region", StringType(), required=False, doc=NEW.doc
    )
    assert wider.arrow().field("producer_region") == pa.field("producer_region", pa.string())
    assert wider.spark_ddl() == HAND_WRITTEN_SPARK + ", producer_region string"
    assert wider.spark_struct()["producer_region"].dataType.typeName() == "string"
    assert wider.partition_spec() == EVENTS.partition_spec()
    assert wider.sort_order() == EVENTS.sort_order()

    records = mapping.records(segment())
    assert records.column("producer_region").to_pylist() == [
        "region-of-k0",
        "region-of-k1",
        "region-of-k2",
    ]
    written = pq.read_table(pa.BufferReader(parquet_bytes(pa.Table.from_batches([records]), wider)))
    assert written.schema == wider.arrow()

    lake = sql_catalog_table(tmp_path)
    table = open_table(lake, create=True, schema=wider)
    assert table.schema().find_field("producer_region").field_id == 9
    data_file = tmp_path / "data.parquet"
    data_file.write_bytes(parquet_bytes(pa.Table.from_batches([records]), wider))
    table.add_files([str(data_file)])
    rows = query_table(table.refresh(), LakeQuery(partition_keys=("k1",)), wider)
    assert rows.schema == wider.arrow()
    assert rows.column("producer_region").to_pylist() == ["region-of-k1"]
    [row] = json_rows(rows, wider)
    assert list(row) == [*HAND_WRITTEN_JSON_KEYS, "producerRegion"]
    assert row["producerRegion"] == "region-of-k1"

    # The raw declaration opens that table (one more optional column is allowed); the wider
    # one refuses a raw table, naming the column.
    open_table(lake, schema=EVENTS)
    raw = sql_catalog_table(tmp_path, "lake.raw")
    open_table(raw, create=True)
    with pytest.raises(LakeSchemaError, match="missing column producer_region"):
        open_table(raw, schema=wider)


def test_json_rows_keep_the_documented_vocabulary() -> None:
    rows = pa.Table.from_batches([EVENT_RECORDS.records(segment(count=2))])
    first, second = json_rows(rows)
    assert first == {
        "partitionId": "shardId-0",
        "seq": 0,
        "partitionKey": "k0",
        "data": "AAA=",
        "kinesisSequenceNumber": "1000",
        "arrivalTime": "2026-01-01T00:00:00.000Z",
        "committedAt": "2026-01-01T00:00:05.000Z",
        "recordId": "id-0",
    }
    assert (second["arrivalTime"], second["recordId"]) == ("2026-01-01T00:00:00.001Z", None)


def test_a_declared_column_without_a_mapper_and_a_mapper_without_a_column_are_refused() -> None:
    with pytest.raises(LakeSchemaError, match="column producer_region has no mapper"):
        SegmentMapping(EVENTS.with_column(NEW), EVENT_RECORDS.mappers)
    with pytest.raises(LakeSchemaError, match="mapper producer_region fills no declared column"):
        SegmentMapping(EVENTS, {**EVENT_RECORDS.mappers, "producer_region": region_of})


@pytest.mark.parametrize(
    ("column", "message"),
    [
        (Column(2, "extra", StringType(), False, ""), "field id 2 declared 2 times"),
        (Column(9, "seq", LongType(), True, ""), "column name seq declared 2 times"),
    ],
)
def test_a_column_clashing_with_a_declared_one_is_refused(column: Column, message: str) -> None:
    with pytest.raises(LakeSchemaError, match=message):
        EVENTS.with_column(column)


@pytest.mark.parametrize(
    ("field_id", "accepted"), [(0, False), (1, True), (999, True), (1000, False)]
)
def test_field_ids_stay_below_the_partition_fields(field_id: int, accepted: bool) -> None:
    def declare() -> Column:
        return Column(field_id, "extra", StringType(), False, "")

    if accepted:
        assert declare().field_id == field_id
    else:
        with pytest.raises(
            LakeSchemaError, match=f"column extra: field id must be 1..999, not {field_id}"
        ):
            declare()


@pytest.mark.parametrize("name", ["Extra", "9lives", "with-dash", "_lead", ""])
def test_a_column_name_every_engine_takes_unquoted(name: str) -> None:
    with pytest.raises(LakeSchemaError, match="column name"):
        Column(9, name, StringType(), False, "")


def test_a_type_without_an_arrow_and_spark_shape_is_refused() -> None:
    with pytest.raises(LakeSchemaError, match=r"column amount: type uuid is not one of"):
        Column(9, "amount", UUIDType(), False, "")
    with pytest.raises(LakeSchemaError, match=r"column amount: type list<uuid> is not one of"):
        Column(9, "amount", ListType(10, UUIDType()), False, "")


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (
            {"identifier": ("partition_id", "record_id")},
            "identifier column record_id must be required",
        ),
        ({"sort_by": ("nowhere",)}, "sort column nowhere is not declared"),
        (
            {"partition": PartitionBy("record_id", DayTransform(), "day")},
            "partition column record_id must be required",
        ),
    ],
)
def test_identifier_partition_and_sort_columns_must_be_declared_and_required(
    changes: dict[str, Any], message: str
) -> None:
    fields = {
        "columns": EVENTS.columns,
        "identifier": EVENTS.identifier,
        "partition": EVENTS.partition,
        "sort_by": EVENTS.sort_by,
    }
    with pytest.raises(LakeSchemaError, match=message):
        TableSchema(**(fields | changes))


def test_a_column_of_another_type_or_nullability_is_named() -> None:
    changed = TableSchema(
        tuple(
            Column(c.field_id, c.name, BinaryType(), c.required, c.doc)
            if c.name == "partition_key"
            else c
            for c in EVENTS.columns
        ),
        EVENTS.identifier,
        EVENTS.partition,
        EVENTS.sort_by,
    )
    with pytest.raises(
        LakeSchemaError,
        match="table t_e is not a shardlog lake table: column partition_key is binary required, "
        "expected string required",
    ):
        EVENTS.check(changed.iceberg(), "t_e")
    assert isinstance(EVENTS.column("arrival_time").kind, TimestamptzType)


def sql_catalog_table(tmp_path: Path, identifier: str = "lake.events") -> LakeSettings:
    """A table in pyiceberg's SQL catalog (SQLite) with its files in a local directory."""
    warehouse = tmp_path / "warehouse"
    warehouse.mkdir(exist_ok=True)
    return LakeSettings(
        table=identifier,
        location=f"file://{warehouse}/{identifier.replace('.', '/')}",
        catalog_name="schema-test",
        properties={
            "type": "sql",
            "uri": f"sqlite:///{tmp_path / 'catalog.db'}",
            "warehouse": f"file://{warehouse}",
        },
    )


def test_the_arrival_time_mapper_keeps_milliseconds() -> None:
    records = EVENT_RECORDS.records(segment(count=2))
    assert records.column("arrival_time").to_pylist() == [
        datetime(2026, 1, 1, tzinfo=UTC),
        datetime(2026, 1, 1, 0, 0, 0, 1000, tzinfo=UTC),
    ]
