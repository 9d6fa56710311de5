"""The smoke test's checks on what it read back, its records, its Athena query and how it
calls the producer API."""

from __future__ import annotations

from datetime import UTC, datetime

import boto3
import pytest

from shardlog import constants as C
from shardlog.aws import Clients
from shardlog.lake.settings import LakeSettings
from shardlog.smoke import SmokeTest
from shardlog.smoke.counts import CountFailed, LakeCount, _parse, count_query
from shardlog.smoke.steps import (
    API,
    KEYS_PER_PATH,
    RECORDS_PER_PATH,
    SDK,
    SmokeRecord,
    _exactly_once,
    smoke_records,
)
from shardlog.stack import REQUIRED_OUTPUTS, DeployedStack

RUN = "20260101T000000-abcdef"
Found = dict[str, list[tuple[str, int, bytes]]]


def read_in_order() -> tuple[dict[str, SmokeRecord], Found]:
    """The API path's records as the log would hold them: one partition, in send order."""
    records = smoke_records(RUN, API)
    wanted = {r.record_id: r for r in records}
    found: Found = {r.record_id: [("p0", seq, r.record.data)] for seq, r in enumerate(records)}
    return wanted, found


def test_records_name_the_run_and_keep_each_path_to_its_own_keys() -> None:
    api, sdk = smoke_records(RUN, API), smoke_records(RUN, SDK)
    assert len(api) == len(sdk) == RECORDS_PER_PATH
    assert len({r.record_id for r in api + sdk}) == 2 * RECORDS_PER_PATH
    api_keys = {r.record.partition_key for r in api}
    assert len(api_keys) == KEYS_PER_PATH
    assert not api_keys & {r.record.partition_key for r in sdk}
    assert all(k.startswith(f"shardlog-smoke-{RUN}-api-") for k in api_keys)
    assert b'"shardlogSmoke": "20260101T000000-abcdef"' in api[0].record.data


def test_every_record_once_in_order_is_clean() -> None:
    wanted, found = read_in_order()
    assert _exactly_once(wanted, found) == []


def test_a_record_read_twice_is_named() -> None:
    wanted, found = read_in_order()
    first = next(iter(found))
    found[first].append(("p0", 99, found[first][0][2]))
    (problem,) = _exactly_once(wanted, found)
    assert problem.startswith(f"1 records in the log more than once, e.g. {first} at")


def test_a_missing_record_is_named() -> None:
    wanted, found = read_in_order()
    last = sorted(found)[-1]
    del found[last]
    (problem,) = _exactly_once(wanted, found)
    assert problem == f"1 of {RECORDS_PER_PATH} records not in the log, e.g. {last}"


def test_other_data_and_another_order_are_named() -> None:
    wanted, found = read_in_order()
    ids = list(found)  # send order: key 0, key 1, key 0, ...
    found[ids[0]], found[ids[2]] = (
        [("p0", 2, found[ids[0]][0][2])],
        [("p0", 0, found[ids[2]][0][2])],
    )
    found[ids[1]] = [("p0", 1, b"tampered")]
    problems = _exactly_once(wanted, found)
    assert problems[0] == f"1 records read back with other data, e.g. {ids[1]}"
    assert problems[1].startswith(f"key shardlog-smoke-{RUN}-api-0 read in the order [1, 0, 2")


def test_the_count_query_and_its_answer() -> None:
    since = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    sql = count_query("shardlog.events", ["a", "o'b"], since)
    assert sql == (
        "SELECT count(*) AS row_count, count(DISTINCT record_id) AS record_ids "
        "FROM \"shardlog\".\"events\" WHERE partition_key IN ('a', 'o''b') "
        "AND arrival_time >= from_iso8601_timestamp('2026-01-02T03:04:05.000000Z')"
    )
    header = {"Data": [{"VarCharValue": "row_count"}, {"VarCharValue": "record_ids"}]}
    row = {"Data": [{"VarCharValue": "20"}, {"VarCharValue": "19"}]}
    count = _parse([header, row], "here")
    assert (count.rows, count.record_ids) == (20, 19)
    with pytest.raises(CountFailed, match="unexpected result"):
        _parse([header], "here")
    with pytest.raises(ValueError, match=r"<database>\.<table>"):
        count_query("events", ["a"], since)


def test_the_api_is_called_signed_in_the_urls_region() -> None:
    """On AWS the producer API takes SigV4 only: the smoke signs with its session's
    credentials, for the region the execute-api URL names."""
    url = "https://abc123.execute-api.eu-west-1.amazonaws.com/prod/"
    outputs = {key: "{}" for key in REQUIRED_OUTPUTS} | {C.OUTPUT_API_URL: url}
    stack = DeployedStack("Shardlog", outputs, region="us-east-1")
    session = boto3.session.Session(
        aws_access_key_id="AKIDEXAMPLE", aws_secret_access_key="secret", region_name="us-east-1"
    )
    test = SmokeTest(stack, Clients(session), LakeCount(LakeSettings()))
    request = test.api_client().prepare("POST", "/v1/records", b"{}")
    authorization = request.get_header("Authorization")
    assert authorization.startswith("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/")
    assert "/eu-west-1/execute-api/aws4_request" in authorization
