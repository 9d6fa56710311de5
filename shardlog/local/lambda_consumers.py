"""Lambda consumer groups on the embedded AWS, with no Docker: the same waker and runner
handlers as on AWS, their event sources emulated in-process, and the group's function
called in-process (``LocalInvoker``, shardlog/local/lambda_context.py).

Each group is registered first (its start position fixed per partition, as a deploy's
custom resource does). Per group: an SQS FIFO wake queue (with a dead-letter queue), an
SQS on-failure queue, the runner handler behind a local SQS event source. Shared: the
partitions table's DynamoDB stream behind a local stream event source calling the waker,
and the sweep.
"""

from __future__ import annotations

import importlib
import json
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast
from urllib.parse import parse_qsl

from shardlog import constants as C
from shardlog.aws import Clients
from shardlog.clock import Clock, SystemClock
from shardlog.config import ShardlogConfig
from shardlog.consumer.settings import validate_group
from shardlog.exceptions import ConfigurationError, ValidationError
from shardlog.lambda_consumer.settings import LambdaConsumerSettings, RunnerSettings
from shardlog.lambda_consumer.wake import scope_tag, wake_queue_name
from shardlog.local import principals, request_log
from shardlog.local.event_sources import DynamoDbStreamSource, SqsEventSource
from shardlog.local.lambda_context import LocalInvoker

Function = Callable[[dict[str, Any], Any], Any]
# As the stack builds them (tests/infra/test_parity.py holds the two together).
RUNNER_TIMEOUT_MS = C.LAMBDA_CONSUMER_RUNNER_TIMEOUT_S * 1000
WAKE_VISIBILITY_TIMEOUT_S = C.LAMBDA_CONSUMER_RUNNER_TIMEOUT_S + 60
DEFAULT_SWEEP_INTERVAL_MS = C.LAMBDA_CONSUMER_SWEEP_RATE_MINUTES * 60_000
# Runners of one group at once, one partition each. On AWS the wake queue's event source runs
# one runner per message group (partition) with wakes, as many as there are; here up to this
# many, each its own execution environment (one ReceiveMessage fills them all).
RUNNER_ENVIRONMENTS = 10
# How often a wake queue's source receives when nothing nudged it. Lambda long-polls: a wake
# is taken when it is sent. Here the waker (commits, the sweep) nudges the sources when it
# has sent wakes and a finished runner (its own wakes) ends the wait too, so only a wake sent
# by another process (a seek from the CLI) waits up to this long.
WAKE_QUEUE_POLL_S = 0.25


@dataclass(frozen=True)
class LocalGroup:
    """``GROUP=MODULE:FUNCTION`` from the command line, resolved to the function."""

    settings: LambdaConsumerSettings
    function: Function
    target: str


SPEC = "GROUP=MODULE:FUNCTION[?key=value&...] or GROUP=@settings.json"


def parse_group(spec: str, **settings: Any) -> LocalGroup:
    """``GROUP=MODULE:FUNCTION`` (MODULE importable from the current directory), with the
    group's settings as cdk.json's camelCase keys either in a query string
    (``billing=app:handler?batchSize=10&maximumRetryAttempts=2``) or in a JSON file
    (``billing=@billing.json``: an object of the same keys plus ``handler``). Errors name
    the group and what is wrong, at start, not at the first record."""
    group, sep, target = spec.partition("=")
    if not sep or not group or not target:
        raise ValidationError("lambda-consumer", f"expected {SPEC}, got {spec!r}")
    validate_group(group)
    target, values = (
        _settings_file(group, target[1:]) if target[:1] == "@" else _query(group, target)
    )
    module_name, sep, attribute = target.partition(":")
    if not sep or not module_name or not attribute:
        raise ValidationError(
            "lambda-consumer", f"{group}: expected MODULE:FUNCTION, got {target!r}"
        )
    validated = LambdaConsumerSettings.from_camel(
        values, group=group, function_name=target, **settings
    )  # before the import: a bad setting is named even where the module is missing
    return LocalGroup(validated, _function(group, module_name, attribute), target)


