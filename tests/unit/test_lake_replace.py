"""The backfill's swap picks the files it replaces by their names (``shardlog.lake.replace``):
those wholly below the bound go, those at or above it stay, one across it or not named as
shardlog names them is refused."""

from __future__ import annotations

import pytest
from pyiceberg.manifest import DataFile

from shardlog.lake.exceptions import LakeSchemaError
from shardlog.lake.files import data_file_key
from shardlog.lake.replace import file_range, replaced

P0 = "shardId-000000000000"


def data_file(first: int, last: int, partition: str = P0) -> DataFile:
    key = data_file_key("lake/db/t/", partition, "2026-11-26", first, last, "abcdef0123456789")
    return DataFile.from_args(file_path=f"s3://bucket/{key}")


def test_a_file_name_says_its_partition_and_seqs() -> None:
    assert file_range(data_file(20, 39).file_path) == (P0, 20, 39)


def test_files_wholly_below_the_bound_are_replaced_the_others_kept() -> None:
    files = [data_file(0, 19), data_file(20, 39), data_file(40, 59), data_file(0, 9, "p1")]
    assert replaced(files, {P0: 40}) == files[:2]  # p1 has no bound: 0, kept
    assert replaced(files, {P0: 40, "p1": 10}) == [*files[:2], files[3]]
    assert replaced(files, {}) == []


def test_a_file_across_the_bound_or_of_another_engine_is_refused() -> None:
    with pytest.raises(LakeSchemaError, match=r"seqs 20\.\.39 across the backfill's bound 30"):
        replaced([data_file(20, 39)], {P0: 30})
    with pytest.raises(LakeSchemaError, match="not named as shardlog names them"):
        replaced([DataFile.from_args(file_path="s3://b/data/00000-0-x.parquet")], {P0: 1})
