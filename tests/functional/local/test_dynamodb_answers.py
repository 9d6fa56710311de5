"""The embedded DynamoDB answers GetItem and UpdateItem with the JSON moto's serializer writes
(shardlog/local/dynamodb_answers.py): the same body, value for value, and the same content
type, over HTTP, for every attribute type and every ReturnValues; the CRC32 botocore checks
holds (a mismatch would fail the call)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from moto.dynamodb.responses import DynamoHandler

from shardlog import constants as C
from shardlog.local import dynamodb_answers
from tests.support.aws import AwsEnv

EVERY_TYPE = {
    "s": {"S": "text ünïcode"},
    "n": {"N": "-12.5e3"},
    "b": {"B": b"\x00\xffbytes"},
    "t": {"BOOL": True},
    "z": {"NULL": True},
    "l": {"L": [{"S": "a"}, {"N": "1"}, {"B": b"\x01"}, {"L": []}, {"M": {"k": {"S": "v"}}}]},
    "m": {"M": {"inner": {"M": {"deep": {"N": "3"}}}, "bin": {"B": b"\x02"}}},
    "ss": {"SS": ["x", "y"]},
    "ns": {"NS": ["1", "2.5"]},
    "bs": {"BS": [b"\x03", b"\x04"]},
}


class Raw:
    """The HTTP answers botocore received (body and headers), by operation."""

    def __init__(self, aws: AwsEnv) -> None:
        self.answers: list[tuple[dict[str, Any], str]] = []
        for operation in ("GetItem", "UpdateItem"):
            aws.clients.dynamodb.meta.events.register(
                f"before-parse.dynamodb.{operation}", self._note
            )

    def _note(self, response_dict: dict[str, Any], **_: Any) -> None:
        headers = {k.lower(): v for k, v in response_dict["headers"].items()}
        self.answers.append((json.loads(response_dict["body"]), headers["content-type"]))


Answer = tuple[dict[str, Any], str]  # the body, its content type


def _refused(*_args: Any) -> Any:
    raise AssertionError("answered by moto's serializer")


def _both(
    aws: AwsEnv, monkeypatch: pytest.MonkeyPatch, call: Callable[[str], Any]
) -> tuple[Answer, Answer]:
    """``call`` on a fresh item (given its partition id) answered directly, then by moto's
    own serializer."""
    raw = Raw(aws)
    for own in (False, True):
        pid = f"answers-{uuid.uuid4().hex[:8]}"
        aws.clients.dynamodb.put_item(
            TableName=aws.config.partitions_table,
            Item={C.ATTR_PARTITION_ID: {"S": pid}, **EVERY_TYPE},
        )
        with monkeypatch.context() as patched:
            if own:
                for name in dynamodb_answers.ANSWERED:
                    patched.setattr(DynamoHandler, name, dynamodb_answers.original(name))
            else:  # the direct answer never reaches moto's serializer
                patched.setattr(DynamoHandler, "serialized", _refused)
            before = len(raw.answers)
            call(pid)
            assert len(raw.answers) == before + 1
    direct, own = raw.answers
    return direct, own


def _key(pid: str) -> dict[str, Any]:
    return {C.ATTR_PARTITION_ID: {"S": pid}}


def _same(direct: Answer, own: Answer) -> None:
    """The same answer but for the item's key (each call had an item of its own)."""
    for body, _ in (direct, own):
        body.get("Attributes", body.get("Item", {})).pop(C.ATTR_PARTITION_ID, None)
    assert direct == own


def test_get_item_answers_as_moto_does(aws: AwsEnv, monkeypatch: pytest.MonkeyPatch) -> None:
    table = aws.config.partitions_table
    direct, own = _both(
        aws,
        monkeypatch,
        lambda pid: aws.clients.dynamodb.get_item(
            TableName=table, Key=_key(pid), ConsistentRead=True
        ),
    )
    _same(direct, own)
    assert set(direct[0]["Item"]) == set(EVERY_TYPE)
    assert direct[1] == dynamodb_answers.JSON_CONTENT_TYPE
    direct, own = _both(
        aws,
        monkeypatch,
        lambda pid: aws.clients.dynamodb.get_item(TableName=table, Key=_key(pid + "-none")),
    )
    assert direct == own == ({}, dynamodb_answers.JSON_CONTENT_TYPE)


@pytest.mark.parametrize(
    "return_values", ["ALL_NEW", "ALL_OLD", "UPDATED_NEW", "UPDATED_OLD", "NONE"]
)
def test_update_item_answers_as_moto_does(
    aws: AwsEnv, monkeypatch: pytest.MonkeyPatch, return_values: str
) -> None:
    direct, own = _both(
        aws,
        monkeypatch,
        lambda pid: aws.clients.dynamodb.update_item(
            TableName=aws.config.partitions_table,
            Key=_key(pid),
            UpdateExpression="SET s = :s, b = :b ADD n :one REMOVE ss",
            ConditionExpression="attribute_exists(t)",
            ExpressionAttributeValues={
                ":s": {"S": "new"},
                ":b": {"B": b"\x05"},
                ":one": {"N": "1"},
            },
            ReturnValues=return_values,
        ),
    )
    _same(direct, own)
    assert direct[1] == dynamodb_answers.JSON_CONTENT_TYPE
