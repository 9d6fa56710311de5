"""Monitoring: no silent failure. Every failure mode has an alarm that reaches a subscriber;
the dashboard shows the pipeline, its limits and its errors."""

from __future__ import annotations

import json
from typing import Any

import pytest

from infra import constants as IC
from shardlog import constants as C
from tests.infra.cdk_synth import TEST_ALARM_EMAIL, Synthesized, cdk_context, synthesize


def _alarm(synth: Synthesized, construct_id: str) -> dict[str, Any]:
    """An alarm's properties, by its construct id in Monitoring."""
    alarm = synth.stack.monitoring.node.find_child(construct_id)
    return synth.resources("AWS::CloudWatch::Alarm")[synth.logical_id(alarm)]["Properties"]


def _metric_alarms(synth: Synthesized) -> dict[str, list[dict[str, Any]]]:
    """Single-metric alarms by metric name."""
    alarms: dict[str, list[dict[str, Any]]] = {}
    for alarm in synth.resources("AWS::CloudWatch::Alarm").values():
        props = alarm["Properties"]
        if "MetricName" in props:
            alarms.setdefault(props["MetricName"], []).append(props)
    return alarms


def test_alarms_cover_the_failure_modes(synth: Synthesized) -> None:
    alarms = _metric_alarms(synth)
    assert {
        "Errors",  # ingest, shard sync, Spark trigger
        "IteratorAge",
        "ApproximateNumberOfMessagesVisible",  # failure queue, Spark dead letters
        "5XXError",
        "WriteProvisionedThroughputExceeded",
        "FailedJobs",
        "Throttles",
        C.METRIC_COMMIT_FENCED,
        C.METRIC_LEASE_TOO_SHORT,
    } <= set(alarms)
    depth = _alarm(synth, "IngestFailureQueueDepth")
    failure_queue = synth.logical_id(synth.stack.ingest.failure_queue)
    assert depth["Dimensions"][0]["Value"] == {"Fn::GetAtt": [failure_queue, "QueueName"]}
    assert depth["Threshold"] == 1
    age = _alarm(synth, "IngestIteratorAge")
    assert age["Threshold"] == IC.DEFAULT_ITERATOR_AGE_ALARM_MINUTES * 60 * 1000
    assert age["Statistic"] == "Maximum"
    functions = {json.dumps(a["Dimensions"]) for a in alarms["Errors"]}
    stack = synth.stack
    for fn in (
        stack.ingest.function,
        stack.ingest.shard_sync.function,
        stack.analytics.trigger.function,
    ):
        assert any(synth.logical_id(fn) in d for d in functions), fn.node.path


def test_stall_alarm_fires_when_records_arrive_but_none_commit(synth: Synthesized) -> None:
    stall = _alarm(synth, "IngestStalled")
    # A stalled event source mapping invokes nothing, so ingest publishes nothing at all.
    assert stall["TreatMissingData"] == "breaching"
    assert stall["EvaluationPeriods"] == 3
    assert stall["ComparisonOperator"] == "GreaterThanOrEqualToThreshold"
    assert stall["Threshold"] == 1
    queries = {q["Id"]: q for q in stall["Metrics"]}
    (expression,) = [q for q in queries.values() if "Expression" in q]
    assert expression["ReturnData"] is True
    assert "incoming > 0" in expression["Expression"]
    assert "FILL(ingested, 0) <= 0" in expression["Expression"]
    incoming = queries["incoming"]["MetricStat"]["Metric"]
    assert (incoming["Namespace"], incoming["MetricName"]) == ("AWS/Kinesis", "IncomingRecords")
    ingested = queries["ingested"]["MetricStat"]["Metric"]
    assert (ingested["Namespace"], ingested["MetricName"]) == (
        C.METRICS_NAMESPACE,
        C.METRIC_RECORDS_INGESTED,
    )


def test_other_alarms_treat_missing_data_as_nothing_failed(synth: Synthesized) -> None:
    for logical_id, alarm in synth.resources("AWS::CloudWatch::Alarm").items():
        if logical_id == synth.logical_id(synth.stack.monitoring.node.find_child("IngestStalled")):
            continue
        assert alarm["Properties"]["TreatMissingData"] == "notBreaching", logical_id


def test_records_half_way_to_given_up_raise_an_alarm(synth: Synthesized) -> None:
    halfway = _alarm(synth, "IngestRecordsHalfwayToGivenUp")
    assert halfway["MetricName"] == "IteratorAge"
    assert halfway["Threshold"] == synth.stack.settings.max_record_age_s * 1000 // 2


def test_fenced_commits_are_counted_apart_and_alarmed_when_sustained(synth: Synthesized) -> None:
    fenced = _alarm(synth, "IngestCommitsFenced")
    assert (fenced["Namespace"], fenced["MetricName"]) == (
        C.METRICS_NAMESPACE,
        C.METRIC_COMMIT_FENCED,
    )
    assert fenced["Dimensions"] == [{"Name": "service", "Value": C.POWERTOOLS_SERVICE_NAME}]
    assert fenced["EvaluationPeriods"] == 3 and fenced["Threshold"] == 1
    assert C.METRIC_COMMIT_FENCED != C.METRIC_BATCH_FAILED
    too_short = _alarm(synth, "IngestLeaseTooShort")
    assert too_short["MetricName"] == C.METRIC_LEASE_TOO_SHORT and too_short["Threshold"] == 1