def _query(group: str, target: str) -> tuple[str, dict[str, Any]]:
    """``MODULE:FUNCTION?key=value&...``: each value as the JSON it spells (a number, true,
    a list of filters) or else as text, then checked by the group's schema."""
    target, _, query = target.partition("?")
    values: dict[str, Any] = {}
    try:
        pairs = parse_qsl(query, keep_blank_values=True, strict_parsing=bool(query))
    except ValueError as exc:
        raise ValidationError(
            "lambda-consumer", f"{group}: bad settings {query!r}: {exc}"
        ) from None
    for key, text in pairs:
        if key in values:
            raise ValidationError("lambda-consumer", f"{group}: {key} is given twice")
        values[_own_key(group, key)] = _value(text)
    return target, values


def _settings_file(group: str, name: str) -> tuple[str, dict[str, Any]]:
    """``@FILE``: a JSON object of the group's camelCase settings and its ``handler``."""
    try:
        values = json.loads(Path(name).read_text())
    except OSError as exc:
        raise ValidationError("lambda-consumer", f"{group}: cannot read {name}: {exc}") from None
    except ValueError as exc:
        raise ValidationError("lambda-consumer", f"{group}: {name} is not JSON: {exc}") from None
    if not isinstance(values, dict):
        raise ValidationError("lambda-consumer", f"{group}: {name} must hold a JSON object")
    handler = values.pop("handler", None)
    if not isinstance(handler, str):
        raise ValidationError(
            "lambda-consumer", f'{group}: {name} needs "handler": "MODULE:FUNCTION"'
        )
    for key in values:
        _own_key(group, key)
    return handler, values


def _own_key(group: str, key: str) -> str:
    if key in ("group", "functionName", "functionArn"):
        raise ValidationError(
            "lambda-consumer",
            f"{group}: {key} is not a setting here: the group and its function are "
            "GROUP=MODULE:FUNCTION",
        )
    return key


