"""Parity: the stack creates exactly the keys and event-source settings the code assumes.

`synthesized_resource_specs` reduces the template to a plain dict; the local runtime's
resource specs (shardlog.local) can be compared with it in the same shape.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from aws_cdk.assertions import Template

from shardlog import constants as C
from shardlog.local.embedded import groups_index, live_index
from shardlog.tables import TableNames
from tests.infra.cdk_synth import Synthesized

EVENT_SOURCE_KEYS = (
    "BatchSize",
    "MaximumBatchingWindowInSeconds",
    "ParallelizationFactor",
    "StartingPosition",
)


def _only(resources: Mapping[str, Any], what: str) -> dict[str, Any]:
    assert len(resources) == 1, f"expected one {what}, found {sorted(resources)}"
    return next(iter(resources.values()))["Properties"]  # type: ignore[no-any-return]


def _table_props(template: Template, hash_key: str) -> dict[str, Any]:
    tables = {
        logical_id: table
        for logical_id, table in template.find_resources("AWS::DynamoDB::Table").items()
        if table["Properties"]["KeySchema"][0]["AttributeName"] == hash_key
    }
    return _only(tables, f"table with hash key {hash_key}")


def _table(template: Template, hash_key: str) -> dict[str, Any]:
    props = _table_props(template, hash_key)
    return {
        "KeySchema": props["KeySchema"],
        "AttributeDefinitions": sorted(
            props["AttributeDefinitions"], key=lambda a: a["AttributeName"]
        ),
        "GlobalSecondaryIndexes": props.get("GlobalSecondaryIndexes", []),
    }


def synthesized_resource_specs(template: Template) -> dict[str, dict[str, Any]]:
    """Table key schemas and ingest event-source settings, as plain data."""
    kinesis = {
        logical_id: mapping
        for logical_id, mapping in template.find_resources(
            "AWS::Lambda::EventSourceMapping"
        ).items()
        if "StartingPosition" in mapping["Properties"]
        and "Stream" in str(mapping["Properties"]["EventSourceArn"])
        and "StreamArn" not in str(mapping["Properties"]["EventSourceArn"])
    }
    event_source = _only(kinesis, "Kinesis event source mapping")
    return {
        "partitions_table": _table(template, C.ATTR_PARTITION_ID),
        "consumers_table": _table(template, C.ATTR_CONSUMER_GROUP),
        "event_source": {key: event_source[key] for key in EVENT_SOURCE_KEYS},
    }


def test_partitions_table_key_matches_constants(template: Template) -> None:
    assert synthesized_resource_specs(template)["partitions_table"] == {
        "KeySchema": [{"AttributeName": C.ATTR_PARTITION_ID, "KeyType": "HASH"}],
        "AttributeDefinitions": [
            {"AttributeName": C.ATTR_LIVE, "AttributeType": "S"},
            {"AttributeName": C.ATTR_PARTITION_ID, "AttributeType": "S"},
        ],
        "GlobalSecondaryIndexes": [live_index()],  # the live set (shardlog/retirement.py)
    }


def test_consumers_table_key_matches_constants(template: Template) -> None:
    assert synthesized_resource_specs(template)["consumers_table"] == {
        "KeySchema": [
            {"AttributeName": C.ATTR_CONSUMER_GROUP, "KeyType": "HASH"},
            {"AttributeName": C.ATTR_PARTITION_ID, "KeyType": "RANGE"},
        ],
        "AttributeDefinitions": [
            {"AttributeName": C.ATTR_CONSUMER_GROUP, "AttributeType": "S"},
            {"AttributeName": C.ATTR_GROUP_KIND, "AttributeType": "S"},
            {"AttributeName": C.ATTR_PARTITION_ID, "AttributeType": "S"},
        ],
        "GlobalSecondaryIndexes": [groups_index()],  # the groups' "$group" items
    }


def test_event_source_matches_the_local_poller_constants(template: Template) -> None:
    assert synthesized_resource_specs(template)["event_source"] == {
        "BatchSize": C.INGEST_BATCH_SIZE,
        "MaximumBatchingWindowInSeconds": C.INGEST_BATCHING_WINDOW_S,
        "ParallelizationFactor": C.INGEST_PARALLELIZATION_FACTOR,
        "StartingPosition": C.INGEST_STARTING_POSITION,
    }


def test_handlers_get_settings_through_the_shared_env_names(synth: Synthesized) -> None:
    functions = synth.resources("AWS::Lambda::Function")
    by_handler = {f["Properties"]["Handler"]: f["Properties"] for f in functions.values()}
    ingest_env = by_handler["lambdas.ingest.handler.handler"]["Environment"]["Variables"]
    assert {
        C.ENV_BUCKET_NAME,
        C.ENV_PARTITIONS_TABLE,
        C.ENV_CONSUMERS_TABLE,
        C.ENV_LEASE_DURATION_MS,
        C.ENV_SEGMENT_MAX_RECORDS,
        C.ENV_SEGMENT_MAX_BYTES,
        C.ENV_DEDUPE_WINDOW_S,
        C.ENV_SEGMENT_COMPRESSION,
    } <= set(ingest_env)
    assert ingest_env[C.ENV_SEGMENT_COMPRESSION] == C.DEFAULT_SEGMENT_COMPRESSION == "zlib"
    assert ingest_env[C.ENV_LEASE_DURATION_MS] == str(C.DEFAULT_LEASE_DURATION_MS)
    assert ingest_env[C.ENV_SEGMENT_MAX_RECORDS] == str(C.DEFAULT_SEGMENT_MAX_RECORDS)
    assert ingest_env[C.ENV_SEGMENT_MAX_BYTES] == str(C.DEFAULT_SEGMENT_MAX_BYTES)
    storage = synth.stack.storage
    assert ingest_env[C.ENV_BUCKET_NAME] == synth.stack.resolve(storage.bucket.bucket_name)
    sync_env = by_handler["lambdas.shard_sync.handler.handler"]["Environment"]["Variables"]
    assert sync_env[C.ENV_STREAM_NAME] == synth.stack.resolve(storage.stream.stream_name)
    assert sync_env[C.ENV_PARTITIONS_TABLE] == synth.stack.resolve(
        storage.partitions_table.table_name
    )


def test_local_runtime_creates_what_the_stack_synthesizes(
    synth: Synthesized, template: Template
) -> None:
    """The embedded AWS's resources (shardlog.local.embedded.resource_specs) equal the stack's."""
    from shardlog.config import ShardlogConfig
    from shardlog.local.embedded import resource_specs

    local = resource_specs(ShardlogConfig(), shard_count=4)
    synthesized = synthesized_resource_specs(template)
    for table in ("partitions_table", "consumers_table"):
        assert local[table]["KeySchema"] == synthesized[table]["KeySchema"]
        assert (
            sorted(local[table]["AttributeDefinitions"], key=lambda a: a["AttributeName"])
            == synthesized[table]["AttributeDefinitions"]
        )
        assert (
            local[table]["GlobalSecondaryIndexes"] == synthesized[table]["GlobalSecondaryIndexes"]
        )
    mapping = synth.ingest_mapping()["Properties"]
    for key, value in local["event_source"].items():
        assert mapping[key] == value, key
    assert (
        local["partitions_table"]["StreamSpecification"]["StreamViewType"]
        == (_table_props(template, C.ATTR_PARTITION_ID)["StreamSpecification"]["StreamViewType"])
    )


def test_local_lambda_consumers_match_the_stack(synth: Synthesized) -> None:
    """Wake queues, their event sources, the waker's stream source and the sweep: the local
    runtime (shardlog.local.lambda_consumers) emulates what the stack builds."""
    from shardlog.config import ShardlogConfig
    from shardlog.local.embedded import resource_specs

    local = resource_specs(ShardlogConfig(), shard_count=4)["lambda_consumers"]
    consumers = synth.stack.lambda_consumers
    mappings = synth.resources("AWS::Lambda::EventSourceMapping")
    queues = synth.resources("AWS::SQS::Queue")
    functions = synth.resources("AWS::Lambda::Function")
    for group in consumers.groups.values():
        wake = mappings[synth.logical_id(group.event_source)]["Properties"]
        assert {k: wake[k] for k in local["wake_event_source"]} == local["wake_event_source"]
        queue = queues[synth.logical_id(group.wake_queue)]["Properties"]
        assert queue["FifoQueue"] is local["wake_queue"]["FifoQueue"]
        for attribute in ("DeduplicationScope", "FifoThroughputLimit"):
            assert queue[attribute] == local["wake_queue"][attribute]
        assert queue["VisibilityTimeout"] == local["wake_queue"]["VisibilityTimeout"]
        assert queue["RedrivePolicy"]["maxReceiveCount"] == local["wake_queue"]["maxReceiveCount"]
        runner = functions[synth.logical_id(group.runner.function)]["Properties"]
        assert runner["Timeout"] == local["runner_timeout_s"]
    stream = mappings[synth.logical_id(consumers.stream_source)]["Properties"]
    assert {k: stream[k] for k in local["stream_event_source"]} == local["stream_event_source"]
    rule = synth.resources("AWS::Events::Rule")[synth.logical_id(consumers.sweep)]["Properties"]
    assert rule["ScheduleExpression"] == f"rate({local['sweep_rate_minutes']} minute)"


def test_local_registration_sends_what_the_stack_declares(synth: Synthesized) -> None:
    """`shardlog local up` registers each group through the same handler, with the Create
    request the stack's custom resource makes, and the same settings from the same names."""
    from lambdas.group_registration.handler import create_event
    from shardlog.function_settings import RegistrationSettings
    from shardlog.lambda_consumer.settings import RESOURCE_TYPE

    consumers = synth.stack.lambda_consumers
    assert consumers.registration is not None
    resources = synth.resources(RESOURCE_TYPE)
    for group in consumers.groups.values():
        assert group.registration is not None
        declared = dict(resources[synth.logical_id(group.registration)]["Properties"])
        declared.pop("ServiceToken")
        local = create_event(group.settings)
        assert (local["ResourceType"], local["ResourceProperties"]) == (RESOURCE_TYPE, declared)
    function = synth.resources("AWS::Lambda::Function")[
        synth.logical_id(consumers.registration.function)
    ]["Properties"]
    env = function["Environment"]["Variables"]
    storage = synth.stack.storage
    names = {
        C.ENV_BUCKET_NAME: storage.bucket.bucket_name,
        C.ENV_PARTITIONS_TABLE: storage.partitions_table.table_name,
        C.ENV_CONSUMERS_TABLE: storage.consumers_table.table_name,
    }
    for variable, value in names.items():
        assert env[variable] == synth.stack.resolve(value), variable
    settings = RegistrationSettings.from_env(
        {C.ENV_BUCKET_NAME: "log", C.ENV_PARTITIONS_TABLE: "parts", C.ENV_CONSUMERS_TABLE: "cons"}
    )
    assert (settings.bucket, settings.tables) == ("log", TableNames("parts", "cons"))
