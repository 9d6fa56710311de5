"""Lambda consumer groups in the stack: wake queues, runners, the waker and the sweep, least
privilege, alarms, and the context that declares them."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from aws_cdk import App

from infra import constants as IC
from infra.lambda_consumers import (
    LAMBDA_ENVIRONMENT_BYTES,
    RUNNER_ENVIRONMENT_RESERVE_BYTES,
    check_runner_environment,
)
from infra.settings import SettingsError, StackSettings
from shardlog import constants as C
from shardlog.lambda_consumer.settings import (
    RESOURCE_TYPE,
    group_from_properties,
    group_properties,
)
from tests.infra.cdk_synth import Synthesized, cdk_context

XRAY = {"xray:PutTraceSegments", "xray:PutTelemetryRecords"}


def statements(synth: Synthesized, role: Any) -> list[dict[str, Any]]:
    policy = synth.resources("AWS::IAM::Policy")[
        synth.logical_id(role.node.find_child("DefaultPolicy"))
    ]
    return list(policy["Properties"]["PolicyDocument"]["Statement"])


def actions_of(statement: dict[str, Any]) -> set[str]:
    action = statement["Action"]
    return {action} if isinstance(action, str) else set(action)


def test_each_group_has_an_encrypted_fifo_wake_queue_with_a_dead_letter_queue(
    synth: Synthesized,
) -> None:
    queues = synth.resources("AWS::SQS::Queue")
    for group in synth.stack.lambda_consumers.groups.values():
        wake = queues[synth.logical_id(group.wake_queue)]["Properties"]
        dead = queues[synth.logical_id(group.dead_letters)]["Properties"]
        for queue in (wake, dead):
            assert queue["FifoQueue"] is True and "KmsMasterKeyId" in queue
        assert wake["RedrivePolicy"]["deadLetterTargetArn"] == {
            "Fn::GetAtt": [synth.logical_id(group.dead_letters), "Arn"]
        }
        # A wake stays invisible while a runner may still run.
        assert wake["VisibilityTimeout"] > C.LAMBDA_CONSUMER_RUNNER_TIMEOUT_S


def test_wake_queues_accept_tls_only(synth: Synthesized) -> None:
    policies = synth.resources("AWS::SQS::QueuePolicy").values()
    for group in synth.stack.lambda_consumers.groups.values():
        ref = {"Ref": synth.logical_id(group.wake_queue)}
        [policy] = [p for p in policies if ref in p["Properties"]["Queues"]]
        denies = [
            s for s in policy["Properties"]["PolicyDocument"]["Statement"] if s["Effect"] == "Deny"
        ]
        assert any(s["Condition"] == {"Bool": {"aws:SecureTransport": "false"}} for s in denies)


def test_the_runner_is_woken_one_partition_at_a_time_with_partial_failures(
    synth: Synthesized,
) -> None:
    mappings = synth.resources("AWS::Lambda::EventSourceMapping")
    for group in synth.stack.lambda_consumers.groups.values():
        props = mappings[synth.logical_id(group.event_source)]["Properties"]
        assert props["BatchSize"] == 1
        assert props["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
        assert props["EventSourceArn"] == {
            "Fn::GetAtt": [synth.logical_id(group.wake_queue), "Arn"]
        }


def test_the_runner_may_invoke_only_its_groups_function(synth: Synthesized) -> None:
    groups = synth.stack.lambda_consumers.groups
    invoices = statements(synth, groups["invoices"].runner.role)
    [invoke] = [s for s in invoices if "lambda:InvokeFunction" in actions_of(s)]
    arn = "arn:aws:lambda:us-east-1:123456789012:function:invoices"
    assert invoke["Resource"] == [arn, f"{arn}:*"]
    audit = statements(synth, groups["audit"].runner.role)
    [invoke] = [s for s in audit if "lambda:InvokeFunction" in actions_of(s)]
    assert "audit-consumer" in json.dumps(invoke["Resource"]) and "invoices" not in json.dumps(
        invoke["Resource"]
    )
    everything = [a for s in invoices + audit for a in actions_of(s)]
    assert not any(
        a.endswith("*") and a.startswith(("lambda:", "dynamodb:", "s3:")) for a in everything
    )


def test_the_runner_uses_its_wake_queue_as_the_event_source_and_to_rewake(
    synth: Synthesized,
) -> None:
    """Lambda's SQS event source needs ReceiveMessage, DeleteMessage and GetQueueAttributes;
    the runner sends wakes. Nothing changes a message's visibility (a failed wake simply
    reappears): no ChangeMessageVisibility (the IAM replay found it unused)."""
    for group in synth.stack.lambda_consumers.groups.values():
        queue = {"Fn::GetAtt": [synth.logical_id(group.wake_queue), "Arn"]}
        (statement,) = [s for s in statements(synth, group.runner.role) if s["Resource"] == queue]
        assert actions_of(statement) == {
            "sqs:ReceiveMessage",
            "sqs:DeleteMessage",
            "sqs:GetQueueAttributes",
            "sqs:SendMessage",
        }


def test_the_runner_touches_only_its_groups_items_of_the_consumers_table(
    synth: Synthesized,
) -> None:
    consumers = synth.logical_id(synth.stack.storage.consumers_table)
    for name, group in synth.stack.lambda_consumers.groups.items():
        own = [
            s
            for s in statements(synth, group.runner.role)
            if s["Resource"] == {"Fn::GetAtt": [consumers, "Arn"]}
        ]
        assert own and all(
            s["Condition"]["ForAllValues:StringEquals"]["dynamodb:LeadingKeys"] == [name]
            for s in own
        )


def test_each_group_is_registered_at_deploy_before_its_runner_is_fed(
    synth: Synthesized,
) -> None:
    """One custom resource per group, served by the registration function, with the group's
    start settings; the runner's wake event source waits for it."""
    consumers = synth.stack.lambda_consumers
    assert consumers.registration is not None
    resources = synth.resources(RESOURCE_TYPE)
    mappings = synth.resources("AWS::Lambda::EventSourceMapping")
    registration_arn = {"Fn::GetAtt": [synth.logical_id(consumers.registration.function), "Arn"]}
    for group in consumers.groups.values():
        assert group.registration is not None
        resource_id = synth.logical_id(group.registration)
        props = resources[resource_id]["Properties"]
        assert props.pop("ServiceToken") == registration_arn
        assert props == group_properties(group.settings)
        assert group_from_properties(props).start_position() == group.settings.start_position()
        assert resource_id in mappings[synth.logical_id(group.event_source)]["DependsOn"]
    function = synth.resources("AWS::Lambda::Function")[
        synth.logical_id(consumers.registration.function)
    ]["Properties"]
    assert function["Handler"] == IC.GROUP_REGISTRATION_HANDLER


