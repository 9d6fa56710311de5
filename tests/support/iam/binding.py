"""The synthesized template, bound to the physical names a workload's embedded AWS used.

The template names its resources by logical id; the embedded AWS by the names the local
runtime gave them. ``Deployment`` evaluates the policies with the latter: ``storage_names``
binds the log's storage (bucket, tables, stream), every replay's common ground; ``bind``
adds what the full workload (``workload.py``) creates: the Spark application and its
execution role, the Lambda consumer groups' queues, the partitions table's stream.
"""

from __future__ import annotations

from tests.infra.cdk_synth import Synthesized
from tests.support.iam.deployment import Deployment
from tests.support.iam.workload import LocalNames


def storage_names(synth: Synthesized, names: LocalNames) -> dict[str, str]:
    """Logical id -> physical name of the log's bucket, tables and stream."""
    logical = synth.logical_id
    storage = synth.stack.storage
    return {
        logical(storage.bucket): names.bucket,
        logical(storage.partitions_table): names.partitions_table,
        logical(storage.consumers_table): names.consumers_table,
        logical(storage.stream): names.stream,
    }


def bind_storage(synth: Synthesized, names: LocalNames) -> Deployment:
    """The template with only the log's storage bound (a replay of one function that uses
    nothing else)."""
    return Deployment(synth.json, names=storage_names(synth, names))


def bind(synth: Synthesized, names: LocalNames) -> Deployment:
    """The template, with its resources named as the full workload's embedded AWS named them."""
    stack = synth.stack
    logical = synth.logical_id
    bound = {
        **storage_names(synth, names),
        logical(stack.analytics.execution_role): names.execution_role,
        logical(stack.analytics.artifacts_bucket): names.artifacts_bucket,
    }
    for group, construct in stack.lambda_consumers.groups.items():
        bound[logical(construct.wake_queue)] = names.wake_queues[group]
        if construct.failure_queue is not None:
            bound[logical(construct.failure_queue)] = names.failure_queues[group]
    attributes = {
        (logical(stack.storage.partitions_table), "StreamArn"): names.partitions_stream_arn,
        (stack.analytics.application.logical_id, "ApplicationId"): names.application_id,
    }
    attributes = {(str(stack.resolve(k)), a): v for (k, a), v in attributes.items()}
    return Deployment(synth.json, names=bound, attributes=attributes)
