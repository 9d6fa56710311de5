"""Ingest: the event source never drops data silently; the functions run the shared code."""

from __future__ import annotations

from typing import Any

from aws_cdk.assertions import Match

from infra import constants as IC
from shardlog import constants as C
from tests.infra.cdk_synth import Synthesized


def _event_source(synth: Synthesized) -> dict[str, Any]:
    return synth.ingest_mapping()["Properties"]  # type: ignore[no-any-return]


def test_event_source_reads_the_stream_into_the_ingest_function(synth: Synthesized) -> None:
    props = _event_source(synth)
    ingest, storage = synth.stack.ingest, synth.stack.storage
    assert props["FunctionName"] == {"Ref": synth.logical_id(ingest.function)}
    assert props["EventSourceArn"] == {"Fn::GetAtt": [synth.logical_id(storage.stream), "Arn"]}


def test_event_source_retries_until_just_before_the_stream_trims(synth: Synthesized) -> None:
    props = _event_source(synth)
    assert props["MaximumRetryAttempts"] == -1
    # Given up (and reported to the failure queue) before the stream trims the records: a
    # trimmed record would vanish without a trace, a given-up one can still be replayed.
    (stream,) = synth.resources("AWS::Kinesis::Stream").values()
    retention_s = stream["Properties"]["RetentionPeriodHours"] * 3600
    age_s = props["MaximumRecordAgeInSeconds"]
    assert 60 <= age_s < retention_s
    assert age_s == synth.stack.settings.max_record_age_s
    assert retention_s - age_s >= retention_s // 10, "time left to replay from the stream"
    assert props["BisectBatchOnFunctionError"] is True
    assert props["StartingPosition"] == "TRIM_HORIZON"
    assert props["ParallelizationFactor"] == 1


def test_event_source_has_no_partial_batch_responses(synth: Synthesized) -> None:
    # The handler commits all or nothing and raises; ReportBatchItemFailures would let
    # Lambda checkpoint past records that were never committed.
    assert "FunctionResponseTypes" not in _event_source(synth)


def test_expired_records_go_to_an_encrypted_queue(synth: Synthesized) -> None:
    props = _event_source(synth)
    queue_id = synth.logical_id(synth.stack.ingest.failure_queue)
    assert props["DestinationConfig"] == {
        "OnFailure": {"Destination": {"Fn::GetAtt": [queue_id, "Arn"]}}
    }
    queue = synth.resources("AWS::SQS::Queue")[queue_id]["Properties"]
    key_id = synth.logical_id(synth.stack.storage.key)
    assert queue["KmsMasterKeyId"] == {"Fn::GetAtt": [key_id, "Arn"]}
    synth.template.has_resource_properties(
        "AWS::SQS::QueuePolicy",
        {
            "Queues": [{"Ref": queue_id}],
            "PolicyDocument": {
                "Statement": Match.array_with(
                    [
                        Match.object_like(
                            {
                                "Effect": "Deny",
                                "Condition": {"Bool": {"aws:SecureTransport": "false"}},
                            }
                        )
                    ]
                )
            },
        },
    )


def test_functions_use_the_pinned_runtime_and_powertools_layer(synth: Synthesized) -> None:
    functions = synth.resources("AWS::Lambda::Function")
    ours = {
        f["Properties"]["Handler"]: f["Properties"]
        for f in functions.values()
        if f["Properties"]["Handler"].startswith("lambdas.")
    }
    assert set(ours) == {
        IC.INGEST_HANDLER,
        IC.SHARD_SYNC_HANDLER,
        IC.PRODUCER_API_HANDLER,
        IC.SPARK_TRIGGER_HANDLER,
        IC.LAMBDA_CONSUMER_HANDLER,  # one per Lambda consumer group of the tests' context
        IC.CONSUMER_WAKER_HANDLER,
        IC.GROUP_REGISTRATION_HANDLER,
    }
    for handler, props in ours.items():
        assert props["Runtime"] == IC.LAMBDA_PYTHON_RUNTIME, handler
        assert props["TracingConfig"] == {"Mode": "Active"}
        layer_arn = synth.stack.resolve(props["Layers"][0])
        rendered = "".join(p if isinstance(p, str) else "" for p in layer_arn["Fn::Join"][1])
        assert rendered.endswith(
            f":{IC.POWERTOOLS_LAYER_ACCOUNT}:layer:{IC.POWERTOOLS_LAYER_NAME}:"
            f"{IC.POWERTOOLS_LAYER_VERSION}"
        )
        assert {"Ref": "AWS::Region"} in layer_arn["Fn::Join"][1], "layer ARN must follow region"
        assert props["Environment"]["Variables"]["POWERTOOLS_SERVICE_NAME"] == (
            C.POWERTOOLS_SERVICE_NAME
        )


def test_failure_queue_is_kept_with_the_stack_gone(synth: Synthesized) -> None:
    queue_id = synth.logical_id(synth.stack.ingest.failure_queue)
    assert synth.resources("AWS::SQS::Queue")[queue_id]["DeletionPolicy"] == "Retain"


def test_ingest_has_reserved_concurrency_for_its_shards(synth: Synthesized) -> None:
    props = synth.resources("AWS::Lambda::Function")[synth.logical_id(synth.stack.ingest.function)][
        "Properties"
    ]
    (stream,) = synth.resources("AWS::Kinesis::Stream").values()
    shards = stream["Properties"]["ShardCount"]
    # one invocation per shard at a time, room for the children of a split
    assert props["ReservedConcurrentExecutions"] == 2 * shards


def test_ingest_timeout_is_at_most_half_the_lease(synth: Synthesized) -> None:
    props = synth.resources("AWS::Lambda::Function")[synth.logical_id(synth.stack.ingest.function)][
        "Properties"
    ]
    lease_ms = int(props["Environment"]["Variables"][C.ENV_LEASE_DURATION_MS])
    assert props["Timeout"] * 1000 * 2 <= lease_ms


def test_shard_sync_runs_on_the_configured_schedule(synth: Synthesized) -> None:
    function_id = synth.logical_id(synth.stack.ingest.shard_sync.function)
    synth.template.has_resource_properties(
        "AWS::Events::Rule",
        {
            "ScheduleExpression": f"rate({IC.DEFAULT_SHARD_SYNC_RATE_MINUTES} minutes)",
            "State": "ENABLED",
            "Targets": [
                Match.object_like({"Arn": {"Fn::GetAtt": [function_id, "Arn"]}}),
            ],
        },
    )


def test_event_source_waits_for_its_permissions(synth: Synthesized) -> None:
    mapping = synth.ingest_mapping()
    policy = synth.stack.ingest.ingest.role.node.find_child("DefaultPolicy")
    assert synth.logical_id(policy) in mapping.get("DependsOn", [])
