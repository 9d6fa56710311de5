"""A stack deployed into the embedded AWS, brought to life: its functions run in-process.

``shardlog.local.deploy`` creates the template's resources, but nothing invokes its
functions there: moto runs Lambda only in Docker, and its event source mappings, schedules
and API Gateway never fire. ``DeployedRuntime`` does what AWS would, with the local
runtime's parts, for the functions the stack itself holds. Each handler is built by its
own factory (``lambdas.<function>.handler.create_handler``) from **that function's deployed
environment** (``GetFunctionConfiguration``), validated by the same settings model as at a
Lambda cold start, so the resources it touches are the ones the template gave it, never a
default name:

- ingest: the local event-source poller on the stream, with the deployed mapping's batch
  size, batching window, bisect, retries and starting position, resuming after the ingest
  checkpoint of the deployed consumers table;
- shard sync: invoked once at start and whenever a shard ends (on AWS, its schedule);
- the producer API: the local HTTP server in front of the deployed API function, at a
  loopback URL (``api_url``) standing for the stack's ``ProducerApiUrl``;
- each Lambda consumer group: its runner behind the group's deployed FIFO wake queue
  (batch size from the deployed SQS mapping, the queue's own visibility timeout), calling
  the group's function in-process: that function is the user's, not the stack's, so it is
  given here (``group_functions``); the waker behind the partitions table's stream, and its
  sweep every ``LAMBDA_CONSUMER_SWEEP_RATE_MINUTES`` of the clock (on AWS, its schedule).

The Spark trigger is not driven: a job run is started directly and runs on the embedded
EMR Serverless. ``poll_once`` does one step of every source; no thread runs but the API
server's, so a test drives the stack deterministically, from its own waits.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from shardlog import constants as C
from shardlog.aws import Clients
from shardlog.clock import Clock, SystemClock
from shardlog.exceptions import ConfigurationError
from shardlog.local.event_sources import DynamoDbStreamSource, SqsEventSource
from shardlog.local.http_api import LocalApiServer
from shardlog.local.lambda_context import LambdaContext
from shardlog.local.poller import EventSourcePoller, EventSourceSettings
from shardlog.stack import DeployedStack
from shardlog.tables import Tables

Function = Callable[[dict[str, Any], Any], Any]
# The handler paths of the template's functions (lambdas/<function>/handler.py's `handler`).
INGEST = "lambdas.ingest.handler.handler"
SHARD_SYNC = "lambdas.shard_sync.handler.handler"
PRODUCER_API = "lambdas.producer_api.handler.handler"
RUNNER = "lambdas.lambda_consumer.handler.handler"
WAKER = "lambdas.consumer_waker.handler.handler"
MIN_PAUSE_S = 0.02
SWEEP_EVENT = {"source": "aws.scheduler", "detail-type": "Scheduled Event"}


@dataclass(frozen=True)
class DeployedFunction:
    """One ``AWS::Lambda::Function`` of the stack, as deployed."""

    logical_id: str
    name: str
    handler: str
    environment: dict[str, str]
    timeout_s: int


def deployed_functions(clients: Clients, stack_name: str) -> list[DeployedFunction]:
    """Every Lambda function of the stack with its deployed handler and environment."""
    cfn = clients.client("cloudformation")
    lam = clients.client("lambda")
    found = []
    for page in cfn.get_paginator("list_stack_resources").paginate(StackName=stack_name):
        for resource in page["StackResourceSummaries"]:
            if resource["ResourceType"] != "AWS::Lambda::Function":
                continue
            config = lam.get_function_configuration(FunctionName=resource["PhysicalResourceId"])
            found.append(
                DeployedFunction(
                    logical_id=resource["LogicalResourceId"],
                    name=config["FunctionName"],
                    handler=config["Handler"],
                    environment=dict(config.get("Environment", {}).get("Variables", {})),
                    timeout_s=int(config["Timeout"]),
                )
            )
    return found


class DeployedRuntime:
    def __init__(
        self,
        stack: DeployedStack,
        *,
        group_functions: Mapping[str, Function] | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.stack = stack
        self.config = stack.config()
        self.clients = self.config.clients()
        self.group_functions = dict(group_functions or {})
        self.clock = clock or SystemClock()
        self.functions = deployed_functions(self.clients, stack.name)
        self.api: LocalApiServer | None = None
        self.poller: EventSourcePoller
        self.shard_sync: Function
        self.waker: Function | None = None
        self.waker_stream: DynamoDbStreamSource | None = None
        self.runners: dict[str, SqsEventSource] = {}
        self._last_sweep_ms: int | None = None
        self._idle = threading.Event()  # never set: waits on it are bounded pauses
        self._pause_s = MIN_PAUSE_S

    # --- set-up ----------------------------------------------------------------------------
    def start(self) -> DeployedRuntime:
        from lambdas.producer_api.handler import create_handler as create_api
        from lambdas.shard_sync.handler import create_handler as create_sync
        from shardlog.function_settings import ProducerApiSettings, ShardSyncSettings

        sync = self._one(SHARD_SYNC)
        self.shard_sync = create_sync(ShardSyncSettings.from_env(sync.environment), self._own())
        self.sync_shards()  # the schedule's first run
        self.poller = self._ingest_poller()
        api = self._one(PRODUCER_API)
        handler = create_api(ProducerApiSettings.from_env(api.environment), self._own(), self.clock)
        self.api = LocalApiServer(handler)
        self.api.start()
        self._start_lambda_consumers()
        return self

    def _one(self, handler: str) -> DeployedFunction:
        (function,) = [f for f in self.functions if f.handler == handler]
        return function

    def _own(self) -> Clients:
        """Each function its own clients, as each Lambda function has its own SDK."""
        return self.config.clients()

    def _ingest_poller(self) -> EventSourcePoller:
        from lambdas.ingest.handler import create_handler
        from shardlog.function_settings import IngestSettings

        ingest = self._one(INGEST)
        settings = IngestSettings.from_env(ingest.environment)
        tables = Tables(self.clients, settings.tables)
        mapping = self._mapping(ingest, "kinesis")

        def checkpoint(shard_id: str) -> str | None:
            lease = tables.get_lease(C.INGEST_GROUP, shard_id)
            return lease.checkpoint if lease else None

        return EventSourcePoller(
            self.clients,
            mapping["EventSourceArn"].rsplit("/", 1)[1],
            create_handler(settings, self._own(), self.clock),
            settings=EventSourceSettings(
                batch_size=mapping["BatchSize"],
                batching_window_ms=1000 * mapping.get("MaximumBatchingWindowInSeconds", 0),
                bisect_on_error=mapping.get("BisectBatchOnFunctionError", False),
                maximum_retry_attempts=mapping.get("MaximumRetryAttempts", -1),
                starting_position=mapping["StartingPosition"],
            ),
            function_name=ingest.name,
            clock=self.clock,
            start_after=checkpoint,
            on_shard_end=lambda _shard: self.sync_shards(),
        )

    def _mapping(self, function: DeployedFunction, service: str) -> dict[str, Any]:
        """The function's event source mapping from ``service`` (kinesis, sqs, dynamodb)."""
        mappings = self.clients.client("lambda").list_event_source_mappings(
            FunctionName=function.name
        )["EventSourceMappings"]
        (mapping,) = [m for m in mappings if m["EventSourceArn"].split(":")[2] == service]
        return dict(mapping)

    def _start_lambda_consumers(self) -> None:
        from lambdas.consumer_waker.handler import create_handler as create_waker
        from lambdas.lambda_consumer.handler import create_handler as create_runner
        from shardlog.function_settings import WakerSettings
        from shardlog.lambda_consumer.settings import RunnerSettings
        from shardlog.local.lambda_context import LocalInvoker

        runners = [f for f in self.functions if f.handler == RUNNER]
        for runner in runners:
            settings = RunnerSettings.from_env(runner.environment)
            group = settings.consumer.group
            if group not in self.group_functions:
                raise ConfigurationError(
                    f"Lambda consumer group {group!r} of stack {self.stack.name}: give its "
                    "function (group_functions): the group's own function is not in the stack"
                )
            invoker = LocalInvoker(self.group_functions[group], group, self.clients.region)
            queue = settings.wake_queue_url
            visibility = self.clients.client("sqs").get_queue_attributes(
                QueueUrl=queue, AttributeNames=["VisibilityTimeout"]
            )["Attributes"]["VisibilityTimeout"]
            self.runners[group] = SqsEventSource(
                self.clients,
                queue,
                create_runner(settings, self._own(), self.clock, invoker=invoker),
                function_name=runner.name,
                batch_size=self._mapping(runner, "sqs")["BatchSize"],
                visibility_timeout_s=int(visibility),
                timeout_ms=1000 * runner.timeout_s,
                clock=self.clock,
            )
        if not runners:
            return
        waker = self._one(WAKER)
        self.waker = create_waker(
            WakerSettings.from_env(waker.environment), self._own(), self.clock
        )
        mapping = self._mapping(waker, "dynamodb")  # the partitions table's stream
        self.waker_stream = DynamoDbStreamSource(
            self.clients,
            mapping["EventSourceArn"],
            self.waker,
            function_name=waker.name,
            batch_size=mapping["BatchSize"],
            clock=self.clock,
        ).start()

    # --- driving ---------------------------------------------------------------------------
    def poll_once(self) -> int:
        """One step of the ingest poller, the waker's stream, each group's wake queue, and the
        sweep when due. Returns the work done (records and messages handled)."""
        work = self.poller.poll_once()
        if self.waker_stream is not None:
            work += self.waker_stream.poll_once()
            now = self.clock.now_ms()
            due = C.LAMBDA_CONSUMER_SWEEP_RATE_MINUTES * 60_000
            if self._last_sweep_ms is None or now - self._last_sweep_ms >= due:
                self._last_sweep_ms = now
                self._invoke(self.waker, SWEEP_EVENT, self._one(WAKER))
        for source in self.runners.values():
            work += source.poll_once()
        return work

    def wait(self, seconds: float) -> None:
        """What a caller's wait does while this runtime stands for AWS: one step of every
        source, then, if nothing was there to do, a pause (the batching window and Spark
        runs take real time) that doubles while nothing happens, up to ``seconds``, so an
        idle runtime leaves the cores to a Spark run."""
        if self.poll_once():
            self._pause_s = MIN_PAUSE_S
            return
        self._idle.wait(min(seconds, self._pause_s))
        self._pause_s = min(2 * self._pause_s, max(seconds, MIN_PAUSE_S))

    def settle(self, timeout_s: float) -> bool:
        """Step (bounded) until a step finds nothing to do and the poller holds no record:
        what the stream held is committed."""
        deadline = self.clock.now_ms() + int(timeout_s * 1000)
        while self.clock.now_ms() < deadline:
            if self.poll_once() == 0:
                if self.poller.is_idle():
                    return True
                self._idle.wait(0.05)  # records wait for the batching window
        return False

    def run_until(self, done: Callable[[], bool], timeout_s: float) -> bool:
        """Step (bounded by ``timeout_s`` of the clock) until ``done()``."""
        deadline = self.clock.now_ms() + int(timeout_s * 1000)
        while not done():
            if self.clock.now_ms() >= deadline:
                return False
            self.wait(0.05)
        return True

    @property
    def api_url(self) -> str:
        assert self.api is not None, "start() first"
        return self.api.url

    def sync_shards(self) -> Any:
        """One run of the deployed shard sync (what its schedule does on AWS)."""
        return self._invoke(self.shard_sync, SWEEP_EVENT, self._one(SHARD_SYNC))

    def _invoke(self, handler: Any, event: dict[str, Any], function: DeployedFunction) -> Any:
        context = LambdaContext(
            function.name,
            region=self.clients.region,
            timeout_ms=1000 * function.timeout_s,
            clock=self.clock,
        )
        return handler(event, context)

    def stop(self) -> None:
        if self.api is not None:
            self.api.shutdown()
            self.api = None

    def __enter__(self) -> DeployedRuntime:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