def _value(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text  # a name or an ARN: the schema checks it


def _function(group: str, module_name: str, attribute: str) -> Function:
    if str(Path.cwd()) not in sys.path:
        sys.path.insert(0, str(Path.cwd()))
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigurationError(f"{group}: cannot import {module_name!r}: {exc}") from exc
    function = getattr(module, attribute, None)
    if not callable(function):
        raise ConfigurationError(f"{group}: {module_name} has no function {attribute!r}")
    return cast(Function, function)


class LocalLambdaConsumers:
    def __init__(
        self,
        clients: Clients,
        config: ShardlogConfig,
        groups: Sequence[LocalGroup],
        *,
        clock: Clock | None = None,
        sweep_interval_ms: int = DEFAULT_SWEEP_INTERVAL_MS,
        runner_environments: int = RUNNER_ENVIRONMENTS,
    ) -> None:
        names = [g.settings.group for g in groups]
        if len(set(names)) != len(names):
            raise ConfigurationError(f"a Lambda consumer group is named twice: {names}")
        self.clients = clients
        self.config = config
        self.groups = list(groups)
        self.clock = clock or SystemClock()
        self.sweep_interval_ms = sweep_interval_ms
        self.runner_environments = max(1, runner_environments)
        self.wake_queues: dict[str, str] = {}
        self.wake_dlqs: dict[str, str] = {}
        self.failure_queues: dict[str, str] = {}
        self.sources: dict[str, SqsEventSource] = {}
        self.stream: DynamoDbStreamSource | None = None
        self.waker: Callable[[dict[str, Any], Any], Any] | None = None
        self._last_sweep_ms: int | None = None
        self._threads: list[threading.Thread] = []

    # --- set-up --------------------------------------------------------------------------
    def start(self) -> LocalLambdaConsumers:
        from lambdas.consumer_waker.handler import create_handler as create_waker
        from lambdas.lambda_consumer.handler import create_handler as create_runner
        from shardlog.function_settings import WakerSettings

        sqs = self.clients.client("sqs")
        stream_arn = self.clients.kinesis.describe_stream_summary(
            StreamName=self.config.stream_name
        )["StreamDescriptionSummary"]["StreamARN"]
        self._register()  # the groups' positions are fixed before any wake reaches a runner
        for group in self.groups:
            name = group.settings.group
            self._create_queues(sqs, name)
            settings = RunnerSettings(
                consumer=group.settings.model_copy(
                    update={
                        "on_failure_destination": group.settings.on_failure_destination
                        or self._queue_arn(self.failure_queues[name])
                    }
                ),
                bucket=self.config.bucket,
                tables=self.config.tables,
                wake_queue_url=self.wake_queues[name],
                event_source_arn=stream_arn,
                region=self.clients.region,
            )
            # The runner signs as its group's runner; its wake queue's event source too (on AWS
            # the event source mapping reads with the function's role).
            runner = principals.function(create_runner.__module__, name)
            invoker = LocalInvoker(
                group.function,
                group.target,
                self.clients.region,
                on_invoke=_invoke_request(
                    runner, group.settings.function_name, self.config.endpoint_url or ""
                ),
            )
            clients = self.config.clients(runner)  # boto3's clients are safe for threads
            handlers = [
                create_runner(settings, clients, self.clock, invoker=invoker)
                for _ in range(self.runner_environments)
            ]
            self.sources[name] = SqsEventSource(
                clients,
                self.wake_queues[name],
                handlers[0],
                handlers=handlers[1:],
                function_name=f"shardlog-consumer-{_safe(name)}",
                batch_size=C.LAMBDA_CONSUMER_WAKE_BATCH_SIZE,
                visibility_timeout_s=WAKE_VISIBILITY_TIMEOUT_S,
                timeout_ms=RUNNER_TIMEOUT_MS,
                clock=self.clock,
            )
        waker_settings = WakerSettings(
            queues=self.wake_queues,
            tables=self.config.tables,
        )
        waker = principals.function(create_waker.__module__)
        self.waker = self._nudging(
            create_waker(waker_settings, self.config.clients(waker), self.clock)
        )
        self._enable_stream()
        self.stream = DynamoDbStreamSource(
            self.config.clients(waker),
            self._stream_arn(),
            self.waker,
            function_name="shardlog-waker",
            batch_size=C.WAKER_BATCH_SIZE,
        ).start()
        return self

    def _nudging(self, waker: Callable[[dict[str, Any], Any], Any]) -> Function:
        """The waker, telling the wake queues' sources to receive once it has sent wakes."""

        def wake(event: dict[str, Any], context: Any) -> Any:
            try:
                return waker(event, context)
            finally:  # sent or not: a receive costs one request
                for source in self.sources.values():
                    source.nudge()

        return wake

    def _register(self) -> None:
        """What the stack's custom resource does at deploy, through the same handler."""
        from lambdas.group_registration.handler import create_event
        from lambdas.group_registration.handler import create_handler as create_registration
        from shardlog.function_settings import RegistrationSettings

        settings = RegistrationSettings(
            bucket=self.config.bucket,
            tables=self.config.tables,
        )
        signer = principals.function(create_registration.__module__)  # its own role on AWS
        registration = create_registration(
            settings, self.config.clients(signer), self.clock, respond=lambda _url, _body: None
        )
        context = _context("shardlog-group-registration", self.clients)
        for group in self.groups:
            answer = registration(create_event(group.settings), context)
            if answer["Status"] != "SUCCESS":
                raise ConfigurationError(f"{group.settings.group}: {answer['Reason']}")

    def _create_queues(self, sqs: Any, group: str) -> None:
        # Named per deployment too: runtimes sharing one embedded AWS never share a queue.
        scope = self.config.stream_name
        safe = f"{_safe(group)[:48]}-{scope_tag(scope)}"  # 80 characters at most
        dlq = sqs.create_queue(
            QueueName=f"shardlog-wake-dlq-{safe}.fifo", Attributes={"FifoQueue": "true"}
        )["QueueUrl"]
        self.wake_dlqs[group] = dlq
        self.wake_queues[group] = sqs.create_queue(
            QueueName=wake_queue_name(group, scope),
            Attributes={
                "FifoQueue": "true",
                "DeduplicationScope": C.LAMBDA_CONSUMER_WAKE_DEDUPLICATION_SCOPE,
                "FifoThroughputLimit": C.LAMBDA_CONSUMER_WAKE_FIFO_THROUGHPUT_LIMIT,
                "VisibilityTimeout": str(WAKE_VISIBILITY_TIMEOUT_S),
                "RedrivePolicy": json.dumps(
                    {
                        "deadLetterTargetArn": self._queue_arn(dlq),
                        "maxReceiveCount": str(C.LAMBDA_CONSUMER_WAKE_MAX_RECEIVES),
                    }
                ),
            },
        )["QueueUrl"]
        self.failure_queues[group] = sqs.create_queue(QueueName=f"shardlog-on-failure-{safe}")[
            "QueueUrl"
        ]

    def _queue_arn(self, url: str) -> str:
        attributes = self.clients.client("sqs").get_queue_attributes(
            QueueUrl=url, AttributeNames=["QueueArn"]
        )
        return str(attributes["Attributes"]["QueueArn"])

    def _stream_arn(self) -> str:
        """What the event source mapping is given (it never describes the table itself)."""
        table = self.clients.dynamodb.describe_table(TableName=self.config.partitions_table)
        return str(table["Table"]["LatestStreamArn"])

    def _enable_stream(self) -> None:
        ddb = self.clients.dynamodb
        table = ddb.describe_table(TableName=self.config.partitions_table)["Table"]
        if not table.get("StreamSpecification", {}).get("StreamEnabled"):
            ddb.update_table(
                TableName=self.config.partitions_table,
                StreamSpecification={"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"},
            )

    # --- driving -------------------------------------------------------------------------
    def sweep(self) -> Any:
        assert self.waker is not None
        self._last_sweep_ms = self.clock.now_ms()
        return self.waker({"source": "shardlog.sweep"}, _context("shardlog-waker", self.clients))

    def poll_once(self) -> int:
        """One step of every source (and the sweep when due). Returns the work done."""
        assert self.stream is not None
        work = self.stream.poll_once()
        for source in self.sources.values():
            work += source.poll_once()
        now = self.clock.now_ms()
        if self._last_sweep_ms is None or now - self._last_sweep_ms >= self.sweep_interval_ms:
            self.sweep()
        return work

    def run_in_background(self, stop: threading.Event) -> None:
        assert self.stream is not None
        runners = [(f"shardlog-runner-{g}", self._runner_loop(s)) for g, s in self.sources.items()]
        for name, target in [
            ("shardlog-waker-stream", self.stream.run),
            *runners,
            ("shardlog-sweep", self._sweep_loop),
        ]:
            thread = threading.Thread(target=target, args=(stop,), name=name, daemon=True)
            thread.start()
            self._threads.append(thread)

    @staticmethod
    def _runner_loop(source: SqsEventSource) -> Callable[[threading.Event], None]:
        return lambda stop: source.run(stop, WAKE_QUEUE_POLL_S)

    def _sweep_loop(self, stop: threading.Event) -> None:
        while not stop.wait(self.sweep_interval_ms / 1000):
            try:
                self.sweep()
            except Exception:  # a failed sweep is retried at the next interval
                import logging

                logging.getLogger("shardlog.local").exception("sweep failed")

    def join(self, timeout_s: float = 30) -> None:
        for thread in self._threads:
            thread.join(timeout_s)
        self._threads.clear()

    def state(self) -> dict[str, Any]:
        """What `.shardlog/local.json` records of the groups."""
        return {
            group.settings.group: {
                "function": group.target,
                "onFailureQueueUrl": self.failure_queues[group.settings.group],
                "wakeQueueUrl": self.wake_queues[group.settings.group],
            }
            for group in self.groups
        }


def _invoke_request(principal: str, function_name: str, endpoint: str) -> Callable[[], None]:
    """The Lambda Invoke an in-process call stands for, as the embedded AWS would record it."""

    def record() -> None:
        request_log.stand_in(
            principal,
            "lambda",
            "Invoke",
            {"FunctionName": function_name, "InvocationType": "RequestResponse"},
            endpoint,
        )

    return record


def _safe(group: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "-" for c in group)[:50]


def _context(function_name: str, clients: Clients) -> Any:
    from shardlog.local.lambda_context import LambdaContext

    return LambdaContext(function_name, region=clients.region)