def test_registration_reads_the_log_and_creates_only_the_groups_items(
    synth: Synthesized,
) -> None:
    """Least privilege: it reads partitions and segments (and revives the retired
    partitions a new group reads: UpdateItem on the partitions table), and may create and
    read the Lambda groups' items only (PutItem is conditional in the code: never an
    overwrite); no update of them, no delete, nothing else."""
    consumers = synth.stack.lambda_consumers
    assert consumers.registration is not None
    storage = synth.stack.storage
    granted = statements(synth, consumers.registration.role)
    by_resource = {json.dumps(s["Resource"], sort_keys=True): s for s in granted}
    table = json.dumps({"Fn::GetAtt": [synth.logical_id(storage.consumers_table), "Arn"]})
    own = by_resource[table]
    assert actions_of(own) == {"dynamodb:GetItem", "dynamodb:PutItem"}
    leading_keys = own["Condition"]["ForAllValues:StringEquals"]["dynamodb:LeadingKeys"]
    assert set(leading_keys) == set(consumers.groups)
    partitions = json.dumps(
        {"Fn::GetAtt": [synth.logical_id(storage.partitions_table), "Arn"]}, sort_keys=True
    )
    # Scan: the partitions at creation, history included; UpdateItem: the revival of the
    # retired ones the group reads (shardlog/retirement.py).
    assert actions_of(by_resource[partitions]) == {"dynamodb:Scan", "dynamodb:UpdateItem"}
    everything = {a for s in granted for a in actions_of(s)}
    assert everything - XRAY == {
        "logs:CreateLogStream",
        "logs:PutLogEvents",
        "dynamodb:GetItem",
        "dynamodb:PutItem",
        "dynamodb:Scan",
        "dynamodb:UpdateItem",
        "s3:ListBucket",
        "s3:GetObject",
        "kms:Decrypt",
        "kms:DescribeKey",
        "kms:GenerateDataKey",
    }


