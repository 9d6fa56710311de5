"""An audit of a whole test run: every action each function's code asked for, against the
actions its synthesized policies allow.

    SHARDLOG_REQUEST_LOG=/tmp/shardlog-requests make test
    .venv/bin/python -m tests.support.iam.audit /tmp/shardlog-requests

Each process that serves an embedded AWS appends its requests to
``requests-<pid>.jsonl`` there (``shardlog.local.request_log``). The tests name their resources
at random, and their Lambda consumer and worker groups are not the test stack's, so this audit
checks *actions* only: every authorization a recorded call needs (implicit ones included) must
be allowed by some Allow statement of that principal's identity policies, whatever its resource
and conditions; a group's runner or workers are checked against the test stack's first group
of that kind. ``tests/infra/test_iam_replay.py`` checks resources, conditions and resource
policies too, on its own workload. Exit status 1 when an action is missing.
"""

from __future__ import annotations

import sys
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

from shardlog.local import principals
from shardlog.local.request_log import read_json_lines
from tests.support.iam.authorize import Scope, needs
from tests.support.iam.calls import read_call
from tests.support.iam.deployment import Deployment, Identity, TemplateError
from tests.support.iam.policy import action_matches, as_list


def stand_in_identity(deployment: Deployment, principal: str) -> Identity:
    """The principal's identity, or for a group the template doesn't have, one that holds
    the statements of every group of that kind in the test stack (their destinations differ:
    a queue, a topic)."""
    try:
        return deployment.identity(principal)
    except TemplateError:
        pass
    if "#" in principal:
        handler = principal.split("#", 1)[0]
        kind = [f"{handler}#{g}" for g in _groups(deployment, "LambdaConsumerGroups")]
    elif principal.startswith(principals.CONSUMER_GROUP):
        groups = _groups(deployment, "ConsumerGroupPolicyArns")
        kind = [principals.consumer_group(g) for g in groups]
    else:
        kind = []
    if not kind:
        raise TemplateError(f"{principal}: no identity of the template stands for it")
    identities = [deployment.identity(p) for p in kind]
    statements = tuple(s for identity in identities for s in identity.statements)
    return Identity(principal, identities[0].arn, statements, identities[0].role_id)


def _groups(deployment: Deployment, output: str) -> list[str]:
    value = deployment.output_json().get(output, {})
    return sorted(value) if isinstance(value, dict) else []


def audit(records: list[dict[str, Any]], deployment: Deployment) -> tuple[str, list[str]]:
    """(per principal: the actions used and how often, the missing actions)."""
    used: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    missing: dict[tuple[str, str], str] = {}
    identities: dict[str, Identity] = {}
    for record in records:
        call = read_call(record)
        if call.principal not in identities:
            identities[call.principal] = stand_in_identity(deployment, call.principal)
        identity = identities[call.principal]
        for need in needs(call, Scope(deployment, identity.arn)):
            used[call.principal][need.action] += 1
            allowed = any(
                s.effect == "Allow"
                and any(action_matches(a, need.action) for a in as_list(s.body.get("Action")))
                for s in identity.statements
            )
            if not allowed and not (need.key_policy and _key_policy_names(deployment, need)):
                missing.setdefault((call.principal, need.action), call.describe())
    lines = []
    for principal in sorted(used):
        lines.append(principal)
        lines += [f"  {action} ({count}x)" for action, count in sorted(used[principal].items())]
    problems = [
        f"- {p}: {a} is allowed by none of its statements (e.g. {c})"
        for (p, a), c in missing.items()
    ]
    return "\n".join(lines), problems


def _key_policy_names(deployment: Deployment, need: Any) -> bool:
    """A KMS action the key policy grants the principal by name (not through IAM)."""
    _kind, statements = deployment.resource_policy(need.resource)
    arn = need.context.get("aws:PrincipalArn")
    return any(
        s.effect == "Allow"
        and arn in as_list((s.body.get("Principal") or {}).get("AWS"))
        and any(action_matches(a, need.action) for a in as_list(s.body.get("Action")))
        for s in statements
    )


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__)
        return 2
    from tests.infra.cdk_synth import synthesize

    records = read_json_lines(Path(argv[0]))
    with tempfile.TemporaryDirectory(prefix="shardlog-audit-") as outdir:
        deployment = Deployment(synthesize(Path(outdir)).json)
    report, problems = audit(records, deployment)
    print(f"{len(records)} recorded requests\n{report}")
    if problems:
        print("\nactions no policy allows:\n" + "\n".join(problems))
        return 1
    print("\nevery action used is allowed")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
