"""`shardlog consume`: join a consumer group with a Python processor or a KCL
multi-language record processor command; and the rows of `shardlog status --group`."""

from __future__ import annotations

import importlib
import json
import logging
import os
import signal
import sys
import threading
from datetime import UTC, datetime
from typing import Any

import click

from shardlog.clock import SystemClock
from shardlog.config import ShardlogConfig
from shardlog.consumer.multilang import MultiLangSettings, multilang_factory
from shardlog.consumer.positions import InitialPosition, StartPosition
from shardlog.consumer.settings import ConsumerSettings, validate_group
from shardlog.consumer.worker import Worker
from shardlog.exceptions import ValidationError
from shardlog.status_rows import group_rows

_DEFAULTS = ConsumerSettings()
_ML_DEFAULTS = MultiLangSettings()


def _ms_option(name: str, default: int, help_text: str) -> Any:
    return click.option(
        name, default=default, show_default=True, type=click.IntRange(min=0), help=help_text
    )


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--group", required=True, help="The consumer group (a leading $ is reserved).")
@click.option(
    "--processor",
    "processor_path",
    help="A Python processor, module:attr: a callable f(records, checkpointer) or a processor "
    "class (see docs/CONSUMERS.md). Or give a command after --.",
)
@click.option("--worker-id", help="This worker's id in the lease table (default host:pid:random).")
@_ms_option(
    "--lease-duration-ms", _DEFAULTS.lease_duration_ms, "A lease not renewed this long is taken."
)
@_ms_option("--renew-interval-ms", _DEFAULTS.renew_interval_ms, "Renew leases this often.")
@_ms_option("--take-interval-ms", _DEFAULTS.take_interval_ms, "List, take and balance this often.")
@click.option(
    "--max-leases",
    default=_DEFAULTS.max_leases,
    show_default=True,
    type=click.IntRange(min=1),
    help="Partitions this worker holds at most.",
)
@click.option(
    "--records-per-call",
    default=_DEFAULTS.records_per_call,
    show_default=True,
    type=click.IntRange(min=1),
    help="Records per process_records / processRecords at most.",
)
@_ms_option(
    "--idle-poll-interval-ms",
    _DEFAULTS.idle_poll_interval_ms,
    "A caught-up partition is polled again after this long.",
)
@_ms_option(
    "--active-poll-interval-ms",
    _DEFAULTS.active_poll_interval_ms,
    "A caught-up partition that delivered records within --active-period-ms is polled again "
    "after this long instead (lower latency while busy; one head read per poll).",
)
@_ms_option(
    "--active-period-ms",
    _DEFAULTS.active_period_ms,
    "How long after its last records a partition counts as busy.",
)
@_ms_option(
    "--failure-backoff-ms",
    _DEFAULTS.failure_backoff_ms,
    "After a processor failure, wait this long (doubling) before taking the partition again.",
)
@_ms_option("--max-failure-backoff-ms", _DEFAULTS.max_failure_backoff_ms, "The longest such wait.")
@click.option(
    "--graceful-handoff/--no-graceful-handoff",
    default=_DEFAULTS.graceful_handoff,
    show_default=True,
    help="Balance by asking the owner to checkpoint and hand a lease over (nothing delivered "
    "twice); --no-graceful-handoff steals at once, as KCL 2 does.",
)
@click.option(
    "--handoff-timeout-ms",
    type=click.IntRange(min=1),
    default=None,
    help="A handoff request not honoured this long falls back to a steal "
    "[default: lease duration / 2, above the renew interval].",
)
@click.option(
    "--start-position",
    type=click.Choice([p.value for p in InitialPosition]),
    default=InitialPosition.TRIM_HORIZON.value,
    show_default=True,
    help="Where the group starts, fixed per partition when the group is created (by its "
    "first worker); an existing group keeps its own. Partitions that appear later start "
    "at their first record.",
)
@click.option("--at-timestamp", help="For AT_TIMESTAMP: epoch ms, or ISO 8601 with a timezone.")
@click.option(
    "--at-sequence",
    multiple=True,
    metavar="PARTITION=SEQ",
    help="For AT_SEQUENCE: the log seq to start at in a partition (repeatable).",
)
@_ms_option(
    "--response-timeout-ms",
    _ML_DEFAULTS.response_timeout_ms,
    "A child that sends nothing this long while a reply is due is killed and restarted.",
)
@_ms_option(
    "--shutdown-timeout-ms",
    _ML_DEFAULTS.shutdown_timeout_ms,
    "A child gets this long to exit after its STDIN is closed.",
)
@click.option(
    "--max-line-bytes",
    type=int,
    default=_ML_DEFAULTS.max_line_bytes,
    show_default=True,
    help="A longer line on a child's STDOUT is dropped without being held (a protocol "
    "message is far shorter); on STDERR it is logged cut.",
)
@click.option(
    "--max-seconds",
    type=click.FloatRange(min=0),
    default=None,
    help="Stop by itself (graceful handoff) after this long; default: until SIGTERM or Ctrl-C.",
)
@click.option(
    "--progress-seconds",
    type=click.FloatRange(min=0.1),
    default=10.0,
    show_default=True,
    help="Print a progress line this often.",
)
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
@click.pass_context
def consume(
    ctx: click.Context,
    group: str,
    processor_path: str | None,
    worker_id: str | None,
    lease_duration_ms: int,
    renew_interval_ms: int,
    take_interval_ms: int,
    max_leases: int,
    records_per_call: int,
    idle_poll_interval_ms: int,
    active_poll_interval_ms: int,
    active_period_ms: int,
    failure_backoff_ms: int,
    max_failure_backoff_ms: int,
    graceful_handoff: bool,
    handoff_timeout_ms: int | None,
    start_position: str,
    at_timestamp: str | None,
    at_sequence: tuple[str, ...],
    response_timeout_ms: int,
    shutdown_timeout_ms: int,
    max_line_bytes: int,
    max_seconds: float | None,
    progress_seconds: float,
    command: tuple[str, ...],
) -> None:
    """Consume the log as consumer group GROUP, KCL-style, until stopped.

    \b
    shardlog consume --group billing --processor myapp.processors:Billing
    shardlog consume --group billing -- python my_kclpy_app.py

    A command is a KCL multi-language record processor (amazon_kclpy and the other KCL
    language libraries run unchanged): one child per partition this worker holds,
    speaking KCL's MultiLangDaemon protocol on STDIN/STDOUT. SIGTERM or Ctrl-C hands the
    partitions off gracefully (each processor is asked to checkpoint first).
    """
    if (processor_path is None) == (not command):
        raise click.UsageError("give --processor module:attr, or a command after --")
    try:
        validate_group(group)
        settings = ConsumerSettings(
            lease_duration_ms=lease_duration_ms,
            renew_interval_ms=renew_interval_ms,
            take_interval_ms=take_interval_ms,
            max_leases=max_leases,
            records_per_call=records_per_call,
            idle_poll_interval_ms=idle_poll_interval_ms,
            active_poll_interval_ms=active_poll_interval_ms,
            active_period_ms=active_period_ms,
            start_position=start_position_of(start_position, at_timestamp, at_sequence),
            failure_backoff_ms=failure_backoff_ms,
            max_failure_backoff_ms=max_failure_backoff_ms,
            graceful_handoff=graceful_handoff,
            handoff_timeout_ms=handoff_timeout_ms,
        )
        multilang = MultiLangSettings(response_timeout_ms, shutdown_timeout_ms, max_line_bytes)
    except ValidationError as exc:
        raise click.BadParameter(str(exc)) from None
    _configure_logging()
    config = ctx.find_object(ShardlogConfig) or ShardlogConfig.resolve()
    if command:
        worker = Worker(
            group,
            config=config,
            settings=settings,
            worker_id=worker_id,
            factory=multilang_factory(command, multilang),
        )
        what = "command " + " ".join(command)
    else:
        assert processor_path is not None
        worker = Worker(
            group, _load(processor_path), config, settings=settings, worker_id=worker_id
        )
        what = f"processor {processor_path}"
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    if max_seconds is not None:
        timer = threading.Timer(max_seconds, stop.set)
        timer.daemon = True
        timer.start()
    click.echo(
        f"worker {worker.worker_id} joined group {group} ({what}); "
        f"start position {settings.start_position.describe()}",
        err=True,
    )
    progress = threading.Thread(target=_report, args=(worker, stop, progress_seconds), daemon=True)
    progress.start()
    worker.run(stop)
    stats = worker.stats
    click.echo(
        f"worker {worker.worker_id} stopped: {stats.delivered} records delivered; "
        f"{stats.taken} leases taken, {stats.stolen} stolen, {stats.lost} lost, "
        f"{stats.finished} partitions finished, {stats.failed} processor failures",
        err=True,
    )