def test_the_on_failure_destination_is_the_given_one_or_a_retained_queue(
    synth: Synthesized,
) -> None:
    groups = synth.stack.lambda_consumers.groups
    invoices = groups["invoices"]
    assert invoices.failure_queue is not None
    queue = synth.resources("AWS::SQS::Queue")[synth.logical_id(invoices.failure_queue)]
    assert queue["DeletionPolicy"] == "Retain"
    audit = statements(synth, groups["audit"].runner.role)
    [publish] = [s for s in audit if "sns:Publish" in actions_of(s)]
    assert publish["Resource"] == "arn:aws:sns:us-east-1:123456789012:audit-failures"


def test_the_runner_gets_its_validated_group_settings(synth: Synthesized) -> None:
    functions = synth.resources("AWS::Lambda::Function")
    runner = functions[
        synth.logical_id(synth.stack.lambda_consumers.groups["invoices"].runner.function)
    ]
    props = runner["Properties"]
    assert props["Handler"] == IC.LAMBDA_CONSUMER_HANDLER
    assert props["Timeout"] == C.LAMBDA_CONSUMER_RUNNER_TIMEOUT_S
    document = json.dumps(props["Environment"]["Variables"][C.ENV_LAMBDA_CONSUMER])
    for expected in (
        '\\"batch_size\\":50',
        '\\"group\\":\\"invoices\\"',
        '\\"maximum_retry_attempts\\":3',
    ):
        assert expected in document, expected


def test_commits_and_a_sweep_wake_the_groups(synth: Synthesized) -> None:
    consumers = synth.stack.lambda_consumers
    partitions = synth.resources("AWS::DynamoDB::Table")[
        synth.logical_id(synth.stack.storage.partitions_table)
    ]
    assert partitions["Properties"]["StreamSpecification"] == {
        "StreamViewType": "NEW_AND_OLD_IMAGES"
    }
    stream = synth.resources("AWS::Lambda::EventSourceMapping")[
        synth.logical_id(consumers.stream_source)
    ]
    assert stream["Properties"]["EventSourceArn"] == {
        "Fn::GetAtt": [synth.logical_id(synth.stack.storage.partitions_table), "StreamArn"]
    }
    assert stream["Properties"]["BisectBatchOnFunctionError"] is True
    rule = synth.resources("AWS::Events::Rule")[synth.logical_id(consumers.sweep)]["Properties"]
    assert rule["ScheduleExpression"] == "rate(1 minute)"
    assert consumers.waker is not None
    waker = statements(synth, consumers.waker.role)
    [send] = [s for s in waker if actions_of(s) == {"sqs:SendMessage"}]
    assert len(send["Resource"]) == len(consumers.groups)


