"""The IAM replay's workload: every deployed function's code paths, as the demo drives them.

On the local runtime, with every function signing as itself (``shardlog.local.principals``):

- records produced through the SDK and the producer API (the producer function), some with an
  idempotence record id sent twice, the second time flagged as resent (the ingest writer then
  reads the log's tail for duplicates);
- a split and a merge: ingest across parents and children, shard sync's CLOSED and ENDED;
- two Lambda consumer groups, named as in the test stack (``TEST_LAMBDA_CONSUMERS``):
  ``invoices`` with its own SQS on-failure queue, ``audit`` with the SNS topic; each function
  refuses one poison record, so each runner sends it to its destination; the waker wakes them
  from the partitions stream, and its sweep runs;
- a consumer group's workers (``TEST_CONSUMER_GROUP``) read everything to SHARD_END;
- the Spark trigger handler, invoked as EventBridge Scheduler would (the scheduler's Invoke
  is recorded as the request it stands for), starts compaction, then analytics and
  maintenance, then compaction again at the schedule's next firing (caught up: over the
  live set), on the local EMR Serverless: real spark-submit runs signing as the execution
  role, driver and executors; with compaction by volume on (as the test stack has it), it
  also reads the partitions table's stream from before the first record and counts every
  commit in the backlog counter.

``LocalNames`` keeps the physical names the embedded AWS used, to bind the template to them.
"""

from __future__ import annotations

import base64
import json
import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlparse

from botocore.exceptions import ClientError

from shardlog import constants as C
from shardlog.api_client import ApiClient
from shardlog.clock import ManualClock
from shardlog.consumer import Checkpointer, ConsumerSettings, Worker
from shardlog.format import LogRecord
from shardlog.lambda_consumer.settings import LambdaConsumerSettings
from shardlog.local import principals, request_log
from shardlog.local.demo import reshard
from shardlog.local.lambda_consumers import LocalGroup
from shardlog.local.poller import EventSourceSettings
from shardlog.local.spark import provision_spark
from shardlog.producer import Producer
from shardlog.records import ProducerRecord
from shardlog.spark.jobs import JobArgs
from shardlog.spark.trigger import SparkTarget, SparkTrigger
from shardlog.tables import Tables
from tests.infra.cdk_synth import TEST_COMPACT_AFTER_RECORDS
from tests.support.runtime import e2e_runtime

POISON = b"poison"
TIMEOUT_S = 120.0


@dataclass
class LocalNames:
    """Physical names on the embedded AWS, for ``Deployment``'s binding."""

    endpoint: str = ""  # the workload's own embedded AWS (host:port)
    bucket: str = ""
    partitions_table: str = ""
    partitions_stream_arn: str = ""
    consumers_table: str = ""
    stream: str = ""
    wake_queues: dict[str, str] = field(default_factory=dict)
    failure_queues: dict[str, str] = field(default_factory=dict)
    application_id: str = ""
    execution_role: str = ""
    artifacts_bucket: str = ""
    spark_runs: dict[str, str] = field(default_factory=dict)  # job -> final state


