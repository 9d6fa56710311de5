"""IAM policy evaluation for one request: AWS's logic, for what shardlog's policies use.

No maintained Python package evaluates a request against identity *and* resource policies with
condition operators (policy_sentry and parliament write and lint policies, cloudsplaining
reports on them; moto's ``iam.access_control`` ignores resources and conditions), so this is
the evaluation, small and tested (tests/unit/test_iam_policy.py), refusing what it does not
implement rather than allowing it.

A request is (principal ARN, action, resource ARN, context keys). Policies are statements as
CloudFormation holds them once intrinsics are resolved. The decision, as AWS takes it within one
account (no SCPs, permission boundaries or session policies: the stack has none):

1. an explicit Deny in any applicable policy wins (identity policies, and the resource policy of
   the resource when one applies to the principal);
2. else an Allow decides: for most services an Allow in the identity policies *or* in the
   resource policy naming the principal is enough (same account); for KMS the key policy must
   allow, either naming the principal, or naming the account root, which delegates to the
   identity policies (which must then allow too);
3. else the request is implicitly denied.

A statement applies when its Action (or NotAction) matches, its Resource (or NotResource)
matches, its Principal matches (resource policies), and every condition holds.

Implemented condition operators: StringEquals, StringNotEquals, StringEqualsIgnoreCase,
StringNotEqualsIgnoreCase, StringLike, StringNotLike, ArnEquals, ArnLike, ArnNotEquals,
ArnNotLike, Bool, Null, NumericEquals, NumericNotEquals, NumericLessThan,
NumericLessThanEquals, NumericGreaterThan, NumericGreaterThanEquals; each with ``IfExists``
and the ``ForAllValues:`` / ``ForAnyValue:`` set prefixes. Any other operator, a policy
variable (``${...}``), NotPrincipal, or a statement element it does not know raises
``UnsupportedPolicy``: an evaluation that cannot be done is never taken as an allow.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

ContextValue = str | list[str]


class UnsupportedPolicy(ValueError):
    """A policy uses something this evaluation does not implement."""


@dataclass(frozen=True)
class Request:
    principal_arn: str  # a role ARN, or a service principal ("events.amazonaws.com")
    action: str  # "dynamodb:GetItem"
    resource: str  # an ARN, or "*" for actions without a resource
    context: Mapping[str, ContextValue] = field(default_factory=dict)

    @property
    def account(self) -> str:
        parts = self.principal_arn.split(":")
        return parts[4] if len(parts) > 4 else ""

    @property
    def is_service(self) -> bool:
        return self.principal_arn.endswith(".amazonaws.com")


@dataclass(frozen=True)
class Statement:
    """One statement, and where it comes from (for the report)."""

    body: Mapping[str, Any]
    source: str  # e.g. "IngestFunctionRoleDefaultPolicy#3"

    @property
    def effect(self) -> str:
        return str(self.body.get("Effect"))

    @property
    def label(self) -> str:
        sid = self.body.get("Sid")
        return f"{self.source} ({sid})" if sid else self.source


@dataclass(frozen=True)
class Decision:
    allowed: bool
    reason: str
    allowed_by: tuple[Statement, ...] = ()
    denied_by: Statement | None = None


_KNOWN_ELEMENTS = frozenset(
    {"Sid", "Effect", "Action", "NotAction", "Resource", "NotResource", "Principal", "Condition"}
)
_NEGATED = frozenset(
    {
        "StringNotEquals",
        "StringNotEqualsIgnoreCase",
        "StringNotLike",
        "ArnNotEquals",
        "ArnNotLike",
        "NumericNotEquals",
    }
)
_OPERATORS = frozenset(
    {
        "StringEquals",
        "StringNotEquals",
        "StringEqualsIgnoreCase",
        "StringNotEqualsIgnoreCase",
        "StringLike",
        "StringNotLike",
        "ArnEquals",
        "ArnLike",
        "ArnNotEquals",
        "ArnNotLike",
        "Bool",
        "Null",
        "NumericEquals",
        "NumericNotEquals",
        "NumericLessThan",
        "NumericLessThanEquals",
        "NumericGreaterThan",
        "NumericGreaterThanEquals",
    }
)


def as_list(value: Any) -> list[Any]:
    if value is None:
        return []
    return list(value) if isinstance(value, list | tuple) else [value]


@lru_cache(maxsize=4096)
def _glob(pattern: str, case_sensitive: bool) -> re.Pattern[str]:
    if "${" in pattern:
        raise UnsupportedPolicy(f"policy variables are not implemented: {pattern!r}")
    parts = [".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern]
    return re.compile("".join(parts) + r"\Z", 0 if case_sensitive else re.IGNORECASE)


def glob_match(pattern: str, value: str, *, case_sensitive: bool = True) -> bool:
    return _glob(pattern, case_sensitive).match(value) is not None


def action_matches(pattern: str, action: str) -> bool:
    """Actions match case-insensitively, with * and ? wildcards."""
    return glob_match(pattern, action, case_sensitive=False)


def arn_matches(pattern: str, arn: str) -> bool:
    """ARN matching: "*" matches anything; otherwise each of the six colon-separated parts
    is matched on its own (wildcards never cross a colon of the first five)."""
    if pattern == "*":
        return True
    wanted, got = pattern.split(":", 5), arn.split(":", 5)
    if len(wanted) != len(got):
        return False
    return all(glob_match(w, g) for w, g in zip(wanted, got, strict=True))


def statement_matches(statement: Statement, request: Request, *, resource_policy: bool) -> bool:
    body = statement.body
    unknown = set(body) - _KNOWN_ELEMENTS
    if unknown:
        raise UnsupportedPolicy(f"{statement.label}: unknown elements {sorted(unknown)}")
    if body.get("Effect") not in ("Allow", "Deny"):
        raise UnsupportedPolicy(f"{statement.label}: Effect {body.get('Effect')!r}")
    if not _action_applies(body, request.action):
        return False
    if not _resource_applies(body, request.resource):
        return False
    if resource_policy and not principal_matches(body.get("Principal"), request):
        return False
    if not resource_policy and "Principal" in body:
        raise UnsupportedPolicy(f"{statement.label}: Principal in an identity policy")
    return conditions_hold(body.get("Condition") or {}, request.context, statement.label)


def _action_applies(body: Mapping[str, Any], action: str) -> bool:
    if "Action" in body:
        return any(action_matches(p, action) for p in as_list(body["Action"]))
    if "NotAction" in body:
        return not any(action_matches(p, action) for p in as_list(body["NotAction"]))
    raise UnsupportedPolicy("a statement without Action or NotAction")


def _resource_applies(body: Mapping[str, Any], resource: str) -> bool:
    if "Resource" in body:
        return any(arn_matches(p, resource) for p in as_list(body["Resource"]))
    if "NotResource" in body:
        return not any(arn_matches(p, resource) for p in as_list(body["NotResource"]))
    raise UnsupportedPolicy("a statement without Resource or NotResource")


def principal_matches(principal: Any, request: Request) -> bool:
    """A resource policy's Principal: "*", {"AWS": ...} (role ARNs, account roots) or
    {"Service": ...}. An account root matches every principal of that account: the account
    delegates to its identity policies (``delegates_to_account``)."""
    if principal is None:
        raise UnsupportedPolicy("a resource policy statement without Principal")
    if principal == "*":
        return True
    if not isinstance(principal, Mapping):
        raise UnsupportedPolicy(f"Principal {principal!r}")
    unknown = set(principal) - {"AWS", "Service"}
    if unknown:
        raise UnsupportedPolicy(f"Principal types {sorted(unknown)}")
    if request.is_service:
        return request.principal_arn in as_list(principal.get("Service"))
    for arn in as_list(principal.get("AWS")):
        if arn == "*" or arn == request.principal_arn or _is_root_of(arn, request.account):
            return True
    return False


def _is_root_of(arn: str, account: str) -> bool:
    return arn in (f"arn:aws:iam::{account}:root", account)


def delegates_to_account(statement: Statement, request: Request) -> bool:
    """Whether an Allow of a resource policy names the account (its root), not the caller."""
    principal = statement.body.get("Principal")
    if not isinstance(principal, Mapping):
        return False
    names = as_list(principal.get("AWS"))
    return request.principal_arn not in names and any(
        _is_root_of(a, request.account) for a in names
    )


# --- conditions ---------------------------------------------------------------------------
def conditions_hold(
    condition: Mapping[str, Any], context: Mapping[str, ContextValue], where: str = ""
) -> bool:
    """Every operator block holds; within a block every key holds; a key holds when the
    request's value matches any of the policy's values (none, for negated operators)."""
    lowered = {k.lower(): v for k, v in context.items()}
    for operator, keys in condition.items():
        if not isinstance(keys, Mapping):
            raise UnsupportedPolicy(f"{where}: condition {operator} is not a key map")
        for key, values in keys.items():
            if not _holds(operator, lowered.get(key.lower()), as_list(values), where):
                return False
    return True


def _holds(operator: str, value: ContextValue | None, wanted: list[Any], where: str) -> bool:
    qualifier, _, base = operator.rpartition(":")
    if_exists = base.endswith("IfExists") and base != "IfExists"
    base = base.removesuffix("IfExists") if if_exists else base
    if base not in _OPERATORS or qualifier not in ("", "ForAllValues", "ForAnyValue"):
        raise UnsupportedPolicy(f"{where}: condition operator {operator!r} is not implemented")
    wanted = [_text(w, where) for w in wanted]
    if base == "Null":
        if qualifier:
            raise UnsupportedPolicy(f"{where}: {operator!r}")
        absent = value is None or value == []
        return all((w.lower() == "true") == absent for w in wanted)
    if qualifier == "ForAllValues":  # every value the request has matches; none: true
        return all(_single(base, v, wanted) for v in as_list(value))
    if qualifier == "ForAnyValue":  # some value the request has matches; none: false
        return any(_single(base, v, wanted) for v in as_list(value))
    if isinstance(value, list):
        raise UnsupportedPolicy(
            f"{where}: {operator} on a multivalued key needs ForAllValues or ForAnyValue"
        )
    if value is None:  # absent: negated operators and IfExists hold, the rest do not
        return if_exists or base in _NEGATED
    return _single(base, value, wanted)


def _text(value: Any, where: str) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if not isinstance(value, str | int | float):
        raise UnsupportedPolicy(f"{where}: condition value {value!r}")
    text = str(value)
    if "${" in text:
        raise UnsupportedPolicy(f"{where}: policy variables are not implemented: {text!r}")
    return text


def _single(base: str, value: str, wanted: Sequence[str]) -> bool:
    negated = base in _NEGATED
    positive = _POSITIVE.get(base, base)
    matched = any(_compare(positive, value, w) for w in wanted)
    return not matched if negated else matched


_POSITIVE = {
    "StringNotEquals": "StringEquals",
    "StringNotEqualsIgnoreCase": "StringEqualsIgnoreCase",
    "StringNotLike": "StringLike",
    "ArnNotEquals": "ArnEquals",
    "ArnNotLike": "ArnLike",
    "NumericNotEquals": "NumericEquals",
}


def _compare(operator: str, value: str, wanted: str) -> bool:
    if operator == "StringEquals":
        return value == wanted
    if operator == "StringEqualsIgnoreCase":
        return value.lower() == wanted.lower()
    if operator == "StringLike":
        return glob_match(wanted, value)
    if operator in ("ArnEquals", "ArnLike"):
        return arn_matches(wanted, value)
    if operator == "Bool":
        return value.lower() == wanted.lower()
    return _numeric(operator, float(value), float(wanted))


def _numeric(operator: str, value: float, wanted: float) -> bool:
    return {
        "NumericEquals": value == wanted,
        "NumericLessThan": value < wanted,
        "NumericLessThanEquals": value <= wanted,
        "NumericGreaterThan": value > wanted,
        "NumericGreaterThanEquals": value >= wanted,
    }[operator]


# --- the decision ----------------------------------------------------------------------------
def evaluate(
    request: Request,
    identity: Iterable[Statement],
    resource_policy: Iterable[Statement] = (),
    *,
    resource_policy_must_allow: bool = False,
) -> Decision:
    """AWS's decision for one request within one account (see the module docstring);
    ``resource_policy_must_allow``: a KMS key policy, which must allow on its own or
    delegate to the account."""
    identity = list(identity)
    resource = list(resource_policy)
    for statement in identity + resource:
        if statement.effect not in ("Allow", "Deny"):
            raise UnsupportedPolicy(f"{statement.label}: Effect {statement.effect!r}")
    for statement in identity:
        if statement.effect == "Deny" and statement_matches(
            statement, request, resource_policy=False
        ):
            return Decision(False, f"explicitly denied by {statement.label}", denied_by=statement)
    for statement in resource:
        if statement.effect == "Deny" and statement_matches(
            statement, request, resource_policy=True
        ):
            return Decision(False, f"explicitly denied by {statement.label}", denied_by=statement)
    by_identity = tuple(
        s
        for s in identity
        if s.effect == "Allow" and statement_matches(s, request, resource_policy=False)
    )
    by_resource = tuple(
        s
        for s in resource
        if s.effect == "Allow" and statement_matches(s, request, resource_policy=True)
    )
    if resource_policy_must_allow:
        return _key_policy_decision(request, by_identity, by_resource)
    if by_identity or by_resource:
        return Decision(True, "allowed", allowed_by=by_identity + by_resource)
    return Decision(False, "no statement allows it (implicit deny)")


def _key_policy_decision(
    request: Request, by_identity: tuple[Statement, ...], by_resource: tuple[Statement, ...]
) -> Decision:
    naming = tuple(s for s in by_resource if not delegates_to_account(s, request))
    if naming:
        return Decision(True, "allowed by the key policy", allowed_by=naming + by_identity)
    delegating = tuple(s for s in by_resource if delegates_to_account(s, request))
    if not delegating:
        return Decision(False, "the key policy does not allow it (nor delegate it to IAM)")
    if not by_identity:
        return Decision(
            False,
            "the key policy delegates to IAM, and no identity policy statement allows it",
        )
    return Decision(True, "allowed (key policy delegates to IAM)", allowed_by=by_identity)
