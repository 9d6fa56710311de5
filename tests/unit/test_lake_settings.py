"""Where the lake table lives: identifiers, locations and load_catalog properties."""

from __future__ import annotations

import pytest

from shardlog.config import LOCAL_CREDENTIALS
from shardlog.lake.settings import LakeSettings


def test_a_deployment_table_sits_beside_the_log_in_the_glue_catalog() -> None:
    lake = LakeSettings.for_deployment("logs", "eu-west-1", None, "analytics.events")
    assert (lake.database, lake.bucket, lake.key_prefix) == (
        "analytics",
        "logs",
        "lake/analytics/events/",
    )
    assert lake.location == "s3://logs/lake/analytics/events"
    assert lake.properties == {"type": "glue", "glue.region": "eu-west-1", "s3.region": "eu-west-1"}


def test_the_embedded_aws_gets_endpoints_and_only_the_local_keys() -> None:
    lake = LakeSettings.for_deployment("logs", "us-east-1", "http://127.0.0.1:4566")
    assert lake.table == "shardlog.events"
    assert lake.properties["glue.endpoint"] == lake.properties["s3.endpoint"]
    assert lake.properties["s3.access-key-id"] == LOCAL_CREDENTIALS[0]
    assert LakeSettings.from_json(lake.to_json()) == lake


@pytest.mark.parametrize("table", ["events", ".events", "shardlog.", "a.b.c", ""])
def test_a_table_identifier_must_be_database_dot_table(table: str) -> None:
    with pytest.raises(ValueError, match=r"<database>\.<table>"):
        LakeSettings.for_deployment("logs", table=table or ".")
