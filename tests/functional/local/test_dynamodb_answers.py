"""The embedded DynamoDB answers the requests that return items with the JSON moto's serializer
writes (shardlog/local/dynamodb_answers.py): the same body, value for value, and the same
content type, over HTTP, for every attribute type, every such operation and every
ReturnValues; the CRC32 botocore checks holds (a mismatch would fail the call)."""

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


OPERATIONS = (
    "GetItem",
    "UpdateItem",
    "PutItem",
    "DeleteItem",
    "Query",
    "Scan",
    "BatchGetItem",
    "TransactGetItems",
)


def test_every_answered_operation_is_tested() -> None:
    answered = {name.replace("_", "") for name in dynamodb_answers.ANSWERED}
    assert answered == {name.lower() for name in OPERATIONS}


class Raw:
    """The HTTP answers botocore received (body and headers), by operation."""

    def __init__(self, aws: AwsEnv) -> None:
        self.answers: list[tuple[dict[str, Any], str]] = []
        for operation in OPERATIONS:
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
    own serializer; in each answer the item's partition id reads ``PID``."""
    raw = Raw(aws)
    answers = []
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
        body, content_type = raw.answers[-1]
        answers.append((json.loads(json.dumps(body).replace(pid, "PID")), content_type))
    direct, own = answers
    return direct, own


def _key(pid: str) -> dict[str, Any]:
    return {C.ATTR_PARTITION_ID: {"S": pid}}


def _same(direct: Answer, own: Answer) -> None:
    assert direct == own
    assert direct[1] == dynamodb_answers.JSON_CONTENT_TYPE


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
    assert set(direct[0]["Item"]) == {C.ATTR_PARTITION_ID, *EVERY_TYPE}
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


@pytest.mark.parametrize("return_values", ["ALL_OLD", "NONE"])
def test_put_and_delete_item_answer_as_moto_does(
    aws: AwsEnv, monkeypatch: pytest.MonkeyPatch, return_values: str
) -> None:
    table = aws.config.partitions_table
    put = _both(
        aws,
        monkeypatch,
        lambda pid: aws.clients.dynamodb.put_item(
            TableName=table,
            Item={**_key(pid), "s": {"S": "replaced"}},
            ReturnValues=return_values,
            ReturnConsumedCapacity="TOTAL",
        ),
    )
    _same(*put)
    delete = _both(
        aws,
        monkeypatch,
        lambda pid: aws.clients.dynamodb.delete_item(
            TableName=table, Key=_key(pid), ReturnValues=return_values
        ),
    )
    _same(*delete)
    if return_values == "ALL_OLD":
        assert put[0][0]["Attributes"]["b"] == delete[0][0]["Attributes"]["b"] != {}


def _of(pid: str) -> dict[str, Any]:
    """A consistent read's condition on ``pid`` (``#p = :p``)."""
    return {
        "ExpressionAttributeNames": {"#p": C.ATTR_PARTITION_ID},
        "ExpressionAttributeValues": {":p": {"S": pid}},
        "ConsistentRead": True,
    }


@pytest.mark.parametrize("limit", [None, 1])
def test_query_and_scan_answer_as_moto_does(
    aws: AwsEnv, monkeypatch: pytest.MonkeyPatch, limit: int | None
) -> None:
    table = aws.config.partitions_table
    paging = {} if limit is None else {"Limit": limit}
    query = _both(
        aws,
        monkeypatch,
        lambda pid: aws.clients.dynamodb.query(
            TableName=table, KeyConditionExpression="#p = :p", **_of(pid), **paging
        ),
    )
    _same(*query)
    assert query[0][0]["Count"] == 1 and len(query[0][0]["Items"]) == 1
    scan = _both(
        aws,
        monkeypatch,
        lambda pid: aws.clients.dynamodb.scan(
            TableName=table, FilterExpression="#p = :p", **_of(pid)
        ),
    )
    # The second scan reads one item more (each call puts an item of its own).
    assert scan[0][0].pop("ScannedCount") == scan[1][0].pop("ScannedCount") - 1
    _same(*scan)
    assert scan[0][0]["Count"] == 1
    counted = _both(
        aws, monkeypatch, lambda pid: aws.clients.dynamodb.scan(TableName=table, Select="COUNT")
    )
    assert "Items" not in counted[0][0]
    assert counted[0][0]["Count"] == counted[1][0]["Count"] - 1  # one item more the second time


def test_batch_and_transact_gets_answer_as_moto_does(
    aws: AwsEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = aws.config.partitions_table
    batch = _both(
        aws,
        monkeypatch,
        lambda pid: aws.clients.dynamodb.batch_get_item(
            RequestItems={table: {"Keys": [_key(pid), _key(pid + "-none")], "ConsistentRead": True}}
        ),
    )
    _same(*batch)
    assert len(batch[0][0]["Responses"][table]) == 1
    transact = _both(
        aws,
        monkeypatch,
        lambda pid: aws.clients.dynamodb.transact_get_items(
            TransactItems=[
                {"Get": {"TableName": table, "Key": _key(pid)}},
                {"Get": {"TableName": table, "Key": _key(pid + "-none")}},
            ],
            ReturnConsumedCapacity="TOTAL",
        ),
    )
    _same(*transact)
    assert transact[0][0]["Responses"][1] == {}