def test_alarms_watch_lag_give_ups_and_dead_lettered_wakes(synth: Synthesized) -> None:
    alarms = synth.resources("AWS::CloudWatch::Alarm").values()
    described = " ".join(a["Properties"].get("AlarmDescription", "") for a in alarms)
    for group in ("invoices", "audit"):
        assert f"group {group!r} is more than 15 minutes behind" in described
        assert f"group {group!r} gave up on records" in described
        assert f"Wakes of Lambda consumer group {group!r}" in described
    lag = [a for a in alarms if a["Properties"].get("MetricName") == C.METRIC_CONSUMER_LAG_MS]
    assert {
        d["Value"]
        for a in lag
        for d in a["Properties"]["Dimensions"]
        if d["Name"] == C.DIMENSION_CONSUMER_GROUP
    } == {"invoices", "audit"}


def _settings(tmp_path: Path, value: Any, **more: Any) -> StackSettings:
    app = App(context=cdk_context(**{IC.CTX_LAMBDA_CONSUMERS: value, **more}), outdir=str(tmp_path))
    return StackSettings.from_context(app.node)


def test_groups_come_from_context_in_camel_case(tmp_path: Path) -> None:
    raw = {"group": "g", "functionName": "f", "batchingWindowMs": 500, "parallelizationFactor": 10}
    [group] = _settings(tmp_path, json.dumps([raw])).lambda_consumers
    assert (group.group, group.function_name, group.batching_window_ms) == ("g", "f", 500)
    assert group.parallelization_factor == 10


def test_filter_criteria_come_from_context_as_lambda_writes_them(tmp_path: Path) -> None:
    pattern = json.dumps({"data": {"type": ["buy"]}})
    [group] = _settings(
        tmp_path,
        [
            {
                "group": "g",
                "functionName": "f",
                "filterCriteria": {"Filters": [{"Pattern": pattern}]},
            }
        ],
    ).lambda_consumers
    assert [p.pattern for p in group.filter_criteria] == ['{"data":{"type":["buy"]}}']


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("not json", "is not JSON"),
        ({"group": "g"}, "must be a list"),
        (["g"], "is not an object"),
        ([{"group": "g", "functionName": "f", "batchSize": 10_001}], "group 'g': batchSize: "),
        (
            [
                {
                    "group": "g",
                    "functionName": "f",
                    "filterCriteria": [
                        {"pattern": {"partitionKey": ["a"]}},
                        {"pattern": {"data": {"amount": [{"numeric": [">", "ten"]}]}}},
                    ],
                }
            ],
            "group 'g': filterCriteria[1].pattern.data.amount[0].numeric: must be a number",
        ),
        (
            [{"group": "g", "functionName": "f", "filterCriteria": [{"pattern": "{}"}] * 6}],
            "filterCriteria: 6 filters: at most 5",
        ),
        ([{"group": "g", "functionName": "f", "parallelizationFactor": 0}], "parallelization"),
        ([{"group": "g", "functionName": "f", "parallelizationFactor": 11}], "parallelization"),
        ([{"group": "$ingest", "functionName": "f"}], "group '$ingest'"),
        (
            [{"group": "g", "functionName": "f"}, {"group": "g", "functionName": "h"}],
            "names a group twice",
        ),
    ],
)
def test_bad_groups_fail_synth_naming_the_setting(tmp_path: Path, value: Any, message: str) -> None:
    with pytest.raises(SettingsError, match=re.escape(message)):
        _settings(tmp_path, value)


def test_a_group_is_workers_or_a_lambda_function_not_both(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="not both"):
        _settings(
            tmp_path, [{"group": "g", "functionName": "f"}], **{IC.CTX_CONSUMER_GROUPS: ["g"]}
        )


def test_filters_past_the_runners_environment_fail_synth_not_the_deploy() -> None:
    room = LAMBDA_ENVIRONMENT_BYTES - RUNNER_ENVIRONMENT_RESERVE_BYTES
    check_runner_environment("g", "x" * room, "[]")
    with pytest.raises(SettingsError, match=r"group 'g': filterCriteria \(2 bytes as JSON\)"):
        check_runner_environment("g", "x" * (room + 1), "[]")
    with pytest.raises(SettingsError, match="4097 of the 4096 bytes"):
        check_runner_environment("g", "é" * (room // 2) + "x", "[]")  # bytes, not characters
