"""Monitoring: the dashboard shows the pipeline; alarms reach an encrypted SNS topic."""

from __future__ import annotations

import json
from typing import Any

from infra import constants as IC
from tests.infra.cdk_synth import Synthesized


def _alarms(synth: Synthesized) -> dict[str, dict[str, Any]]:
    """Alarms by metric name."""
    return {
        a["Properties"]["MetricName"]: a["Properties"]
        for a in synth.resources("AWS::CloudWatch::Alarm").values()
    }


def test_alarms_cover_the_failure_modes(synth: Synthesized) -> None:
    alarms = _alarms(synth)
    assert {
        "Errors",  # ingest and shard sync
        "IteratorAge",
        "ApproximateNumberOfMessagesVisible",
        "5XXError",
        "WriteProvisionedThroughputExceeded",
        "FailedJobs",
    } <= set(alarms)
    failure_queue = synth.logical_id(synth.stack.ingest.failure_queue)
    depth = alarms["ApproximateNumberOfMessagesVisible"]
    assert depth["Dimensions"][0]["Value"] == {"Fn::GetAtt": [failure_queue, "QueueName"]}
    assert depth["Threshold"] == 1
    age = alarms["IteratorAge"]
    assert age["Threshold"] == IC.DEFAULT_ITERATOR_AGE_ALARM_MINUTES * 60 * 1000
    assert age["Statistic"] == "Maximum"
    errored = [
        a
        for a in synth.resources("AWS::CloudWatch::Alarm").values()
        if a["Properties"]["MetricName"] == "Errors"
    ]
    functions = {json.dumps(a["Properties"]["Dimensions"]) for a in errored}
    for fn in (synth.stack.ingest.function, synth.stack.ingest.shard_sync.function):
        assert any(synth.logical_id(fn) in d for d in functions)


def test_every_alarm_notifies_the_topic(synth: Synthesized) -> None:
    topic = {"Ref": synth.logical_id(synth.stack.monitoring.topic)}
    alarms = synth.resources("AWS::CloudWatch::Alarm")
    assert alarms
    for logical_id, alarm in alarms.items():
        assert topic in alarm["Properties"]["AlarmActions"], logical_id


def test_alarm_topic_is_encrypted_and_tls_only(synth: Synthesized) -> None:
    (topic,) = synth.resources("AWS::SNS::Topic").values()
    assert "KmsMasterKeyId" in topic["Properties"]
    (policy,) = synth.resources("AWS::SNS::TopicPolicy").values()
    statements = policy["Properties"]["PolicyDocument"]["Statement"]
    assert any(
        s["Effect"] == "Deny" and s["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
        for s in statements
    )


def test_dashboard_shows_the_pipeline(synth: Synthesized) -> None:
    (dashboard,) = synth.resources("AWS::CloudWatch::Dashboard").values()
    body = json.dumps(synth.stack.resolve(dashboard["Properties"]["DashboardBody"]))
    for metric in (
        "IncomingRecords",
        "IncomingBytes",
        IC.METRIC_RECORDS_INGESTED,
        "IteratorAge",
        IC.METRIC_CONSUMER_LAG_RECORDS,
        "Errors",
        "ApproximateNumberOfMessagesVisible",
        "SuccessJobs",
        "FailedJobs",
    ):
        assert metric in body, metric
    assert "SEARCH(" in body  # consumer lag: one line per consumer group
