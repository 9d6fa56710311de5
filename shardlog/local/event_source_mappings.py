"""Keep moto's Lambda event source mappings from taking what the local event sources deliver.

moto runs a function only in Docker, which the embedded AWS does not have, yet an event
source mapping created on it (by CreateEventSourceMapping, or by CloudFormation for the
deployed stack) hooks the source and "invokes" on every write:

- a DynamoDB stream hands its records to the invocation, which fails, and then **drops
  them** (moto clears the shard's records once an invocation answered), so a stream
  reader never sees a change: the Lambda consumer groups' waker got no wake-up;
- an SQS queue **receives** each batch for the invocation, then makes it visible again:
  every send counts a receive against the queue's redrive limit (a wake queue sends a
  message to its dead-letter queue after 5), and moves its visibility;
- a Kinesis put tries the Docker invocation on every record.

On AWS a mapping is Lambda's own poller, which delivers; here the local runtime's event
sources are (``shardlog.local.poller``, ``shardlog.local.event_sources``). ``apply()``
keeps each mapping as moto records it (Create, Get, List and Delete answer as before) but
detaches it from its source, so the source holds its records and messages for them.
"""

from __future__ import annotations

import threading
from typing import Any

from moto.awslambda.models import EventSourceMapping, LambdaBackend
from moto.dynamodb.models import dynamodb_backends
from moto.kinesis.models import kinesis_backends
from moto.sqs.models import sqs_backends

_lock = threading.Lock()
_applied = False


def detach(mapping: EventSourceMapping) -> int:
    """Remove ``mapping`` from every source that moto hooked it to; returns how many."""
    account, region = mapping.account_id, mapping.region
    sources: list[Any] = [
        *sqs_backends[account][region].queues.values(),
        *dynamodb_backends[account][region].tables.values(),
        *kinesis_backends[account][region].streams.values(),
    ]
    removed = 0
    for source in sources:
        hooks = source.lambda_event_source_mappings
        for key in [k for k, hooked in hooks.items() if hooked is mapping]:
            del hooks[key]
            removed += 1
    return removed


def apply() -> None:
    """Install the patch (idempotent). Call before the moto server takes requests."""
    global _applied
    with _lock:
        if _applied:
            return
        original = LambdaBackend.create_event_source_mapping

        def create_event_source_mapping(
            self: LambdaBackend, spec: dict[str, Any]
        ) -> EventSourceMapping:
            mapping = original(self, spec)
            detach(mapping)
            return mapping

        LambdaBackend.create_event_source_mapping = create_event_source_mapping  # type: ignore[method-assign]
        _applied = True