def _report(worker: Worker, stop: threading.Event, every_s: float) -> None:
    while not stop.wait(every_s):
        click.echo(
            f"progress: {worker.stats.delivered} records delivered; holding "
            f"{', '.join(worker.held) or 'no partitions'}",
            err=True,
        )


def _configure_logging() -> None:
    root = logging.getLogger()
    if not root.handlers:
        logging.basicConfig(
            level=os.environ.get("SHARDLOG_LOG_LEVEL", "INFO"),
            stream=sys.stderr,
            format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        )
    logging.getLogger("botocore").setLevel(logging.WARNING)


def _load(path: str) -> Any:
    module_name, _, attr = path.partition(":")
    if not module_name or not attr:
        raise click.BadParameter(f"--processor: expected module:attr, got {path!r}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        target: Any = importlib.import_module(module_name)
        for part in attr.split("."):
            target = getattr(target, part)
    except (ImportError, AttributeError) as exc:
        raise click.BadParameter(f"--processor: cannot load {path!r}: {exc}") from None
    return target


def start_position_of(
    kind: str, at_timestamp: str | None, at_sequence: tuple[str, ...]
) -> StartPosition:
    """A start position from the CLI's options (also `shardlog group seek`'s)."""
    position = InitialPosition(kind)
    if position is InitialPosition.AT_TIMESTAMP:
        if at_timestamp is None:
            raise ValidationError("at_timestamp", "AT_TIMESTAMP needs --at-timestamp")
        return StartPosition.at_timestamp(epoch_ms(at_timestamp))
    if position is InitialPosition.AT_SEQUENCE:
        sequences = {}
        for item in at_sequence:
            partition_id, _, seq = item.partition("=")
            if not partition_id or not seq.isdigit():
                raise ValidationError("at_sequence", f"expected PARTITION=SEQ, got {item!r}")
            sequences[partition_id] = int(seq)
        return StartPosition.at_sequence(sequences)
    if position is InitialPosition.LATEST:
        return StartPosition.latest()
    return StartPosition.trim_horizon()


def epoch_ms(value: str) -> int:
    """Epoch ms, or ISO 8601 with a timezone, as epoch ms."""
    if value.isdigit():
        return int(value)
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise ValidationError("at_timestamp", f"not epoch ms nor ISO 8601: {value!r}") from None
    if parsed.tzinfo is None:
        raise ValidationError("at_timestamp", f"give a timezone (e.g. Z): {value!r}")
    return int(parsed.timestamp() * 1000)


def echo_group_status(
    config: ShardlogConfig, group: str, as_json: bool, *, history: bool = False
) -> None:
    """`shardlog status --group G`: per partition, owner, checkpoint and lag in records."""
    try:
        validate_group(group)
    except ValidationError as exc:
        raise click.BadParameter(str(exc)) from None
    now_ms = SystemClock().now_ms()
    clients = config.clients()
    rows = group_rows(clients, config.bucket, config.tables, group, now_ms, history=history)
    kind = rows[0]["groupKind"] if rows else "workers"
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    click.echo(f"consumer group {group} ({'a Lambda function' if kind == 'lambda' else kind})")
    last_seek = rows[0]["lastSeek"] if rows else None
    if last_seek:
        at = datetime.fromtimestamp(last_seek["at"] / 1000, UTC).isoformat(timespec="seconds")
        click.echo(f"last seek: to {last_seek['position']} at {at} by {last_seek['by']}")
    click.echo(
        f"{'partition':<22} {'state':<7} {'next_seq':>9} {'checkpoint':>10} {'lag':>7} "
        f"{'lag ms':>9}  owner"
    )
    for row in rows:
        owner = row["leaseOwner"] or "-"
        if row["leaseOwner"] and not row["leaseLive"]:
            owner += " (expired)"
        if row["waitingOnParents"]:
            owner += "  [waiting on parents " + ", ".join(row["parents"]) + "]"
        checkpoint = row["checkpoint"] or "-"
        if row["checkpointSubSequenceNumber"] is not None:
            checkpoint += f"/{row['checkpointSubSequenceNumber']}"
        click.echo(
            f"{row['partitionId']:<22} {row['state']:<7} {row['nextSeq']:>9} {checkpoint:>10} "
            f"{row['lagRecords']:>7} {row['lagMs']:>9}  {owner}"
        )
