"""The IAM replay's policy evaluation (tests/support/iam/policy.py): IAM's decision logic and
each condition operator it implements, at and past each edge; what it does not implement is
refused, never allowed."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.iam.policy import (
    Request,
    Statement,
    UnsupportedPolicy,
    arn_matches,
    conditions_hold,
    evaluate,
)

ROLE = "arn:aws:iam::123456789012:role/ingest"
OTHER = "arn:aws:iam::123456789012:role/other"
TABLE = "arn:aws:dynamodb:us-east-1:123456789012:table/consumers"
BUCKET = "arn:aws:s3:::log"
KEY = "arn:aws:kms:us-east-1:123456789012:key/k1"
ROOT = "arn:aws:iam::123456789012:root"


def allow(action: Any, resource: Any = "*", **extra: Any) -> Statement:
    return Statement({"Effect": "Allow", "Action": action, "Resource": resource, **extra}, "id")


def deny(action: Any, resource: Any = "*", **extra: Any) -> Statement:
    return Statement({"Effect": "Deny", "Action": action, "Resource": resource, **extra}, "rp")


def granting(principal: Any, action: str, source: str = "rp") -> Statement:
    """A resource policy's Allow of ``action`` on every resource to ``principal``."""
    body = {"Effect": "Allow", "Principal": principal, "Action": action, "Resource": "*"}
    return Statement(body, source)


def request(action: str, resource: str, **context: Any) -> Request:
    return Request(ROLE, action, resource, context)


# --- actions and resources ---------------------------------------------------------------
def test_no_statement_is_an_implicit_deny() -> None:
    decision = evaluate(request("s3:GetObject", f"{BUCKET}/events/a"), [])
    assert not decision.allowed and "implicit deny" in decision.reason


@pytest.mark.parametrize(
    ("pattern", "action", "allowed"),
    [
        ("dynamodb:GetItem", "dynamodb:GetItem", True),
        ("DynamoDB:getitem", "dynamodb:GetItem", True),  # case-insensitive
        ("dynamodb:Get*", "dynamodb:GetItem", True),
        ("dynamodb:Get?tem", "dynamodb:GetItem", True),
        ("dynamodb:Get?", "dynamodb:GetItem", False),
        ("dynamodb:PutItem", "dynamodb:GetItem", False),
        ("*", "dynamodb:GetItem", True),
    ],
)
def test_actions_match_with_wildcards(pattern: str, action: str, allowed: bool) -> None:
    assert evaluate(request(action, TABLE), [allow(pattern, TABLE)]).allowed is allowed


@pytest.mark.parametrize(
    ("pattern", "arn", "matches"),
    [
        (f"{BUCKET}/events/*", f"{BUCKET}/events/shardId-0/00000000000000000001", True),
        (f"{BUCKET}/events/*", f"{BUCKET}/lake/x", False),
        (f"{BUCKET}/events/*", BUCKET, False),
        ("arn:aws:dynamodb:*:*:table/consumers", TABLE, True),
        # a wildcard of the first five parts never crosses a colon
        ("arn:aws:dynamodb:us-east-1:*", TABLE, False),
        (
            "arn:aws:lambda:us-east-1:123456789012:function:f:*",
            "arn:aws:lambda:us-east-1:123456789012:function:f:live",
            True,
        ),
        (
            "arn:aws:lambda:us-east-1:123456789012:function:f",
            "arn:aws:lambda:us-east-1:123456789012:function:f:live",
            False,
        ),
        ("*", TABLE, True),
        (TABLE, TABLE + "x", False),
    ],
)
def test_resources_match_by_arn_part(pattern: str, arn: str, matches: bool) -> None:
    assert arn_matches(pattern, arn) is matches


def test_not_action_and_not_resource() -> None:
    statement = Statement(
        {"Effect": "Allow", "NotAction": "s3:Delete*", "NotResource": f"{BUCKET}/lake/*"}, "s"
    )
    assert evaluate(request("s3:GetObject", f"{BUCKET}/events/a"), [statement]).allowed
    assert not evaluate(request("s3:DeleteObject", f"{BUCKET}/events/a"), [statement]).allowed
    assert not evaluate(request("s3:GetObject", f"{BUCKET}/lake/a"), [statement]).allowed


def test_an_explicit_deny_wins_over_any_allow() -> None:
    resource_policy = [deny("s3:PutObject", f"{BUCKET}/events/*", Principal={"AWS": "*"})]
    decision = evaluate(
        request("s3:PutObject", f"{BUCKET}/events/a"), [allow("s3:*", "*")], resource_policy
    )
    assert not decision.allowed and decision.denied_by is resource_policy[0]