class PoisonRefusing:
    """A group's function: refuses the poison record (a whole-batch failure), takes the rest."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.records = 0

    def __call__(self, event: dict[str, Any], _context: Any) -> dict[str, Any]:
        data = [base64.b64decode(r["kinesis"]["data"]) for r in event["Records"]]
        if POISON in data:
            raise ValueError("refused: poison record")
        with self.lock:
            self.records += len(data)
        return {"batchItemFailures": []}


def lambda_groups(lambda_consumers: list[dict[str, Any]]) -> list[LocalGroup]:
    """The test stack's groups, locally: the same names, functions and destinations; no retry
    and no retry delay, so a refused record reaches the destination at once."""
    groups = []
    for spec in lambda_consumers:
        function_name = spec.get("functionArn") or spec["functionName"]
        settings = LambdaConsumerSettings(
            group=spec["group"],
            function_name=function_name,
            batch_size=10,
            maximum_retry_attempts=0,
            retry_base_delay_ms=0,
            on_failure_destination=spec.get("onFailureDestination"),
        )
        groups.append(LocalGroup(settings, PoisonRefusing(), function_name))
    return groups


def run_workload(
    lambda_consumers: list[dict[str, Any]], consumer_group: str, trigger_arn: str
) -> LocalNames:
    names = LocalNames()
    runtime = e2e_runtime("iam", lambda_consumers=lambda_groups(lambda_consumers))
    runtime.event_source = EventSourceSettings(batch_size=25, batching_window_ms=0)
    with runtime:
        volume = _VolumeFeed(runtime)
        _create_destination_topics(runtime, lambda_consumers)
        _produce(runtime)
        _wait_ingested(runtime)
        _consume_with_workers(runtime, consumer_group)
        _wait_lambda_consumers(runtime)
        runtime.lambda_consumers.sweep()  # type: ignore[union-attr]
        _run_spark(runtime, trigger_arn, names, volume)
        _names(runtime, names)
    return names


class _VolumeFeed:
    """The trigger's own mapping on the partitions table's stream, opened before the first
    commit and drained once the trigger exists (the workload stays below the threshold: the
    runs it would start are the schedule's, recorded below)."""

    def __init__(self, runtime: Any) -> None:
        from lambdas.spark_trigger.handler import create_handler
        from shardlog.local.event_sources import DynamoDbStreamSource

        self.handler: Any = None
        clients = runtime.config.clients(principals.function(create_handler.__module__))
        table = runtime.clients.dynamodb.describe_table(TableName=runtime.config.partitions_table)
        self.source = DynamoDbStreamSource(
            clients,
            table["Table"]["LatestStreamArn"],
            lambda event, context: self.handler(event, context),
            function_name="shardlog-spark-trigger",
        ).start()

    def drain(self, handler: Any) -> int:
        self.handler, delivered = handler, 0
        for _ in range(1_000):  # bounded: each step delivers a batch or ends the loop
            step = self.source.poll_once()
            if step == 0 and self.source.failures == 0:
                return delivered
            if self.source.failures:
                raise AssertionError("the Spark trigger failed a partitions-stream batch")
            delivered += step
        raise AssertionError("the partitions stream never ran dry")


def _create_destination_topics(runtime: Any, specs: list[dict[str, Any]]) -> None:
    """The SNS topics the groups name, as their owner would have created them."""
    sns = runtime.clients.client("sns")
    for spec in specs:
        arn = spec.get("onFailureDestination") or ""
        if arn.startswith("arn:aws:sns:"):
            sns.create_topic(Name=arn.rsplit(":", 1)[1])


def _produce(runtime: Any) -> None:
    producer = Producer(runtime.config.stream_name, runtime.clients)
    api = ApiClient(runtime.config.extra["apiUrl"])
    keys = [f"key-{i}" for i in range(8)]
    for step in ("split", "merge", None):
        producer.put_records([ProducerRecord(k, f"{k}:{step}".encode()) for k in keys])
        first = [ProducerRecord(k, b"once", record_id=f"{k}-{step}") for k in keys[:4]]
        api.put_records(first)
        resent = [
            ProducerRecord(k, b"once", record_id=f"{k}-{step}", resent=True) for k in keys[:4]
        ]
        api.put_records(resent)  # the answer was "lost": sent again, flagged as resent
        _wait_ingested(runtime)
        if step:
            reshard(runtime.clients.kinesis, runtime.config.stream_name, step)
    producer.put_records([ProducerRecord(keys[0], POISON)])


def _committed(runtime: Any) -> int:
    return sum(p.next_seq for p in Tables(runtime.clients, runtime.config.tables).list_partitions())


def _wait_ingested(runtime: Any) -> None:
    """Until every record on the stream is committed and no partition is left CLOSED."""

    def done() -> bool:
        runtime.shard_sync.sync()
        partitions = Tables(runtime.clients, runtime.config.tables).list_partitions()
        idle = runtime.poller.is_idle()
        return idle and all(p.state != C.STATE_CLOSED for p in partitions)

    if not runtime.wait_until(done, timeout_s=TIMEOUT_S):
        raise AssertionError("ingest did not catch up")


def _consume_with_workers(runtime: Any, group: str) -> None:
    """Workers of ``group``, signing as a role that holds the group's managed policy."""
    tables = Tables(runtime.clients, runtime.config.tables)
    clock = ManualClock()
    settings = ConsumerSettings(take_interval_ms=1, idle_poll_interval_ms=0)

    def handle(records: list[LogRecord], checkpointer: Checkpointer) -> None:
        checkpointer.checkpoint()

    clients = runtime.config.clients(principals.consumer_group(group))
    worker = Worker(group, handle, runtime.config, settings=settings, clock=clock, clients=clients)
    for _ in range(200):
        worker.run_once()
        clock.advance(1)
        if _at_the_head(tables, group):
            break
    worker.shutdown()


def _at_the_head(tables: Tables, group: str) -> bool:
    """Every partition consumed: its lease at SHARD_END or at the head (no lease, or no
    checkpoint yet, is seq 0: an empty open partition)."""
    leases = {lease.partition_id: lease.checkpoint for lease in tables.list_leases(group)}
    for p in tables.list_partitions():
        wanted = C.SHARD_END if p.state == C.STATE_ENDED else str(p.next_seq)
        if (leases.get(p.partition_id) or "0") != wanted:
            return False
    return True


def _wait_lambda_consumers(runtime: Any) -> None:
    """Until each group got records and is at the head everywhere (so each refused the poison
    record and sent it to its destination)."""
    consumers = runtime.lambda_consumers

    def done() -> bool:
        delivered = all(g.function.records > 0 for g in consumers.groups)
        return delivered and _runners_idle(runtime)

    if not runtime.wait_until(done, timeout_s=TIMEOUT_S):
        raise AssertionError("the Lambda consumer groups did not reach the head")


def _runners_idle(runtime: Any) -> bool:
    """Every group's lease is at the head of every partition (or SHARD_END)."""
    tables = Tables(runtime.clients, runtime.config.tables)
    return all(_at_the_head(tables, g.settings.group) for g in runtime.lambda_consumers.groups)


def _run_spark(runtime: Any, trigger_arn: str, names: LocalNames, volume: _VolumeFeed) -> None:
    """The trigger handler starts each job as its schedule would; compaction first."""
    from lambdas.spark_trigger.handler import create_handler
    from shardlog.function_settings import SparkTriggerSettings

    target = provision_spark(runtime.clients)
    _lake_as_the_stack_leaves_it(runtime)
    settings = SparkTriggerSettings(
        application_id=target.application_id,
        execution_role_arn=target.execution_role_arn,
        spark_jobs_uri=target.scripts_uri,
        spark_deps_uri=f"{target.scripts_uri}deps.tar.gz",
        bucket=runtime.config.bucket,
        tables=runtime.config.tables,
        compact_after_records=TEST_COMPACT_AFTER_RECORDS,
    )
    trigger = create_handler(
        settings, runtime.config.clients(principals.function(create_handler.__module__))
    )
    assert volume.drain(trigger) > 0
    names.application_id = target.application_id
    names.execution_role = target.execution_role_arn.rsplit("/", 1)[1]
    names.artifacts_bucket = target.scripts_uri.removeprefix("s3://").split("/", 1)[0]
    now = datetime.now(UTC)
    # Compaction twice: the first run registers the lake table as a reader of the log and
    # plans over every partition; the second, caught up, over the live set (retirement.py).
    # A schedule's next firing: another scheduled time (the trigger's idempotency key).
    rounds = (("compact",), ("analytics", "maintain"), ("compact",))
    for index, jobs in enumerate(rounds):
        started = {}
        scheduled = (now + timedelta(hours=index)).isoformat()
        for job in jobs:
            request_log.stand_in(
                principals.SCHEDULER,
                "lambda",
                "Invoke",
                {"FunctionName": trigger_arn},
                runtime.config.endpoint_url,
            )
            answer = trigger({"job": job, "scheduledTime": scheduled}, _context())
            started[job] = answer["jobRunId"]
        for job, run_id in started.items():
            names.spark_runs[job] = _wait_run(runtime, target, run_id)


def _lake_as_the_stack_leaves_it(runtime: Any) -> None:
    """The Glue database exists (the stack creates it) and holds no lake table yet (the
    embedded AWS's catalog is one for the whole process)."""
    glue = runtime.clients.client("glue")
    database, table = C.DEFAULT_LAKE_TABLE.split(".")
    try:
        glue.create_database(DatabaseInput={"Name": database})
    except ClientError as exc:
        if exc.response["Error"]["Code"] != "AlreadyExistsException":
            raise
    try:
        glue.delete_table(DatabaseName=database, Name=table)
    except ClientError as exc:
        if exc.response["Error"]["Code"] != "EntityNotFoundException":
            raise


def _wait_run(runtime: Any, target: SparkTarget, run_id: str) -> str:
    """Until the run ends (bounded); a run that did not succeed fails the workload."""
    watcher = SparkTrigger(
        runtime.clients.client("emr-serverless"), target, JobArgs.from_config(runtime.config)
    )
    return str(watcher.wait(run_id, timeout_s=600, poll_s=0.5)["state"])


def _context() -> Any:
    from shardlog.local.lambda_context import LambdaContext

    return LambdaContext("shardlog-spark-trigger")


def _names(runtime: Any, names: LocalNames) -> None:
    config = runtime.config
    names.endpoint = urlparse(config.endpoint_url).netloc
    names.bucket, names.stream = config.bucket, config.stream_name
    names.partitions_table, names.consumers_table = config.partitions_table, config.consumers_table
    table = runtime.clients.dynamodb.describe_table(TableName=config.partitions_table)["Table"]
    names.partitions_stream_arn = table["LatestStreamArn"]
    consumers = runtime.lambda_consumers
    names.wake_queues = {g: url.rsplit("/", 1)[1] for g, url in consumers.wake_queues.items()}
    names.failure_queues = {g: url.rsplit("/", 1)[1] for g, url in consumers.failure_queues.items()}


def as_json(names: LocalNames) -> str:
    return json.dumps(names.__dict__, indent=2)
