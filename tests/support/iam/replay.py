"""The IAM replay: every recorded request, checked against the synthesized policies.

``replay(records, deployment)`` reads each recorded request back into its API call
(``calls``), lists the authorizations AWS makes for it, implicit ones included
(``authorize``), and decides each with IAM's logic (``policy``) against the identity policies
of the principal that made it and the resource policies of its resource (``deployment``).

The result answers both directions:

- ``denied``: every authorization AWS would refuse: the call, the principal (its role) and
  why (the statement that denies it, or that none allows it);
- ``unused_grants``: every (statement, action) of a principal's identity policies that no
  recorded authorization of that principal was allowed by, less those ``NEEDED_BY_AWS`` lists
  with the reason AWS needs them (permissions used by AWS itself with the role, on paths the
  code does not drive: logging, tracing, a destination for failed events).

``report()`` lists, per principal, each action used, how many calls needed it, and the
statements that allowed it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Any

from tests.support.iam.authorize import Need, Scope, needs
from tests.support.iam.calls import Call, read_call
from tests.support.iam.deployment import Deployment, Identity
from tests.support.iam.policy import (
    Decision,
    Request,
    Statement,
    action_matches,
    as_list,
    evaluate,
)


@dataclass(frozen=True)
class Grant:
    """An allowed action of a role that no recorded call uses, and why it stays."""

    principal: str  # glob over principal names
    action: str
    resource: str  # glob over the statement's resources
    reason: str


_LOGS = "Lambda's runtime writes the function's logs with its role"
_TRACES = "active tracing: Lambda sends the function's trace segments with its role"
_ON_FAILURE = (
    "AWS sends what it gives up on to the on-failure destination (the event source mapping, "
    "the asynchronous invocation, the schedule's dead-letter queue) with the role; the queue "
    "is encrypted, hence the key"
)
_DYNAMODB_WRITER_KEY = (
    "a writer of a table under a customer managed key: AWS's DynamoDB key policy example and "
    "CDK's grantReadWriteData grant it to principals that write the table"
)
_DESCRIBE_KEY = (
    "DynamoDB under a customer managed key: AWS's key policy example and CDK's table grants "
    "give it to every principal that uses the table"
)
TRIGGER = "function:lambdas.spark_trigger.handler.handler"
REGISTRATION = "function:lambdas.group_registration.handler.handler"
TRIMMER = "function:lambdas.retention.handler.handler"  # only with record retention set
# Permissions AWS itself uses with the role, on no path of the code.
NEEDED_BY_AWS: tuple[Grant, ...] = (
    Grant("function:*", "logs:CreateLogStream", "*", _LOGS),
    Grant("function:*", "logs:PutLogEvents", "*", _LOGS),
    Grant("function:*", "xray:PutTraceSegments", "*", _TRACES),
    Grant("function:*", "xray:PutTelemetryRecords", "*", _TRACES),
    Grant("function:lambdas.ingest.handler.handler", "sqs:SendMessage", "*", _ON_FAILURE),
    Grant("function:lambdas.ingest.handler.handler", "kms:GenerateDataKey", "*", _ON_FAILURE),
    Grant(TRIGGER, "sqs:SendMessage", "*", _ON_FAILURE),
    Grant(TRIGGER, "kms:*", "*", _ON_FAILURE),
    Grant("scheduler", "sqs:SendMessage", "*", _ON_FAILURE),
    Grant("scheduler", "kms:*", "*", _ON_FAILURE),
    Grant(
        "function:lambdas.ingest.handler.handler",
        "kinesis:DescribeStream",
        "*",
        "Lambda's Kinesis event source mapping (AWS lists it among the execution role's "
        "permissions for a Kinesis source)",
    ),
    Grant(
        "function:lambdas.consumer_waker.handler.handler",
        "dynamodb:ListStreams",
        "*",
        "Lambda's DynamoDB stream event source mapping (AWS lists it among the execution "
        "role's permissions for a stream source)",
    ),
    Grant(
        TRIGGER,
        "dynamodb:ListStreams",
        "*",
        "Lambda's DynamoDB stream event source mapping of compaction by volume (AWS lists it "
        "among the execution role's permissions for a stream source)",
    ),
    Grant(
        "emr-serverless-job",
        "s3:PutObject",
        "*/emr-logs/*",
        "EMR Serverless writes each job run's logs to the application's S3 log location with "
        "the execution role",
    ),
    Grant("*", "kms:DescribeKey", "*", _DESCRIBE_KEY),
    Grant(
        "function:lambdas.shard_sync.handler.handler",
        "kms:GenerateDataKey",
        "*",
        _DYNAMODB_WRITER_KEY,
    ),
    Grant("consumer-group:*", "kms:GenerateDataKey", "*", _DYNAMODB_WRITER_KEY),
    Grant(REGISTRATION, "kms:GenerateDataKey", "*", _DYNAMODB_WRITER_KEY),
    Grant(TRIMMER, "kms:GenerateDataKey", "*", _DYNAMODB_WRITER_KEY),
)
# Permissions of code paths the workload does not drive, each with the test that does.
NOT_DRIVEN: tuple[Grant, ...] = (
    *(
        Grant(
            REGISTRATION,
            action,
            resource,
            "registering an AT_TIMESTAMP group finds each partition's first record at or after "
            "the timestamp in its segments (seq_at_timestamp; tests/functional/lambda_consumer/"
            "test_start_positions.py, tests/functional/consumer/test_positions.py); the "
            "workload's groups start at TRIM_HORIZON",
        )
        for action, resource in (("s3:ListBucket", "*"), ("s3:GetObject", "*/events/*"))
    ),
    Grant(
        "emr-serverless-job",
        "s3:DeleteObject",
        "*/lake/*",
        "a compaction that lost its commit race deletes its own data files, maintenance deletes "
        "files no snapshot references once past the grace period (tests/spark/"
        "test_compaction.py, test_lake_maintenance.py); the workload's runs win and nothing is "
        "that old",
    ),
    Grant(
        "consumer-group:*",
        "dynamodb:GetItem",
        "*:table/*",
        "a worker withdrawing its handoff request reads the lease (Worker._settle_request; "
        "tests/functional/consumer/test_handoff.py); the workload's one worker asks no handoff",
    ),
    *(
        Grant(
            principal,
            "dynamodb:BatchGetItem",
            "*:table/*",
            "the live set's parents the live index does not show (a retired parent) are read "
            "by key (Tables.live_lineage; tests/functional/consumer/test_live_set.py); the "
            "workload retires no partition while a child of it is live",
        )
        for principal in ("consumer-group:*", "function:lambdas.consumer_waker.handler.handler")
    ),
    Grant(
        REGISTRATION,
        "dynamodb:UpdateItem",
        "*:table/*",
        "registering a group revives the retired partitions it reads (shardlog/retirement.py; "
        "tests/functional/consumer/test_live_set.py); the workload registers its groups "
        "before any partition ended",
    ),
)


@dataclass(frozen=True)
class Outcome:
    call: Call
    need: Need
    identity: Identity
    decision: Decision

    def describe(self) -> str:
        rule = f" [{self.need.why}]" if self.need.why else ""
        return (
            f"{self.call.principal} (role {self.identity.arn}): {self.call.describe()} needs "
            f"{self.need.action} on {self.need.resource}{rule}: {self.decision.reason}"
        )


@dataclass
class ReplayResult:
    deployment: Deployment
    outcomes: list[Outcome] = field(default_factory=list)

    @property
    def denied(self) -> list[Outcome]:
        return [o for o in self.outcomes if not o.decision.allowed]

    @property
    def principals(self) -> list[str]:
        return sorted({o.call.principal for o in self.outcomes})

    def denied_report(self) -> str:
        seen: dict[tuple[str, str, str], tuple[Outcome, int]] = {}
        for outcome in self.denied:
            key = (outcome.call.principal, outcome.need.action, outcome.need.resource)
            first, count = seen.get(key, (outcome, 0))
            seen[key] = (first, count + 1)
        return "\n".join(
            f"- {outcome.describe()} ({count} call{'s' if count > 1 else ''})"
            for outcome, count in seen.values()
        )

    def report(self) -> str:
        """Per principal: each action used, the calls that needed it, what allowed it."""
        lines: list[str] = []
        by_principal: dict[str, list[Outcome]] = defaultdict(list)
        for outcome in self.outcomes:
            by_principal[outcome.call.principal].append(outcome)
        for principal in sorted(by_principal):
            outcomes = by_principal[principal]
            lines.append(f"{principal} (role {outcomes[0].identity.arn})")
            actions: dict[str, list[Outcome]] = defaultdict(list)
            for outcome in outcomes:
                actions[outcome.need.action].append(outcome)
            for action in sorted(actions):
                found = actions[action]
                calls = sorted({o.call.name for o in found})
                allowed = sorted(
                    {s.label for o in found if o.decision.allowed for s in o.decision.allowed_by}
                )
                denied = sum(1 for o in found if not o.decision.allowed)
                verdict = f"DENIED {denied}x" if denied else "allowed by " + ", ".join(allowed)
                lines.append(f"  {action}  ({len(found)}x, {', '.join(calls)}): {verdict}")
        return "\n".join(lines)

    def unused_grants(
        self, exercised: Iterable[str], needed: Sequence[Grant] = NEEDED_BY_AWS + NOT_DRIVEN
    ) -> list[str]:
        """(statement, action) pairs of each exercised principal's identity policies that no
        allowed authorization used and ``needed`` does not explain."""
        used: set[tuple[str, str, str]] = set()
        for outcome in self.outcomes:
            if outcome.decision.allowed:
                for statement in outcome.decision.allowed_by:
                    used.add((outcome.call.principal, statement.source, outcome.need.action))
        unused = []
        for principal in sorted(set(exercised)):
            identity = self.deployment.identity(principal)
            for statement in identity.statements:
                if statement.effect != "Allow":
                    continue
                for action in as_list(statement.body.get("Action")):
                    if _used(used, principal, statement, action):
                        continue
                    if _explained(needed, principal, statement, action):
                        continue
                    unused.append(
                        f"- {principal}: {action} on {as_list(statement.body.get('Resource'))} "
                        f"({statement.label}): no recorded call used it and no reason is listed"
                    )
        return unused


def _used(
    used: set[tuple[str, str, str]], principal: str, statement: Statement, action: str
) -> bool:
    return any(
        p == principal and source == statement.source and action_matches(action, a)
        for p, source, a in used
    )


def _explained(needed: Sequence[Grant], principal: str, statement: Statement, action: str) -> bool:
    resources = [str(r) for r in as_list(statement.body.get("Resource"))]
    return any(
        fnmatchcase(principal, grant.principal)
        and action_matches(grant.action, action)
        and any(fnmatchcase(r, grant.resource) for r in resources)
        for grant in needed
    )


def replay(records: Iterable[dict[str, Any]], deployment: Deployment) -> ReplayResult:
    result = ReplayResult(deployment)
    identities: dict[str, Identity] = {}
    for record in records:
        call = read_call(record)
        identity = identities.get(call.principal)
        if identity is None:
            identity = identities[call.principal] = deployment.identity(call.principal)
        for need in needs(call, Scope(deployment, identity.arn)):
            result.outcomes.append(
                Outcome(call, need, identity, decide(deployment, identity, need))
            )
    return result


def decide(deployment: Deployment, identity: Identity, need: Need) -> Decision:
    kind, resource_statements = deployment.resource_policy(need.resource)
    request = Request(identity.arn, need.action, need.resource, need.context)
    return evaluate(
        request,
        identity.statements,
        resource_statements,
        resource_policy_must_allow=need.key_policy or kind == "key",
    )