def test_a_resource_policy_naming_the_role_allows_alone_in_one_account() -> None:
    policy = [granting({"AWS": ROLE}, "sqs:*")]
    assert evaluate(request("sqs:SendMessage", "arn:aws:sqs:us-east-1:1:q"), [], policy).allowed
    other = Request(OTHER, "sqs:SendMessage", "arn:aws:sqs:us-east-1:1:q")
    assert not evaluate(other, [], policy).allowed


def test_a_key_policy_must_allow_or_delegate_to_iam() -> None:
    delegating = [granting({"AWS": ROOT}, "kms:*")]
    need = request("kms:Decrypt", KEY)
    # delegated: the identity policy decides
    assert evaluate(
        need, [allow("kms:Decrypt", KEY)], delegating, resource_policy_must_allow=True
    ).allowed
    refused = evaluate(need, [], delegating, resource_policy_must_allow=True)
    assert not refused.allowed and "delegates to IAM" in refused.reason
    # no statement for the account or the role: an identity policy alone is not enough
    alone = evaluate(need, [allow("kms:Decrypt", KEY)], [], resource_policy_must_allow=True)
    assert not alone.allowed
    naming = [granting({"AWS": ROLE}, "kms:Decrypt")]
    assert evaluate(need, [], naming, resource_policy_must_allow=True).allowed


def test_service_principals_match_only_service_statements() -> None:
    permission = [granting({"Service": "events.amazonaws.com"}, "lambda:InvokeFunction")]
    events = Request("events.amazonaws.com", "lambda:InvokeFunction", "arn:aws:lambda:::f")
    assert evaluate(events, [], permission).allowed
    other = Request("sqs.amazonaws.com", "lambda:InvokeFunction", "arn:aws:lambda:::f")
    assert not evaluate(other, [], permission).allowed


# --- conditions ---------------------------------------------------------------------------
def holds(condition: dict[str, Any], **context: Any) -> bool:
    return conditions_hold(condition, context)


@pytest.mark.parametrize(
    ("operator", "wanted", "value", "result"),
    [
        ("StringEquals", "a", "a", True),
        ("StringEquals", "a", "A", False),
        ("StringEquals", ["x", "a"], "a", True),  # any of the values
        ("StringNotEquals", "a", "a", False),
        ("StringNotEquals", ["x", "y"], "a", True),
        ("StringEqualsIgnoreCase", "a", "A", True),
        ("StringNotEqualsIgnoreCase", "a", "A", False),
        ("StringLike", "events/*", "events/shardId-0/", True),
        ("StringLike", "events/*", "lake/", False),
        ("StringLike", "e?ents/*", "events/x", True),
        ("StringNotLike", "events/*", "lake/", True),
        ("ArnEquals", ROLE, ROLE, True),
        ("ArnLike", "arn:aws:iam::*:role/*", ROLE, True),
        ("ArnNotEquals", ROLE, OTHER, True),
        ("ArnNotLike", "arn:aws:iam::*:role/ing*", ROLE, False),
        ("Bool", "true", "true", True),
        ("Bool", "false", "true", False),
        ("Bool", True, "true", True),
        ("NumericLessThan", "1.2", "1.1", True),
        ("NumericLessThan", "1.2", "1.2", False),  # at the edge
        ("NumericLessThanEquals", "1.2", "1.2", True),
        ("NumericGreaterThan", "5", "6", True),
        ("NumericGreaterThanEquals", "5", "5", True),
        ("NumericEquals", "5", "5.0", True),
        ("NumericNotEquals", "5", "5", False),
    ],
)
def test_each_operator(operator: str, wanted: Any, value: str, result: bool) -> None:
    assert holds({operator: {"k:key": wanted}}, **{"k:key": value}) is result


@pytest.mark.parametrize(
    ("operator", "result"),
    [
        ("StringEquals", False),
        ("StringLike", False),
        ("Bool", False),
        ("ArnLike", False),
        ("NumericLessThan", False),
        ("StringNotEquals", True),  # negated operators hold for an absent key
        ("ArnNotEquals", True),
        ("StringEqualsIfExists", True),
        ("BoolIfExists", True),
    ],
)
def test_an_absent_key(operator: str, result: bool) -> None:
    assert holds({operator: {"aws:SourceArn": "x"}}) is result


def test_if_exists_compares_a_present_key() -> None:
    assert holds({"StringEqualsIfExists": {"k": "a"}}, k="a")
    assert not holds({"StringEqualsIfExists": {"k": "a"}}, k="b")


