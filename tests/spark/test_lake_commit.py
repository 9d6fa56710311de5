"""The lake commit protocol with plain pyiceberg and pyarrow (no Spark) on the embedded AWS:
Glue catalog and S3 of moto's server over HTTP, the same code path as on AWS."""

from __future__ import annotations

import json
import socket
from dataclasses import replace
from typing import Any

import pytest
from pyiceberg.catalog import load_catalog
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.types import LongType, NestedField, StringType

import shardlog.lake.commit as lake_commit
from shardlog import constants as C
from shardlog.config import ShardlogConfig
from shardlog.lake.catalog import COMMIT_RETRIES_PROPERTY, open_table
from shardlog.lake.commit import (
    WATERMARKS_PROPERTY,
    LakeAppend,
    append,
    snapshot_watermarks,
    table_watermarks,
)
from shardlog.lake.exceptions import (
    CatalogUnavailableError,
    LakeCommitUnknownError,
    LakeConflictError,
    LakeError,
    LakeSchemaError,
)
from shardlog.lake.settings import LakeSettings
from tests.spark.helpers import batch_of, data_objects, lake_rows, log_rows, unique_lake
from tests.support.aws import AwsEnv
from tests.support.factories import incoming_records, writer_for
from tests.support.faults import LostAnswer

P0, P1 = "shardId-000000000000", "shardId-000000000001"
DAY_MS = 86_400_000


@pytest.fixture
def log(aws: AwsEnv, clock: Any) -> AwsEnv:
    writer = writer_for(aws, clock, segment_max_records=50)
    writer.append(P0, incoming_records(130, start=0))
    writer.append(P1, incoming_records(60, start=1000, keys=("q0", "q1", "q2")))
    return aws


@pytest.fixture
def lake(aws: AwsEnv) -> LakeSettings:
    return unique_lake(aws)


def test_the_table_is_created_as_shardlog_needs_it(lake: LakeSettings) -> None:
    table = open_table(lake, create=True)
    assert table.properties[COMMIT_RETRIES_PROPERTY] == "0"  # see shardlog.lake.commit
    assert [f.name for f in table.schema().fields][:3] == ["partition_id", "seq", "partition_key"]
    assert table.schema().identifier_field_names() == {"partition_id", "seq"}
    assert str(table.spec().fields[0].transform) == "day"
    assert [table.schema().find_column_name(f.source_id) for f in table.sort_order().fields] == [
        "partition_id",
        "seq",
    ]
    assert table.location() == f"s3://{lake.bucket}/lake/{lake.database}/events"
    assert table.current_snapshot() is None and table_watermarks(table) == {}


def test_one_snapshot_holds_the_files_and_the_watermarks(log: AwsEnv, lake: LakeSettings) -> None:
    table = open_table(lake, create=True)
    result = append(table, batch_of(log, lake, {P0: (0, 130), P1: (0, 60)}))
    assert result.watermarks == {P0: 130, P1: 60} and result.attempts == 1
    (snapshot,) = table.refresh().snapshots()
    assert snapshot.snapshot_id == result.snapshot_id
    assert snapshot_watermarks(snapshot) == {P0: 130, P1: 60}
    assert lake_rows(lake) == log_rows(log)
    # The watermark equals the rows in the table, per partition.
    counts = table.scan().to_arrow().group_by("partition_id").aggregate([("seq", "count")])
    held = dict(
        zip(counts["partition_id"].to_pylist(), counts["seq_count"].to_pylist(), strict=True)
    )
    assert held == {P0: 130, P1: 60}


def test_the_next_append_continues_from_the_table(log: AwsEnv, lake: LakeSettings) -> None:
    table = open_table(lake, create=True)
    append(table, batch_of(log, lake, {P0: (0, 100)}))
    result = append(table, batch_of(log, lake, {P0: (100, 130), P1: (0, 60)}))
    assert result.watermarks == {P0: 130, P1: 60}
    assert lake_rows(lake) == log_rows(log)
    with pytest.raises(LakeConflictError, match=f"{P0} is at 130, not 100"):
        append(table, batch_of(log, lake, {P0: (100, 130)}))  # a replay: refused
    assert lake_rows(lake) == log_rows(log)


