"""`shardlog lake sql` against the embedded AWS: DuckDB's own Iceberg reader (not pyiceberg)
reads the raw table and the declared typed tables from the Glue catalog's metadata files and
the files in S3, offline; its errors are one line; its limits hold at and past their edges."""

from __future__ import annotations

import base64
import json
import sys
from dataclasses import replace
from decimal import Decimal
from typing import Any

import pytest

from shardlog import constants as C
from shardlog.format import IncomingRecord
from shardlog.lake.catalog import open_table
from shardlog.lake.declared import parse_lake_tables
from shardlog.lake.sql import LakeSqlError, connect
from shardlog.local.kinesis_fidelity import SEQUENCE_BASE
from shardlog.spark.jobs import JobArgs
from shardlog.spark.typed import TypedTables, compact_typed

# The raw table of 150 records (P0: 100, P1: 50), compacted without Spark.
from tests.spark.test_lake_query import lake  # noqa: F401  (a fixture)
from tests.support.aws import AwsEnv
from tests.support.cli import run_cli
from tests.support.factories import writer_for

P0, P1 = "shardId-000000000000", "shardId-000000000001"


def sql(aws: AwsEnv, statement: str, *options: str) -> Any:
    return run_cli(aws, "lake", "sql", statement, *options)


def rows(result: Any) -> list[dict[str, Any]]:
    assert result.exit_code == 0, result.output
    return [json.loads(line) for line in result.output.splitlines() if line.startswith("{")]


def error_line(result: Any) -> str:
    """The one line a user's mistake gets: exit 2, no traceback."""
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    return lines[0]


@pytest.mark.usefixtures("lake")
def test_duckdb_reads_the_raw_table_as_pyiceberg_does(aws: AwsEnv) -> None:
    found = rows(
        sql(
            aws,
            "SELECT partition_key AS k, count(*) AS n FROM events GROUP BY 1 ORDER BY 1",
            "--json",
        )
    )
    assert found == [{"k": "a", "n": 50}, {"k": "b", "n": 50}, {"k": "c", "n": 50}]
    pyiceberg = open_table(JobArgs.from_config(aws.config).lake()).scan().to_arrow().to_pylist()
    duck = rows(sql(aws, "SELECT partition_id, seq, data FROM events", "--json"))
    assert sorted(
        (r["partition_id"], r["seq"], base64.b64decode(r["data"])) for r in duck
    ) == sorted((r["partition_id"], r["seq"], r["data"]) for r in pyiceberg)
    text = sql(
        aws, f"SELECT seq, data FROM events WHERE partition_id = '{P1}' AND seq < 2 ORDER BY seq"
    )
    assert text.exit_code == 0, text.output
    assert text.output.splitlines() == ["seq  data", "0    c:0", "1    c:1", "(2 rows)"]


@pytest.mark.usefixtures("lake")
def test_limit_at_and_past_its_edges(aws: AwsEnv) -> None:
    one = sql(aws, "SELECT seq FROM events ORDER BY seq", "--json", "--limit", "1")
    assert len(rows(one)) == 1 and "only the first 1 rows" in one.output
    whole = sql(aws, "SELECT seq FROM events", "--json", "--limit", "150")
    assert len(rows(whole)) == 150 and "only the first" not in whole.output
    top = sql(aws, "SELECT 1 AS x", "--limit", str(C.LAKE_QUERY_MAX_LIMIT))
    assert top.exit_code == 0, top.output
    for refused in ("0", str(C.LAKE_QUERY_MAX_LIMIT + 1)):
        result = sql(aws, "SELECT 1", "--limit", refused)
        assert result.exit_code == 2 and "--limit" in result.output, result.output


@pytest.mark.parametrize(
    ("statement", "message"),
    [
        ("SELEC 1", "DuckDB refused the statement: Parser Error"),
        ("SELECT * FROM nosuch", "Table with name nosuch does not exist"),
        ("   ", "the SQL statement is empty"),
    ],
)
@pytest.mark.usefixtures("lake")
def test_a_bad_statement_is_one_line(aws: AwsEnv, statement: str, message: str) -> None:
    assert message in error_line(sql(aws, statement))


def test_no_lake_table_yet_says_what_to_run(aws: AwsEnv) -> None:
    assert "shardlog spark run compact" in error_line(sql(aws, "SELECT 1"))


def test_without_duckdb_the_error_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "duckdb", None)  # `import duckdb` raises ImportError
    with pytest.raises(LakeSqlError, match=r"pip install 'shardlog\[duckdb\]'"):
        connect({})


ORDERS = parse_lake_tables(
    [
        {
            "name": "orders",
            "schema": {
                "type": "object",
                "required": ["orderId"],
                "properties": {
                    "orderId": {"type": "string"},
                    "amount": {"type": "number", "format": "decimal", "precision": 10, "scale": 2},
                    "n": {"type": "integer"},
                },
            },
        }
    ],
    "test",
)


def test_duckdb_reads_a_typed_table_and_its_dead_letter_table(
    spark: Any, aws: AwsEnv, clock: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    payloads = [
        b"not json"
        if i % 5 == 4
        else json.dumps({"orderId": f"o-{i}", "amount": i + 0.5, "n": i}).encode()
        for i in range(40)
    ]
    records = [
        IncomingRecord(f"k{i % 3}", p, str(SEQUENCE_BASE + i), 1_700_000_000_000 + i)
        for i, p in enumerate(payloads)
    ]
    writer_for(aws, clock, segment_max_records=25).append(P0, records)
    args = replace(JobArgs.from_config(aws.config), lake_tables=json.dumps(ORDERS.to_json()))
    compact_typed(spark, aws.clients, args, ORDERS.tables[0], "d" * 16)
    monkeypatch.setenv(C.ENV_LAKE_TABLES, args.lake_tables)  # as a deployment's CLI sees it

    typed = rows(sql(aws, "SELECT seq, order_id, amount, n FROM orders ORDER BY seq", "--json"))
    good = [i for i in range(40) if i % 5 != 4]
    assert [(r["seq"], r["order_id"], Decimal(r["amount"]), r["n"]) for r in typed] == [
        (i, f"o-{i}", Decimal(f"{i}.50"), i) for i in good
    ]
    typed_table, _ = TypedTables.beside(args.lake(), ORDERS.tables[0]).open(create=False)
    assert len(typed) == typed_table.scan().to_arrow().num_rows  # the engines agree
    rejected = rows(sql(aws, "SELECT seq, data FROM orders_rejected ORDER BY seq", "--json"))
    assert [(r["seq"], base64.b64decode(r["data"])) for r in rejected] == [
        (i, b"not json") for i in range(40) if i % 5 == 4
    ]
    # The raw table is not compacted here: only the tables that exist are views.
    assert "events does not exist" in error_line(sql(aws, "SELECT count(*) FROM events"))
