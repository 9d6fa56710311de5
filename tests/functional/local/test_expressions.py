"""The embedded DynamoDB parses an update expression once and counts its sections once,
and answers exactly as before (plain boto3, over HTTP): shardlog/local/expressions.py."""

from __future__ import annotations

from typing import Any

import pytest
from botocore.exceptions import ClientError

from shardlog import constants as C
from shardlog.local import expressions
from tests.support.aws import AwsEnv


def _update(aws: AwsEnv, pid: str, expression: str, **values: int) -> dict[str, Any]:
    request: dict[str, Any] = {
        "TableName": aws.config.partitions_table,
        "Key": {C.ATTR_PARTITION_ID: {"S": pid}},
        "UpdateExpression": expression,
        "ReturnValues": "ALL_NEW",
    }
    if values:
        request["ExpressionAttributeValues"] = {
            f":{name}": {"N": str(value)} for name, value in values.items()
        }
    return aws.clients.dynamodb.update_item(**request)["Attributes"]


def _numbers(item: dict[str, Any]) -> dict[str, int]:
    return {k: int(v["N"]) for k, v in item.items() if "N" in v}


def test_one_expression_text_serves_every_item_and_value(aws: AwsEnv) -> None:
    """The tree kept for a text holds no item and no value: each request gets its own."""
    text = "SET a = if_not_exists(a, :zero) + :step, b = :step REMOVE c"
    hits = expressions.parsed.cache_info().hits
    first = _update(aws, "p-one", text, zero=0, step=5)
    again = _update(aws, "p-one", text, zero=0, step=7)
    other = _update(aws, "p-two", text, zero=0, step=1)
    assert (_numbers(first), _numbers(again), _numbers(other)) == (
        {"a": 5, "b": 5},
        {"a": 12, "b": 7},
        {"a": 1, "b": 1},
    )
    assert expressions.parsed.cache_info().hits > hits  # the text was parsed once, kept


def test_a_counter_updated_many_times_by_one_text_counts_each(aws: AwsEnv) -> None:
    for _ in range(5):
        item = _update(aws, "p-count", "ADD n :one SET m = if_not_exists(m, :one) + :one", one=1)
    assert _numbers(item) == {"n": 5, "m": 6}


def test_each_section_once_is_accepted(aws: AwsEnv) -> None:
    """At the edge: SET, REMOVE and ADD once each, SET with several clauses."""
    item = _update(aws, "p-edge", "SET a = :one, b = :one, d = :one REMOVE c ADD e :one", one=1)
    assert _numbers(item) == {"a": 1, "b": 1, "d": 1, "e": 1}


@pytest.mark.parametrize(
    ("expression", "section"),
    [
        ("SET a = :one SET b = :one", "SET"),
        ("SET a = :one REMOVE b SET c = :one", "SET"),
        ("REMOVE a REMOVE b", "REMOVE"),
        ("ADD a :one SET b = :one ADD c :one", "ADD"),
    ],
)
def test_a_section_twice_is_refused_and_changes_nothing(
    aws: AwsEnv, expression: str, section: str
) -> None:
    """Past the edge, wherever the repeated section stands in the text."""
    _update(aws, "p-twice", "SET kept = :one", one=1)
    values = {"one": 1} if ":one" in expression else {}
    for _ in range(2):  # refused again when sent again (the tree is kept, the check runs)
        with pytest.raises(ClientError) as refused:
            _update(aws, "p-twice", expression, **values)
        error = refused.value.response["Error"]
        assert error["Code"] == "ValidationException"
        assert f'The "{section}" section can only be used once' in error["Message"]
    item = aws.clients.dynamodb.get_item(
        TableName=aws.config.partitions_table, Key={C.ATTR_PARTITION_ID: {"S": "p-twice"}}
    )["Item"]
    assert _numbers(item) == {"kept": 1}


def test_two_different_sections_twice_are_refused_naming_one(aws: AwsEnv) -> None:
    with pytest.raises(ClientError) as refused:
        _update(aws, "p-both", "REMOVE a REMOVE b SET c = :one SET d = :one", one=1)
    message = refused.value.response["Error"]["Message"]
    assert any(f'The "{s}" section can only be used once' in message for s in ("SET", "REMOVE"))


def test_an_expression_that_does_not_parse_is_refused_each_time(aws: AwsEnv) -> None:
    for _ in range(2):
        with pytest.raises(ClientError) as refused:
            _update(aws, "p-bad", "SET a = = :one", one=1)
        assert refused.value.response["Error"]["Code"] == "ValidationException"