def test_two_racing_runs_only_one_lands(
    log: AwsEnv, lake: LakeSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both runs plan the same batch on the empty table; the first commits after the second
    has read the watermarks and before the second commits. The second's commit is refused
    (stale base), it re-reads, finds its batch stale and commits nothing: never both."""
    open_table(lake, create=True)
    first, second = open_table(lake), open_table(lake)  # two drivers, each its own Table
    ranges = {P0: (0, 130), P1: (0, 60)}
    batch_a, batch_b = batch_of(log, lake, ranges), batch_of(log, lake, ranges)
    original, calls = lake_commit.stale_partitions, []

    def racing(marks: Any, batch: LakeAppend) -> list[str]:
        calls.append(batch.run_id)
        if batch is batch_b and len(calls) == 1:
            append(first, batch_a)  # lands between the second's read and its commit
        return original(marks, batch)

    monkeypatch.setattr(lake_commit, "stale_partitions", racing)
    with pytest.raises(LakeConflictError) as lost:
        append(second, batch_b)
    assert calls == [batch_b.run_id, batch_a.run_id, batch_b.run_id]  # b re-checked
    assert set(lost.value.partitions) == {P0, P1}
    assert lake_rows(lake) == log_rows(log)  # every record exactly once
    assert len(open_table(lake).snapshots()) == 1


def lake_objects(aws: AwsEnv, lake: LakeSettings) -> set[str]:
    """Every object under the table's location: data, manifests, metadata."""
    pages = aws.clients.s3.get_paginator("list_objects_v2").paginate(
        Bucket=lake.bucket, Prefix=lake.key_prefix
    )
    return {o["Key"] for page in pages for o in page.get("Contents", [])}


def test_a_lost_commit_answer_is_recognised_as_landed(log: AwsEnv, lake: LakeSettings) -> None:
    """Glue applies the commit's UpdateTable, the answer is lost, botocore resends it and
    Glue refuses the resend (its VersionId is no longer current): pyiceberg reports a
    refused commit for a commit that landed. The append finds its own snapshot by its run
    id and reports it committed; nothing is deleted and the table stays readable."""
    table = open_table(lake, create=True)
    append(table, batch_of(log, lake, {P0: (0, 50)}))
    batch = batch_of(log, lake, {P0: (50, 130), P1: (0, 60)})
    before = lake_objects(log, lake)
    lost = LostAnswer(table.catalog.glue, "UpdateTable")  # type: ignore[attr-defined]
    lost.arm(1)
    result = append(table, batch)
    assert (lost.lost, lost.resent) == (1, 1)  # applied, answer lost, resend refused
    assert result.watermarks == {P0: 130, P1: 60} and result.attempts == 1
    landed = open_table(lake).current_snapshot()
    assert landed is not None and landed.snapshot_id == result.snapshot_id
    assert landed.summary[lake_commit.RUN_PROPERTY] == batch.run_id  # type: ignore[index]
    assert before <= lake_objects(log, lake)  # nothing deleted
    assert lake_rows(lake) == log_rows(log)  # readable, each record once
    with pytest.raises(LakeConflictError):  # and the batch is in: a replay is refused
        append(open_table(lake), batch_of(log, lake, {P0: (50, 130)}))


def test_every_answer_lost_the_append_reads_the_table_to_find_out(
    log: AwsEnv, lake: LakeSettings
) -> None:
    """Every answer to the commit's UpdateTable is lost (botocore gives up): the append does
    not know what happened, reads the table, and finds its snapshot there."""
    table = open_table(lake, create=True)
    batch = batch_of(log, lake, {P0: (0, 130)})
    lost = LostAnswer(table.catalog.glue, "UpdateTable")  # type: ignore[attr-defined]
    lost.arm(100)
    result = append(table, batch)
    assert lost.lost == 11 and result.watermarks == {P0: 130}  # pyiceberg's 11 attempts
    assert lake_rows(lake) == [r for r in log_rows(log) if r[0] == P0]


def test_an_outcome_that_cannot_be_found_out_is_unknown_and_deletes_nothing(
    log: AwsEnv, lake: LakeSettings
) -> None:
    """The commit's answer is lost and then the catalog cannot be read either: the outcome
    is unknown, the append says so (not "refused": the caller must not delete its files),
    and nothing is deleted; the next run finds out from the table."""
    table = open_table(lake, create=True)
    batch = batch_of(log, lake, {P0: (0, 130)})
    before = lake_objects(log, lake)
    glue = table.catalog.glue  # type: ignore[attr-defined]
    lost_reads = LostAnswer(glue, "GetTable")
    lost = LostAnswer(glue, "UpdateTable")
    lost.arm(100, between=lambda: lost_reads.arm(1000))  # no read reaches it from now on
    with pytest.raises(
        LakeCommitUnknownError, match=f"the outcome of the commit to {lake.table} is unknown"
    ) as unknown:
        append(table, batch)
    assert not isinstance(unknown.value, LakeConflictError)
    lost_reads.disarm()
    assert before <= lake_objects(log, lake)
    assert lake_rows(lake) == [r for r in log_rows(log) if r[0] == P0]  # it had landed


def test_a_stale_table_object_with_pyiceberg_retries_would_land_twice(
    log: AwsEnv, lake: LakeSettings
) -> None:
    """The trap, shown: with pyiceberg's default retries a raw add_files on a stale Table
    re-applies onto the concurrent snapshot, so shardlog refuses such a table."""
    table = open_table(lake, create=True)
    with table.transaction() as transaction:
        transaction.set_properties({COMMIT_RETRIES_PROPERTY: "4"})
    stale = open_table(lake)
    # open_table put the property back; undo that behind its back, as another tool might.
    with stale.transaction() as transaction:
        transaction.set_properties({COMMIT_RETRIES_PROPERTY: "4"})
    with pytest.raises(LakeError, match=r"commit\.retry\.num-retries=4"):
        append(stale, batch_of(log, lake, {P0: (0, 130)}))
    assert open_table(lake).scan().to_arrow().num_rows == 0


def test_files_that_were_never_committed_are_never_read(log: AwsEnv, lake: LakeSettings) -> None:
    table = open_table(lake, create=True)
    batch_of(log, lake, {P0: (0, 130)})  # a run that crashed before its commit
    assert data_objects(log, lake) and table.refresh().scan().to_arrow().num_rows == 0
    append(table, batch_of(log, lake, {P0: (0, 130), P1: (0, 60)}))
    assert lake_rows(lake) == log_rows(log)


def test_records_of_two_days_go_to_two_partitions(
    aws: AwsEnv, clock: Any, lake: LakeSettings
) -> None:
    writer = writer_for(aws, clock)
    end_of_day = 1_700_006_400_000 - 2  # 2023-11-15T00:00:00Z minus 2 ms
    writer.append(P0, incoming_records(4, start=0, arrival_ms=end_of_day))
    table = open_table(lake, create=True)
    append(table, batch_of(aws, lake, {P0: (0, 4)}))
    days = sorted(str(task.file.partition[0]) for task in table.scan().plan_files())
    assert len(days) == 2 and days[1] == str(int(days[0]) + 1)  # days since epoch
    assert sorted(data_objects(aws, lake))[0].split("/")[-2] == "arrival_day=2023-11-14"


def test_a_table_with_other_columns_is_refused(aws: AwsEnv, lake: LakeSettings) -> None:
    catalog = load_catalog(lake.catalog_name, **lake.properties)
    catalog.create_namespace_if_not_exists(lake.database)
    catalog.create_table(
        lake.table,
        Schema(
            NestedField(1, "partition_id", StringType(), required=True),
            NestedField(2, "seq", StringType(), required=True),
            NestedField(3, "tenant", LongType(), required=True),
        ),
        location=lake.location,
    )
    with pytest.raises(LakeSchemaError) as refused:
        open_table(lake, create=True)
    message = str(refused.value)
    assert f"table {lake.table} is not a shardlog lake table" in message
    assert "column seq is string required, expected long required" in message
    assert "missing column data" in message and "unexpected required column tenant" in message


@pytest.mark.usefixtures("glue_answers_at_once")
def test_an_unreachable_catalog_is_a_clear_error(lake: LakeSettings) -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{probe.getsockname()[1]}"
    nowhere = replace(lake, properties={**lake.properties, "glue.endpoint": closed})
    with pytest.raises(CatalogUnavailableError, match=f"lake catalog shardlog \\({closed}\\)"):
        open_table(nowhere, create=True)


def test_a_user_opens_the_table_with_plain_load_catalog(
    log: AwsEnv, lake: LakeSettings, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The state file's ``lake`` entry is all a pyiceberg user needs."""
    monkeypatch.delenv(C.ENV_LAKE_TABLE)  # the state file, not the environment, names it
    table = open_table(lake, create=True)
    append(table, batch_of(log, lake, {P0: (0, 130), P1: (0, 60)}))
    state = tmp_path / "local.json"
    replace(log.config, extra={"lake": lake.to_json()}).write(state)

    entry = json.loads(state.read_text())["lake"]
    user_table: Table = load_catalog(entry["catalog"], **entry["properties"]).load_table(
        entry["table"]
    )
    assert user_table.scan().to_arrow().num_rows == 190
    summary = user_table.current_snapshot().summary  # type: ignore[union-attr]
    assert json.loads(summary[WATERMARKS_PROPERTY]) == {P0: 130, P1: 60}
    assert LakeSettings.from_config(ShardlogConfig.resolve(state)) == lake
