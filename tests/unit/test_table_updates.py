"""The one builder of conditional writes (pure: the requests it builds)."""

from __future__ import annotations

import pytest

from shardlog.tables import Lease, Update

KEY = {"consumerGroup": {"S": "g"}, "partitionId": {"S": "p"}}


def test_request_keeps_only_the_names_and_values_it_uses() -> None:
    request = Update(
        "t",
        KEY,
        ("#cp = :cp",),
        ("#sub",),
        "#counter = :seen",
        {
            ":cp": {"S": "5"},
            ":seen": {"N": "3"},
            ":unused": {"N": "1"},
        },
    ).request()
    assert request["UpdateExpression"] == "SET #cp = :cp REMOVE #sub"
    assert request["ExpressionAttributeNames"] == {
        "#cp": "checkpoint",
        "#sub": "checkpointSubSequenceNumber",
        "#counter": "leaseCounter",
    }
    assert set(request["ExpressionAttributeValues"]) == {":cp", ":seen"}


def test_a_value_the_expression_needs_but_lacks_is_refused() -> None:
    with pytest.raises(ValueError, match=r"no value for \[':cp'\]"):
        Update("t", KEY, ("#cp = :cp",)).request()


def test_fenced_writes_need_owner_and_counter_and_increment_it() -> None:
    lease = Lease("g", "p", owner="w1", counter=7)
    request = Update("t", KEY, ("#cp = :cp",), values={":cp": {"S": "1"}}).fenced(lease).request()
    assert request["ConditionExpression"] == "#owner = :me AND #counter = :held"
    assert request["UpdateExpression"] == "SET #cp = :cp, #counter = #counter + :one"
    values = request["ExpressionAttributeValues"]
    assert (values[":me"], values[":held"]) == ({"S": "w1"}, {"N": "7"})


def test_fencing_keeps_an_existing_condition() -> None:
    lease = Lease("g", "p", owner="w1", counter=7)
    update = Update(
        "t",
        KEY,
        ("#cp = :cp",),
        condition="#next = :old",
        values={
            ":cp": {"S": "1"},
            ":old": {"N": "0"},
        },
    )
    condition = update.fenced(lease).request()["ConditionExpression"]
    assert condition == "(#next = :old) AND #owner = :me AND #counter = :held"


@pytest.mark.parametrize(
    ("counter", "condition"),
    [(None, "attribute_not_exists(#counter)"), (4, "#counter = :seen")],
)
def test_counter_fence_without_an_owner(counter: int | None, condition: str) -> None:
    request = (
        Update("t", KEY, ("#cp = :cp",), values={":cp": {"S": "1"}})
        .counter_fenced(counter)
        .request()
    )
    assert request["ConditionExpression"] == condition
    assert request["UpdateExpression"].endswith("#counter = if_not_exists(#counter, :zero) + :one")