def test_null() -> None:
    assert holds({"Null": {"s3:if-none-match": "true"}})
    assert not holds({"Null": {"s3:if-none-match": "true"}}, **{"s3:if-none-match": "*"})
    assert holds({"Null": {"s3:if-none-match": "false"}}, **{"s3:if-none-match": "*"})
    assert not holds({"Null": {"dynamodb:LeadingKeys": "false"}})


def test_for_all_values_and_for_any_value() -> None:
    own = {"ForAllValues:StringEquals": {"dynamodb:LeadingKeys": ["$ingest"]}}
    assert holds(own, **{"dynamodb:LeadingKeys": ["$ingest"]})
    assert not holds(own, **{"dynamodb:LeadingKeys": ["$ingest", "g1"]})
    assert holds(own)  # no value: ForAllValues holds (hence the Null check beside it)
    assert holds(own, **{"dynamodb:LeadingKeys": []})
    anyone = {"ForAnyValue:StringEquals": {"dynamodb:LeadingKeys": ["g1"]}}
    assert holds(anyone, **{"dynamodb:LeadingKeys": ["$ingest", "g1"]})
    assert not holds(anyone, **{"dynamodb:LeadingKeys": ["$ingest"]})
    assert not holds(anyone)  # no value: ForAnyValue does not hold


def test_blocks_keys_and_values_combine_as_iam_does() -> None:
    condition = {
        "StringEquals": {"a": ["1", "2"], "b": "3"},  # keys: AND; values: OR
        "Bool": {"c": "true"},  # blocks: AND
    }
    assert holds(condition, a="2", b="3", c="true")
    assert not holds(condition, a="2", b="4", c="true")
    assert not holds(condition, a="2", b="3", c="false")


def test_condition_keys_are_case_insensitive_values_are_not() -> None:
    assert holds(
        {"StringEquals": {"AWS:SecureTransport": "true"}}, **{"aws:securetransport": "true"}
    )
    assert not holds({"StringEquals": {"k": "True"}}, k="true")


def test_the_write_once_deny_of_the_log_bucket() -> None:
    """The bucket policy's deny: creation under events/ without If-None-Match."""
    condition = {
        "Null": {"s3:if-none-match": "true"},
        "Bool": {"s3:ObjectCreationOperation": "true"},
    }
    assert holds(condition, **{"s3:ObjectCreationOperation": "true"})  # denied
    assert not holds(condition, **{"s3:ObjectCreationOperation": "true", "s3:if-none-match": "*"})


# --- refusals -----------------------------------------------------------------------------
@pytest.mark.parametrize(
    "condition",
    [
        {"DateGreaterThan": {"aws:CurrentTime": "2020-01-01T00:00:00Z"}},
        {"IpAddress": {"aws:SourceIp": "10.0.0.0/8"}},
        {"BinaryEquals": {"k": "AA=="}},
        {"ForSomeValues:StringEquals": {"k": "a"}},
        {"StringEquals": {"k": "${aws:username}"}},
        {"StringEquals": "not a key map"},
    ],
)
def test_what_is_not_implemented_is_refused_not_allowed(condition: dict[str, Any]) -> None:
    statement = allow("s3:GetObject", "*", Condition=condition)
    with pytest.raises(UnsupportedPolicy):
        evaluate(request("s3:GetObject", f"{BUCKET}/a", k="a"), [statement])


def test_a_plain_operator_on_a_multivalued_key_is_refused() -> None:
    with pytest.raises(UnsupportedPolicy, match="ForAllValues"):
        holds({"StringEquals": {"dynamodb:LeadingKeys": "g"}}, **{"dynamodb:LeadingKeys": ["g"]})


@pytest.mark.parametrize(
    "body",
    [
        {"Effect": "Allow", "Action": "s3:*", "Resource": "*", "NotPrincipal": {"AWS": ROLE}},
        {"Effect": "Maybe", "Action": "s3:*", "Resource": "*"},
        {"Effect": "Allow", "Resource": "*"},
        {"Effect": "Allow", "Action": "s3:*", "Resource": "arn:aws:s3:::${aws:username}/*"},
    ],
)
def test_unknown_statement_shapes_are_refused(body: dict[str, Any]) -> None:
    with pytest.raises(UnsupportedPolicy):
        evaluate(request("s3:GetObject", f"{BUCKET}/a"), [Statement(body, "s")])


def test_unknown_principal_types_in_a_resource_policy_are_refused() -> None:
    policy = [granting({"Federated": "x"}, "s3:*")]
    with pytest.raises(UnsupportedPolicy):
        evaluate(request("s3:GetObject", f"{BUCKET}/a"), [], policy)
