"""Record retention in the stack: the lifecycle rule for trimmed segments exists only when
`shardlog:recordRetentionDays` is set, is the rule the local runtime applies, and leaves the
bucket policy's denies of every principal's delete and unconditional put on events/ as
they are."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from aws_cdk import App, Stack
from aws_cdk.assertions import Template

from infra import constants as IC
from infra.assets import lambda_code
from infra.retention import Retention
from infra.settings import SettingsError, StackSettings
from infra.storage import Storage
from shardlog import constants as C
from shardlog.retention import expiry_rule
from tests.infra import cdk_synth
from tests.infra.cdk_synth import cdk_context
from tests.infra.test_cdk_nag import unacknowledged_findings
from tests.infra.test_cdk_storage import _events, _log_bucket_statements


def _storage(**context: Any) -> tuple[Template, Storage]:
    app = App(context=cdk_context(**context))
    stack = Stack(app, "StorageOnly")
    storage = Storage(stack, "Storage", settings=StackSettings.from_context(stack.node))
    return Template.from_stack(stack), storage


def _rules(template: Template, storage: Storage) -> dict[str, dict[str, Any]]:
    bucket = template.to_json()["Resources"][cdk_synth.logical_id(storage.bucket)]
    return {r["Id"]: r for r in bucket["Properties"]["LifecycleConfiguration"]["Rules"]}


def test_no_expiry_rule_without_the_setting_keep_forever() -> None:
    template, storage = _storage()
    assert storage.settings.record_retention_days is None
    rules = _rules(template, storage)
    assert expiry_rule(1)["ID"] not in rules
    assert not any("ExpirationInDays" in r for r in rules.values())


def test_the_expiry_rule_is_the_one_the_local_runtime_applies() -> None:
    template, storage = _storage(**{IC.CTX_RECORD_RETENTION_DAYS: "30"})
    declared = expiry_rule(30)
    rule = _rules(template, storage)[str(declared["ID"])]
    api: Any = declared
    assert rule == {
        "Id": api["ID"],
        "Status": api["Status"],
        "Prefix": api["Filter"]["And"]["Prefix"],
        "TagFilters": api["Filter"]["And"]["Tags"],
        "ExpirationInDays": api["Expiration"]["Days"],
        "NoncurrentVersionExpiration": api["NoncurrentVersionExpiration"],
    }
    assert rule["Prefix"] == C.EVENTS_PREFIX
    assert rule["TagFilters"] == [{"Key": C.EXPIRY_TAG_KEY, "Value": C.EXPIRY_TAG_VALUE}]


def test_with_retention_the_bucket_policy_still_denies_every_delete_and_unconditional_put() -> None:
    template, storage = _storage(**{IC.CTX_RECORD_RETENTION_DAYS: "7"})
    bucket_id = cdk_synth.logical_id(storage.bucket)
    statements = _log_bucket_statements(template, bucket_id)
    deletes = statements["DenySegmentDeletes"]
    assert (deletes["Effect"], deletes["Principal"], deletes["Action"]) == (
        "Deny",
        {"AWS": "*"},
        "s3:DeleteObject*",
    )
    assert deletes["Resource"] == _events(bucket_id) and "Condition" not in deletes
    puts = statements["DenySegmentWritesWithoutIfNoneMatch"]
    assert (puts["Effect"], puts["Principal"], puts["Action"]) == (
        "Deny",
        {"AWS": "*"},
        "s3:PutObject",
    )
    assert puts["Condition"]["Null"] == {"s3:if-none-match": "true"}
    allows = [s for s in statements.values() if s["Effect"] == "Allow"]
    assert not any("Delete" in str(s["Action"]) for s in allows)


@pytest.mark.parametrize(
    ("days", "ok"), [("0", False), ("1", True), ("36500", True), ("36501", False)]
)
def test_record_retention_days_limits(days: str, ok: bool) -> None:
    if ok:
        assert _storage(**{IC.CTX_RECORD_RETENTION_DAYS: days})[1].settings.record_retention_days
    else:
        with pytest.raises((SettingsError, ValueError), match=IC.CTX_RECORD_RETENTION_DAYS):
            _storage(**{IC.CTX_RECORD_RETENTION_DAYS: days})


def _with_trimmer(days: str) -> tuple[Template, Storage, Retention]:
    app = App(context=cdk_context(**{IC.CTX_RECORD_RETENTION_DAYS: days}))
    stack = Stack(app, "RetentionOnly")
    settings = StackSettings.from_context(stack.node)
    storage = Storage(stack, "Storage", settings=settings)
    code = lambda_code()  # the asset as shipped
    retention = Retention(
        stack, "Retention", storage=storage, settings=settings, code=code, days=int(days)
    )
    return Template.from_stack(stack), storage, retention


def test_the_trimmer_may_tag_and_list_events_but_never_delete_or_put_an_object() -> None:
    template, storage, retention = _with_trimmer("7")
    resources = template.to_json()["Resources"]
    role = retention.trimmer.role
    [policy] = [
        r["Properties"]["PolicyDocument"]["Statement"]
        for r in resources.values()
        if r["Type"] == "AWS::IAM::Policy"
        and {"Ref": cdk_synth.logical_id(role)} in r["Properties"]["Roles"]
    ]
    by_action: dict[str, list[Any]] = {}
    for statement in policy:
        actions = statement["Action"]
        for action in [actions] if isinstance(actions, str) else actions:
            by_action.setdefault(action, []).append(statement)
    assert set(by_action) == {
        "logs:CreateLogStream",
        "logs:PutLogEvents",
        "dynamodb:GetItem",
        "dynamodb:Scan",
        "dynamodb:UpdateItem",
        "s3:ListBucket",
        "s3:PutObjectTagging",
        "kms:Decrypt",
        "kms:DescribeKey",
        "kms:GenerateDataKey",
        "xray:PutTraceSegments",  # tracing, as every function of the stack
        "xray:PutTelemetryRecords",
    }
    bucket_id = cdk_synth.logical_id(storage.bucket)
    [tagging] = by_action["s3:PutObjectTagging"]
    assert tagging["Resource"] == _events(bucket_id)
    [listing] = by_action["s3:ListBucket"]
    assert listing["Condition"] == {"StringLike": {"s3:prefix": [f"{C.EVENTS_PREFIX}*"]}}
    [update] = by_action["dynamodb:UpdateItem"]
    partitions = {"Fn::GetAtt": [cdk_synth.logical_id(storage.partitions_table), "Arn"]}
    assert update["Resource"] == partitions  # the consumers table is only scanned


def test_the_trimmer_runs_daily_with_the_retention_in_its_environment() -> None:
    template, _, retention = _with_trimmer("30")
    resources = template.to_json()["Resources"]
    function = resources[cdk_synth.logical_id(retention.trimmer.function)]["Properties"]
    assert function["Environment"]["Variables"][C.ENV_RECORD_RETENTION_DAYS] == "30"
    assert function["Handler"] == IC.TRIMMER_HANDLER
    rule = resources[cdk_synth.logical_id(retention.schedule)]["Properties"]
    assert rule["ScheduleExpression"] == "rate(1 day)"
    assert rule["Targets"][0]["Arn"] == {
        "Fn::GetAtt": [cdk_synth.logical_id(retention.trimmer.function), "Arn"]
    }


def test_the_whole_stack_with_retention_has_no_unacknowledged_finding(tmp_path: Path) -> None:
    synth = cdk_synth.synthesize(
        tmp_path, context=cdk_context(**{IC.CTX_RECORD_RETENTION_DAYS: "7"})
    )
    assert synth.stack.retention is not None
    assert unacknowledged_findings(synth.stack) == []
