"""A CloudFormation custom resource that registers a Lambda consumer group at deploy: the
group is created and its start position fixed per partition before its runner can be woken
(shardlog/consumer/creation.py, docs/DEPLOY.md).

- ``Create``: register the group (a group that exists, created at the same starting
  position, is found unchanged: a retried deploy);
- ``Update``: the same; an existing group keeps its positions, and another starting
  position is refused (the update fails and rolls back): positions are fixed at creation,
  a group that should start elsewhere is a new group (another name);
- ``Delete``: nothing; the group's checkpoints stay in the consumers table, so a group
  that comes back under its name resumes where it was.

The function is the resource's service token, so it answers CloudFormation itself: one PUT
of the result to the request's pre-signed ``ResponseURL``, whatever happened (an answer
never sent would hold the stack for an hour).
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Callable
from typing import Any

from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext

from lambdas.entry import Handler, LazyHandler
from lambdas.observability import instrumented, logger, metrics
from shardlog import constants as C
from shardlog.aws import Clients
from shardlog.clock import Clock, SystemClock
from shardlog.function_settings import RegistrationSettings
from shardlog.lambda_consumer.registration import register
from shardlog.lambda_consumer.settings import (
    RESOURCE_TYPE,
    LambdaConsumerSettings,
    group_from_properties,
    group_properties,
)

RESPONSE_TIMEOUT_S = 30
REASON_LIMIT = 1_000  # CloudFormation shows the reason; keep the response small

Respond = Callable[[str, dict[str, Any]], None]


def put_response(url: str, body: dict[str, Any]) -> None:
    """PUT the answer to CloudFormation's pre-signed URL (no content type: it is signed
    without one)."""
    data = json.dumps(body).encode()
    request = urllib.request.Request(
        url, data=data, method="PUT", headers={"Content-Type": "", "Content-Length": str(len(data))}
    )
    with urllib.request.urlopen(request, timeout=RESPONSE_TIMEOUT_S) as response:
        response.read()


def create_event(group: LambdaConsumerSettings, response_url: str = "local:") -> dict[str, Any]:
    """The ``Create`` request CloudFormation sends for a group (`shardlog local up` sends it
    too, through the same handler)."""
    return {
        "RequestType": "Create",
        "ResponseURL": response_url,
        "StackId": "local",
        "RequestId": f"register-{group.group}",
        "LogicalResourceId": "Registration",
        "ResourceType": RESOURCE_TYPE,
        "ResourceProperties": group_properties(group),
    }


def create_handler(
    settings: RegistrationSettings | None = None,
    clients: Clients | None = None,
    clock: Clock | None = None,
    *,
    respond: Respond = put_response,
) -> Handler:
    """Build the handler; the local runtime and tests inject settings, clients, clock."""
    settings = settings or RegistrationSettings.from_env()
    clients = clients or Clients()
    clock = clock or SystemClock()

    def apply(event: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        group = group_from_properties(event.get("ResourceProperties", {}))
        if event["RequestType"] == "Delete":
            return group.group, {}
        record = register(
            clients,
            group.group,
            group.start_position(),
            bucket=settings.bucket,
            names=settings.tables,
            now_ms=clock.now_ms(),
        )
        return group.group, {"CreatedAt": str(record.created_at_ms), "StartPosition": record.start}

    def handle(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
        body: dict[str, Any] = {
            "StackId": event.get("StackId"),
            "RequestId": event.get("RequestId"),
            "LogicalResourceId": event.get("LogicalResourceId"),
        }
        failed = 0
        try:
            physical_id, data = apply(event)
            body.update(Status="SUCCESS", PhysicalResourceId=physical_id, Data=data)
            logger.info("consumer group registered", request=event.get("RequestType"), **data)
        except Exception as exc:  # every failure is answered: CloudFormation waits otherwise
            logger.exception("consumer group registration failed")
            failed = 1
            body.update(
                Status="FAILED",
                Reason=f"{type(exc).__name__}: {exc}"[:REASON_LIMIT],
                PhysicalResourceId=event.get("PhysicalResourceId") or context.aws_request_id,
            )
        metrics.add_metric(C.METRIC_GROUP_REGISTRATIONS_FAILED, MetricUnit.Count, failed)
        respond(event["ResponseURL"], body)
        return body

    return instrumented(handle)


handler = LazyHandler(create_handler)
"""The Lambda entry point."""