def test_spark_starts_that_fail_are_alarmed(synth: Synthesized) -> None:
    analytics = synth.stack.analytics
    errors = _alarm(synth, "SparkTriggerErrors")
    assert errors["MetricName"] == "Errors"
    assert synth.logical_id(analytics.trigger.function) in json.dumps(errors["Dimensions"])
    dead = _alarm(synth, "SparkDeadLetters")
    assert dead["MetricName"] == "ApproximateNumberOfMessagesVisible"
    assert dead["Dimensions"][0]["Value"] == {
        "Fn::GetAtt": [synth.logical_id(analytics.dead_letter_queue), "QueueName"]
    }


def test_api_alarm_names_this_stacks_api(synth: Synthesized) -> None:
    server = _alarm(synth, "ProducerApiServerErrors")
    (dimension,) = server["Dimensions"]
    assert dimension["Name"] == "ApiName"
    assert dimension["Value"] == f"{synth.stack.stack_name}-{IC.API_NAME_SUFFIX}"
    (api,) = synth.resources("AWS::ApiGateway::RestApi").values()
    assert api["Properties"]["Name"] == dimension["Value"]


def test_every_alarm_notifies_the_topic(synth: Synthesized) -> None:
    topic = {"Ref": synth.logical_id(synth.stack.monitoring.topic)}
    alarms = synth.resources("AWS::CloudWatch::Alarm")
    assert alarms
    for logical_id, alarm in alarms.items():
        assert topic in alarm["Properties"]["AlarmActions"], logical_id


def test_someone_is_subscribed_to_the_topic(synth: Synthesized) -> None:
    topic = {"Ref": synth.logical_id(synth.stack.monitoring.topic)}
    (subscription,) = synth.resources("AWS::SNS::Subscription").values()
    assert subscription["Properties"] == {
        "Protocol": "email",
        "TopicArn": topic,
        "Endpoint": TEST_ALARM_EMAIL,
    }


@pytest.fixture(scope="module")
def unsubscribed(tmp_path_factory: pytest.TempPathFactory) -> Synthesized:
    context = cdk_context(**{IC.CTX_NO_ALARM_SUBSCRIBER: "true"})
    del context[IC.CTX_ALARM_EMAIL]
    return synthesize(tmp_path_factory.mktemp("cdk.out"), context=context)


def test_no_subscriber_only_when_asked_and_then_synth_warns(unsubscribed: Synthesized) -> None:
    assert unsubscribed.resources("AWS::SNS::Subscription") == {}
    monitoring = unsubscribed.stack.monitoring
    warnings = [str(e.data) for e in monitoring.node.metadata if e.type == "aws:cdk:warning"]
    assert any(IC.CTX_NO_ALARM_SUBSCRIBER in w for w in warnings), warnings


def test_alarm_topic_is_encrypted_and_tls_only(synth: Synthesized) -> None:
    (topic,) = synth.resources("AWS::SNS::Topic").values()
    assert "KmsMasterKeyId" in topic["Properties"]
    (policy,) = synth.resources("AWS::SNS::TopicPolicy").values()
    statements = policy["Properties"]["PolicyDocument"]["Statement"]
    assert any(
        s["Effect"] == "Deny" and s["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
        for s in statements
    )


def test_alarm_key_serves_only_this_accounts_alarms(synth: Synthesized) -> None:
    key = synth.stack.monitoring.node.find_child("AlarmTopicKey")
    statements = synth.resources("AWS::KMS::Key")[synth.logical_id(key)]["Properties"]["KeyPolicy"][
        "Statement"
    ]
    (cloudwatch,) = [
        s for s in statements if s["Principal"] == {"Service": "cloudwatch.amazonaws.com"}
    ]
    condition = cloudwatch["Condition"]
    assert condition["StringEquals"] == {"aws:SourceAccount": {"Ref": "AWS::AccountId"}}
    source = json.dumps(condition["ArnLike"]["aws:SourceArn"])
    assert ":cloudwatch:" in source and ":alarm:*" in source and "AWS::AccountId" in source


def test_dashboard_shows_the_pipeline(synth: Synthesized) -> None:
    (dashboard,) = synth.resources("AWS::CloudWatch::Dashboard").values()
    body = json.dumps(synth.stack.resolve(dashboard["Properties"]["DashboardBody"]))
    for metric in (
        "IncomingRecords",
        "IncomingBytes",
        C.METRIC_RECORDS_INGESTED,
        "IteratorAge",
        C.METRIC_CONSUMER_LAG_RECORDS,
        "Errors",
        "ApproximateNumberOfMessagesVisible",
        "SuccessJobs",
        "FailedJobs",
        C.METRIC_COMMIT_FENCED,
        # limits: throttles, time against the timeout, DynamoDB throttling
        "Throttles",
        "Duration",
        "ReadThrottleEvents",
        "WriteThrottleEvents",
        # the API: 4XX, and 429 apart (from the access logs)
        "4XXError",
        IC.METRIC_API_THROTTLED,
    ):
        assert metric in body, metric
    assert "SEARCH(" in body  # consumer lag: one line per consumer group
    assert str(IC.INGEST_TIMEOUT_S * 1000) in body, "the timeout line on the duration graph"


def test_dashboard_counts_each_lambda_groups_events_as_metrics_config_does(
    synth: Synthesized,
) -> None:
    (dashboard,) = synth.resources("AWS::CloudWatch::Dashboard").values()
    body = json.dumps(synth.stack.resolve(dashboard["Properties"]["DashboardBody"]))
    for group in synth.stack.lambda_consumers.groups:
        for metric in (
            C.METRIC_EVENT_COUNT,
            C.METRIC_FILTERED_OUT_EVENT_COUNT,
            C.METRIC_DROPPED_EVENT_COUNT,
        ):
            line = f'\\"{metric}\\",\\"{C.DIMENSION_CONSUMER_GROUP}\\",\\"{group}\\"'
            assert line in body, (group, metric)
