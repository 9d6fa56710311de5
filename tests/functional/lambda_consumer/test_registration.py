"""The deploy-time registration of a Lambda consumer group (a CloudFormation custom
resource): the group is created at its starting position, the answer is PUT to the
request's ResponseURL whatever happens, an update keeps the positions and refuses another
starting position, a delete changes nothing."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from lambdas.group_registration.handler import create_event, create_handler
from shardlog.clock import ManualClock
from shardlog.consumer.creation import read_group
from shardlog.function_settings import RegistrationSettings
from shardlog.lambda_consumer.settings import LambdaConsumerSettings
from shardlog.local.lambda_context import LambdaContext
from shardlog.tables import Tables
from tests.support.aws import AwsEnv
from tests.support.factories import append, incoming_records

P = "shardId-000000000000"
GROUP = "registered-at-deploy"


class CloudFormation:
    """A local stand-in for the pre-signed ResponseURL: records every PUT body."""

    def __init__(self) -> None:
        self.answers: list[dict[str, Any]] = []
        answers = self.answers

        class Handler(BaseHTTPRequestHandler):
            def do_PUT(self) -> None:
                length = int(self.headers["Content-Length"])
                answers.append(json.loads(self.rfile.read(length)))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *_: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/response?signed=1"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(10)


@pytest.fixture
def cloudformation() -> Iterator[CloudFormation]:
    server = CloudFormation()
    yield server
    server.close()


def registration(aws: AwsEnv, clock: ManualClock) -> Any:
    settings = RegistrationSettings(
        bucket=aws.config.bucket,
        tables=aws.config.tables,
    )
    return create_handler(settings, aws.fresh_clients(), clock)


def request(
    cloudformation: CloudFormation, kind: str = "Create", **settings: Any
) -> dict[str, Any]:
    group = LambdaConsumerSettings(group=GROUP, function_name="f", **settings)
    event = create_event(group, cloudformation.url)
    event["RequestType"] = kind
    if kind != "Create":
        event["PhysicalResourceId"] = GROUP
    return event


def context() -> LambdaContext:
    return LambdaContext("shardlog-group-registration")


def test_create_positions_the_group_and_answers_cloudformation(
    aws: AwsEnv, clock: ManualClock, cloudformation: CloudFormation
) -> None:
    append(aws, P, incoming_records(5, start=0))
    handler = registration(aws, clock)
    handler(request(cloudformation, starting_position="LATEST"), context())
    [answer] = cloudformation.answers
    assert (answer["Status"], answer["PhysicalResourceId"]) == ("SUCCESS", GROUP)
    assert answer["Data"] == {"CreatedAt": str(clock.now_ms()), "StartPosition": "LATEST"}
    record = read_group(aws.clients, aws.config.consumers_table, GROUP)
    assert record is not None and record.positions == {P: "5"}
    lease = Tables(aws.clients, aws.config.tables).get_lease(GROUP, P)
    assert lease is not None and lease.checkpoint == "5" and lease.owner is None


def test_update_keeps_the_positions_and_refuses_another_starting_position(
    aws: AwsEnv, clock: ManualClock, cloudformation: CloudFormation
) -> None:
    append(aws, P, incoming_records(2, start=0))
    handler = registration(aws, clock)
    handler(request(cloudformation, starting_position="LATEST"), context())
    append(aws, P, incoming_records(3, start=2))
    clock.advance(60_000)
    handler(request(cloudformation, "Update", starting_position="LATEST"), context())
    handler(request(cloudformation, "Update", starting_position="TRIM_HORIZON"), context())
    created, kept, refused = cloudformation.answers
    assert kept["Status"] == "SUCCESS" and kept["Data"] == created["Data"]
    assert refused["Status"] == "FAILED" and refused["PhysicalResourceId"] == GROUP
    assert "created at LATEST" in refused["Reason"]
    record = read_group(aws.clients, aws.config.consumers_table, GROUP)
    assert record is not None and record.positions == {P: "2"}


def test_delete_leaves_the_group_as_it_is(
    aws: AwsEnv, clock: ManualClock, cloudformation: CloudFormation
) -> None:
    append(aws, P, incoming_records(2, start=0))
    handler = registration(aws, clock)
    handler(request(cloudformation, starting_position="LATEST"), context())
    handler(request(cloudformation, "Delete", starting_position="LATEST"), context())
    assert [a["Status"] for a in cloudformation.answers] == ["SUCCESS", "SUCCESS"]
    assert read_group(aws.clients, aws.config.consumers_table, GROUP) is not None


def test_bad_properties_fail_the_resource_naming_the_property(
    aws: AwsEnv, clock: ManualClock, cloudformation: CloudFormation
) -> None:
    event = request(cloudformation)
    event["ResourceProperties"]["StartingPosition"] = "AT_TIMESTAMP"  # and no timestamp
    registration(aws, clock)(event, context())
    [answer] = cloudformation.answers
    assert answer["Status"] == "FAILED"
    assert "StartingPositionTimestampMs" in answer["Reason"] or "timestamp" in answer["Reason"]
    assert read_group(aws.clients, aws.config.consumers_table, GROUP) is None
