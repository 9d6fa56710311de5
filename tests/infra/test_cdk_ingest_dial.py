"""The ingest dial in the template: batch size and window as set, and an enhanced fan-out
consumer read with grants on that consumer only (fan-out is not exercised locally: moto has
no stream consumers, so the grants are asserted here, in the synthesized template)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from infra import constants as IC
from infra.ingest import KINESIS_ESM_ACTIONS
from tests.infra.cdk_synth import Synthesized, cdk_context, synthesize

SUBSCRIBE = {"kinesis:SubscribeToShard", "kinesis:DescribeStreamConsumer"}
POLL = {"kinesis:GetRecords", "kinesis:GetShardIterator"}


@pytest.fixture(scope="module")
def dialled(tmp_path_factory: pytest.TempPathFactory) -> Synthesized:
    """The largest batch, the longest window, read through a fan-out consumer."""
    context = cdk_context(
        **{
            IC.CTX_INGEST_BATCH_SIZE: "10000",
            IC.CTX_INGEST_BATCHING_WINDOW_MS: "300000",
            IC.CTX_INGEST_FAN_OUT: "true",
        }
    )
    return synthesize(Path(tmp_path_factory.mktemp("cdk.dialled")), context=context)


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def _ingest_grants(synth: Synthesized) -> dict[str, set[str]]:
    """resource (rendered) -> the Kinesis actions the ingest role has on it."""
    role = {"Ref": synth.logical_id(synth.stack.ingest.ingest.role)}
    grants: dict[str, set[str]] = {}
    for policy in synth.resources("AWS::IAM::Policy").values():
        if role not in policy["Properties"].get("Roles", []):
            continue
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
            actions = {a for a in _as_list(statement["Action"]) if a.startswith("kinesis:")}
            for resource in _as_list(statement["Resource"]):
                if actions:
                    grants.setdefault(str(resource), set()).update(actions)
    return grants


def test_default_batch_and_window_are_those_of_before(synth: Synthesized) -> None:
    props = synth.ingest_mapping()["Properties"]
    assert (props["BatchSize"], props["MaximumBatchingWindowInSeconds"]) == (1000, 1)


def test_batch_size_and_window_reach_the_mapping_in_whole_seconds(dialled: Synthesized) -> None:
    props = dialled.ingest_mapping()["Properties"]
    assert props["BatchSize"] == 10_000
    assert props["MaximumBatchingWindowInSeconds"] == 300


def test_fan_out_reads_through_a_consumer_of_the_stream(dialled: Synthesized) -> None:
    (consumer_id, consumer), *others = dialled.resources("AWS::Kinesis::StreamConsumer").items()
    assert not others
    stream = dialled.logical_id(dialled.stack.storage.stream)
    assert consumer["Properties"]["StreamARN"] == {"Fn::GetAtt": [stream, "Arn"]}
    props = dialled.ingest_mapping()["Properties"]
    assert props["EventSourceArn"] == {"Fn::GetAtt": [consumer_id, "ConsumerARN"]}
    # What makes the log exactly once does not change with the way records arrive.
    assert props["ParallelizationFactor"] == 1
    assert props["MaximumRetryAttempts"] == -1
    assert props["BisectBatchOnFunctionError"] is True


def test_fan_out_grants_subscribe_on_the_consumer_only(dialled: Synthesized) -> None:
    (consumer_id,) = dialled.resources("AWS::Kinesis::StreamConsumer")
    consumer = str({"Fn::GetAtt": [consumer_id, "ConsumerARN"]})
    stream = str({"Fn::GetAtt": [dialled.logical_id(dialled.stack.storage.stream), "Arn"]})
    grants = _ingest_grants(dialled)
    assert grants[consumer] == SUBSCRIBE
    # The stream: shard discovery only; no poll (GetRecords) where records are pushed.
    assert grants[stream] == set(KINESIS_ESM_ACTIONS) - POLL
    assert set(grants) == {consumer, stream}


def test_without_fan_out_no_consumer_and_no_subscribe(synth: Synthesized) -> None:
    assert synth.resources("AWS::Kinesis::StreamConsumer") == {}
    stream = str({"Fn::GetAtt": [synth.logical_id(synth.stack.storage.stream), "Arn"]})
    assert _ingest_grants(synth) == {stream: set(KINESIS_ESM_ACTIONS)}


def test_fan_out_keeps_the_iterator_age_alarms(dialled: Synthesized) -> None:
    """Lambda's IteratorAge of the function measures a fan-out mapping too (the stream's
    GetRecords.IteratorAgeMilliseconds would not: nothing polls)."""
    monitoring = dialled.stack.monitoring
    function = dialled.logical_id(dialled.stack.ingest.function)
    alarms = dialled.resources("AWS::CloudWatch::Alarm")
    for construct_id in ("IngestIteratorAge", "IngestRecordsHalfwayToGivenUp"):
        alarm = monitoring.node.find_child(construct_id)
        props = alarms[dialled.logical_id(alarm)]["Properties"]
        assert props["MetricName"] == "IteratorAge"
        assert {"Name": "FunctionName", "Value": {"Ref": function}} in props["Dimensions"]
