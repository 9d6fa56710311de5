"""`shardlog`: produce, read, inspect and run the log, locally or on AWS."""

from __future__ import annotations

import base64
import contextlib
import json
import signal
import sys
import threading
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click

from shardlog import constants as C
from shardlog import retirement
from shardlog.cli.console import DEFAULT_CONSOLE_PORT, start_console
from shardlog.cli.consume import consume, echo_group_status
from shardlog.cli.errors import DEBUG_OPTION, ShardlogGroup
from shardlog.config import ShardlogConfig
from shardlog.exceptions import PortInUseError, ShardlogError, ValidationError
from shardlog.format import Compression
from shardlog.local import ports
from shardlog.outcomes import Outcome, PutResult
from shardlog.producer import Producer
from shardlog.reader import LogReader
from shardlog.records import iter_json_records, validate_record
from shardlog.shardsync import ShardSync
from shardlog.status_rows import ingest_rows


def _config(ctx: click.Context) -> ShardlogConfig:
    return ctx.find_object(ShardlogConfig) or ShardlogConfig.resolve()


def _emit(as_json: bool, payload: Any, text: str) -> None:
    click.echo(json.dumps(payload, sort_keys=True) if as_json else text)


@click.group(cls=ShardlogGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--endpoint-url",
    envvar=C.ENV_ENDPOINT_URL,
    help="AWS endpoint (the embedded AWS's URL); default: .shardlog/local.json, then AWS.",
)
@click.option("--region", envvar=C.ENV_REGION, help="AWS region.")
@click.option("--stream", "stream_name", envvar=C.ENV_STREAM_NAME, help="Kinesis stream name.")
@click.option("--bucket", envvar=C.ENV_BUCKET_NAME, help="Log bucket name.")
@click.option(
    "--state-file",
    default=C.LOCAL_STATE_FILE,
    show_default=True,
    help="The local runtime's state file, read for names and endpoint when present.",
)
@click.option(
    f"--{DEBUG_OPTION}",
    is_flag=True,
    envvar=C.ENV_DEBUG,
    help="On an error, show the Python traceback instead of one line.",
)
@click.pass_context
def cli(
    ctx: click.Context,
    endpoint_url: str | None,
    region: str | None,
    stream_name: str | None,
    bucket: str | None,
    state_file: str,
    debug: bool,
) -> None:
    """shardlog: an exactly-once event log on S3 + DynamoDB, fed by Kinesis.

    Errors print one line saying what is wrong and what to do (exit code 2); --debug shows
    the traceback.
    """
    ctx.obj = ShardlogConfig.resolve(
        state_file,
        endpoint_url=endpoint_url,
        region=region,
        stream_name=stream_name,
        bucket=bucket,
    )


@cli.command()
@click.option("--records", default=20_000, show_default=True, type=click.IntRange(1, 10_000_000))
@click.option("--keys", default=1_000, show_default=True, type=click.IntRange(1, 1_000_000))
@click.option("--shards", default=4, show_default=True, type=click.IntRange(2, 64))
@click.option(
    "--segment-max-records",
    default=C.DEFAULT_SEGMENT_MAX_RECORDS,
    show_default=True,
    type=click.IntRange(1, 100_000),
    help="Records per S3 object at most (1 = one object per record, Safya's layout).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@click.option(
    "--spark", is_flag=True, help="Then compact and analyse the log with Spark (local EMR)."
)
def demo(
    records: int, keys: int, shards: int, segment_max_records: int, as_json: bool, spark: bool
) -> None:
    """Run the system on the embedded AWS: produce across a split and a merge, ingest, verify."""
    from shardlog.local.demo import run_demo

    log = (lambda msg: click.echo(msg, err=True)) if not as_json else (lambda _m: None)
    with click.progressbar(
        length=records, label="producing", file=sys.stderr, show_pos=True
    ) as bar:
        report = run_demo(
            records=records,
            keys=keys,
            shards=shards,
            segment_max_records=segment_max_records,
            progress=bar.update,
            log=log,
            spark=spark,
        )
    summary = (
        f"{'OK' if report.ok else 'FAILED'}: {report.records} records over {report.keys} keys "
        f"in {report.partitions} partitions, {report.segments} segments\n"
        f"  exactly once, per-key order across the reshard, dense seqs: "
        f"{'verified' if report.ok else 'VIOLATED'}\n"
        f"  ingest AWS requests per 1,000 records: {report.requests_per_1000:.2f}\n"
        f"  through the producer HTTP API: {report.via_api} records (the rest: the SDK)\n"
        f"  Lambda consumer group: {report.lambda_consumer_records} records, each once, "
        f"each key in order\n"
        f"  elapsed {report.elapsed_s:.1f}s, {report.records_per_s:.0f} records/s"
    )
    if report.analytics:
        summary += (
            f"\n  Spark compaction + analytics: {report.analytics['records']} rows, "
            f"{report.analytics['duplicateRows']} duplicates: "
            f"{'exactly the log' if report.ok else 'VIOLATED'} (analytics above)"
        )
    lake = (report.analytics or {}).get("lake")
    if lake:
        from shardlog.lake.query import render_rows

        summary += (
            f"\n  lake table {lake['table']}: {lake['rows']} rows, each committed record once "
            f"(snapshot {lake['snapshotId']})\n  $ {lake['sampleQuery']}\n"
            + render_rows(lake["sample"])
        )
        for typed in lake.get("typed", []):
            summary += (
                f"\n  typed table {typed['table']}: {typed['rows']} rows; {typed['rejected']} "
                f"in {typed['table']}_rejected ({'; '.join(typed['refusals'])}): "
                f"each record in one of them, once\n  $ {typed['sampleQuery']}"
            )
    for violation in report.violations[:20]:
        summary += f"\n  violation: {violation}"
    _emit(as_json, report.as_dict(), summary)
    if not report.ok:
        sys.exit(1)


@cli.group()
def local() -> None:
    """The local runtime: embedded AWS, ingest poller, shard sync."""


@local.command("up")
@click.option("--port", default=4566, show_default=True, type=click.IntRange(0, 65535))
@click.option("--shards", default=4, show_default=True, type=click.IntRange(1, 64))
@click.option(
    "--api-port",
    default=4567,
    show_default=True,
    type=click.IntRange(0, 65535),
    help="Port of the producer HTTP API on 127.0.0.1 (0: any free port).",
)
@click.option(
    "--max-seconds",
    type=click.FloatRange(min=0),
    default=None,
    help="Stop by itself after this long (default: until interrupted).",
)
@click.option(
    "--segment-compression",
    default=C.DEFAULT_SEGMENT_COMPRESSION,
    show_default=True,
    callback=lambda _ctx, param, value: _setting(param, "SegmentCompression", value),
    help="How ingest stores segments: zlib (each one compressed when that saves a tenth of "
    "it) or none (shardlog:segmentCompression; docs/FORMAT.md, section 10).",
)
@click.option(
    "--lambda-consumer",
    "lambda_consumers",
    multiple=True,
    metavar="GROUP=MODULE:FUNCTION[?key=value&...]|GROUP=@FILE",
    callback=lambda _ctx, _param, specs: _lambda_groups(specs),
    help="Run a Lambda consumer group in-process: FUNCTION(event, context) of MODULE "
    "(importable from the current directory) gets the group's batches as Kinesis events. "
    "Settings as cdk.json's shardlog:lambdaConsumers keys, in a query string "
    "(billing=app:handler?batchSize=10&maximumRetryAttempts=2) or in a JSON file "
    '(billing=@billing.json: those keys plus "handler": "app:handler"); checked before '
    "anything starts. The group is registered (created at its start position) before "
    "anything runs. Repeatable.",
)
@click.option(
    "--ingest-batch-size",
    default=C.INGEST_BATCH_SIZE,
    show_default=True,
    callback=lambda _ctx, param, value: _setting(param, "IngestBatchSize", value),
    help="Records per ingest invocation at most, 1 to 10000 (shardlog:ingestBatchSize).",
)
@click.option(
    "--ingest-batching-window-ms",
    default=C.DEFAULT_INGEST_BATCHING_WINDOW_MS,
    show_default=True,
    callback=lambda _ctx, param, value: _setting(param, "IngestBatchingWindowMs", value),
    help="How long the poller gathers records before it invokes ingest: 0 to 300000, whole "
    "seconds as on AWS (shardlog:ingestBatchingWindowMs; docs/SCALE.md).",
)
@click.option(
    "--console-port",
    default=DEFAULT_CONSOLE_PORT,
    show_default=True,
    type=click.IntRange(-1, 65535),
    help="Port of the console (`shardlog console`, read-only) on 127.0.0.1 "
    "(0: any free port; -1: no console).",
)
@click.option(
    "--lake-tables",
    "lake_tables",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    callback=lambda _ctx, _param, path: _lake_tables(path),
    help="Declared typed lake tables: a JSON array (docs/LAKE.md) that compaction fills "
    "beside the raw table, each with its dead-letter table.",
)
@click.option(
    "--record-retention-days",
    type=click.IntRange(C.MIN_RECORD_RETENTION_DAYS, C.MAX_RECORD_RETENTION_DAYS),
    default=None,
    help="Trim segments older than this many days once the lake and every consumer group "
    "have them (shardlog:recordRetentionDays; docs/DEPLOY.md). Default: keep forever.",
)
@click.option(
    "--embedded-aws",
    "embedded_aws",
    type=click.Choice(["process", "in-process"]),
    default="process",
    show_default=True,
    help="Where the embedded AWS's server runs: a child process of its own (its state and "
    "interpreter lock apart from the ingest's and the consumers'; stopped with this command), "
    "or this process.",
)
@click.pass_context
def local_up(
    ctx: click.Context,
    port: int,
    shards: int,
    api_port: int,
    max_seconds: float | None,
    segment_compression: Compression,
    lambda_consumers: list[Any],
    ingest_batch_size: int,
    ingest_batching_window_ms: int,
    console_port: int,
    lake_tables: list[dict[str, Any]] | None,
    record_retention_days: int | None,
    embedded_aws: str,
) -> None:
    """Start the embedded AWS, the producer HTTP API, the console and any Lambda consumer
    groups on 127.0.0.1; ingest (and consume) until interrupted."""
    from shardlog.local.poller import EventSourceSettings
    from shardlog.local.runtime import LocalRuntime
    from shardlog.retention import RetentionPolicy

    state_file = ctx.find_root().params["state_file"]
    base = _config(ctx)
    runtime = LocalRuntime(
        ShardlogConfig(
            stream_name=base.stream_name,
            bucket=base.bucket,
            partitions_table=base.partitions_table,
            consumers_table=base.consumers_table,
            region=base.region,
            extra={C.LOCAL_STATE_LAKE_TABLES: lake_tables} if lake_tables else {},
        ),
        port=port,
        shard_count=shards,
        state_file=state_file,
        api_port=api_port,
        lambda_consumers=lambda_consumers,
        segment_compression=segment_compression,
        event_source=EventSourceSettings(
            batch_size=ingest_batch_size, batching_window_ms=ingest_batching_window_ms
        ),
        retention=RetentionPolicy(record_retention_days) if record_retention_days else None,
        aws_process=embedded_aws == "process",
    )
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with _ports_named(), runtime:
        runtime.run_in_background()
        click.echo(f"embedded AWS at {runtime.config.endpoint_url}")
        click.echo(f"producer API at {runtime.config.extra['apiUrl']} (Swagger UI: /docs)")
        if console_port >= 0:
            console_url = _local_console(ctx, runtime.config, console_port)
            runtime.config = replace(
                runtime.config, extra={**runtime.config.extra, "consoleUrl": console_url}
            )
            runtime.config.write(state_file)
            click.echo(f"console at {console_url}")
        for group, state in runtime.config.extra.get("lambdaConsumers", {}).items():
            click.echo(
                f"Lambda consumer group {group} -> {state['function']}; "
                f"on-failure queue {state['onFailureQueueUrl']}"
            )
        click.echo(f"state written to {state_file}: " + json.dumps(runtime.config.to_json()))
        click.echo(
            f"ingesting batches of up to {ingest_batch_size} records, gathered for up to "
            f"{ingest_batching_window_ms} ms; Ctrl-C to stop"
        )
        with contextlib.suppress(KeyboardInterrupt):
            stop.wait(max_seconds)
    click.echo("stopped")


def _lake_tables(path: Path | None) -> list[dict[str, Any]] | None:
    """The declarations of ``--lake-tables FILE``, checked: one error naming each field."""
    if path is None:
        return None
    from shardlog.lake.declared import LakeDeclarationError, parse_lake_tables

    try:
        return parse_lake_tables(json.loads(path.read_text()), str(path)).to_json()
    except (ValueError, LakeDeclarationError) as exc:  # not JSON, or a field refused
        raise click.BadParameter(str(exc), param_hint="--lake-tables") from exc


def _local_console(ctx: click.Context, config: ShardlogConfig, port: int) -> str:
    """`shardlog console` beside the local runtime, read-only; stopped with the command."""
    from shardlog.console.server import Console, ConsoleServer
    from shardlog.console.source import Deployment

    server = ConsoleServer(Console(Deployment.from_config(config)), port=port)
    url = start_console(server, "--console-port")
    ctx.call_on_close(server.shutdown)
    return url


# The option that chooses each local server's port.
PORT_OPTIONS = {ports.EMBEDDED_AWS: "--port", ports.PRODUCER_API: "--api-port"}


@contextlib.contextmanager
def _ports_named() -> Iterator[None]:
    """A port in use is one line naming the option that moves it (exit 2), no traceback."""
    try:
        yield
    except PortInUseError as exc:
        option = PORT_OPTIONS.get(exc.what, "--port")
        raise ShardlogError(
            f"{exc}: stop what holds it or choose another with {option} (0: any free port)"
        ) from exc


def _setting(param: click.Parameter, setting: str, value: Any) -> Any:
    """``value`` checked with the deployed stack's schema (shardlog/settings.py), so
    `local up` accepts exactly what `cdk deploy` accepts."""
    from shardlog import settings as S

    try:
        return S.parse_setting(getattr(S, setting), value)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param=param) from None


def _lambda_groups(specs: tuple[str, ...]) -> list[Any]:
    """Each GROUP=MODULE:FUNCTION resolved now: a bad one is a usage error before anything
    starts, not a failure at the first record."""
    from shardlog.local.lambda_consumers import parse_group

    groups = []
    for spec in specs:
        try:
            groups.append(parse_group(spec))
        except ShardlogError as exc:
            raise click.BadParameter(str(exc), param_hint="--lambda-consumer") from None
    names = [g.settings.group for g in groups]
    if len(set(names)) != len(names):
        raise click.BadParameter(f"a group is named twice: {names}", param_hint="--lambda-consumer")
    return groups


@cli.command()
@click.option("--key", "partition_key", help="Partition key (with --data).")
@click.option("--data", help="Record data as text (with --key).")
@click.option("--explicit-hash-key", help="Route by this hash key instead of the key's MD5.")
@click.option(
    "--file",
    "path",
    type=click.File("r"),
    help='JSON lines {"partitionKey", "data" | "dataBase64", "explicitHashKey", "recordId"}; '
    "- for stdin.",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON result per record.")
@click.option(
    "--via",
    type=click.Choice(["sdk", "api"]),
    default="sdk",
    show_default=True,
    help="sdk: PutRecords straight to Kinesis; api: POST /v1/records of the producer HTTP API.",
)
@click.option(
    "--api-url",
    help="The producer API (--via api); default: apiUrl in the state file. "
    "Requests to a non-loopback URL are signed with SigV4 (your AWS credentials).",
)
@click.option(
    "--idempotent",
    is_flag=True,
    help="Give each record without a recordId one, so a record whose outcome is unknown "
    "is sent again without a duplicate in the log (docs/API.md, idempotent produce).",
)
@click.pass_context
def produce(
    ctx: click.Context,
    partition_key: str | None,
    data: str | None,
    explicit_hash_key: str | None,
    path: Any,
    as_json: bool,
    via: str,
    api_url: str | None,
    idempotent: bool,
) -> None:
    """Put records into the stream (validated, batched, retried, per-key order kept).

    Records not put are printed as failed with their error code (OutcomeUnknown: they may
    be in the stream) and the exit code is 1.
    """
    config = _config(ctx)
    try:
        if path is not None:
            records = list(iter_json_records(path))
        elif partition_key is not None and data is not None:
            records = [validate_record(partition_key, data, explicit_hash_key)]
        else:
            raise click.UsageError("give --key and --data, or --file")
    except ValidationError as exc:
        raise click.BadParameter(str(exc)) from None
    results: list[Outcome]
    if via == "api":
        results = _produce_via_api(config, api_url, records, idempotent)
    else:
        producer = Producer(config.stream_name, config.clients(), idempotent=idempotent)
        with click.progressbar(length=len(records), label="producing", file=sys.stderr) as bar:
            results = producer.try_put_records(records, on_progress=bar.update)
    failed = 0
    for record, result in zip(records, results, strict=True):
        if not isinstance(result, PutResult):
            failed += 1
            _emit(
                as_json,
                {
                    "partitionKey": record.partition_key,
                    "errorCode": result.error_code,
                    "errorMessage": result.error_message,
                },
                f"{record.partition_key}\tFAILED\t{result.error_code}: {result.error_message}",
            )
            continue
        _emit(
            as_json,
            {
                "partitionKey": record.partition_key,
                "shardId": result.shard_id,
                "sequenceNumber": result.sequence_number,
            },
            f"{record.partition_key}\t{result.shard_id}\t{result.sequence_number}",
        )
    if failed:
        sys.exit(1)


def _produce_via_api(
    config: ShardlogConfig, api_url: str | None, records: list[Any], idempotent: bool
) -> list[Outcome]:
    from shardlog.api_client import ApiClient

    url = api_url or config.extra.get("apiUrl")
    if not url:
        raise click.UsageError("--via api needs --api-url (or apiUrl in the state file)")
    return ApiClient(url, region=config.region, idempotent=idempotent).put_records(records)


@cli.command()
@click.option("--group", help="A consumer group: per partition its owner, checkpoint and lag.")
@click.option("--json", "as_json", is_flag=True)
@click.option(
    "--all",
    "history",
    is_flag=True,
    help="Retired partitions too (history: one Scan of the partitions table).",
)
@click.pass_context
def status(ctx: click.Context, group: str | None, as_json: bool, history: bool) -> None:
    """Per live partition: state, next seq, trim horizon (the first seq still readable),
    ingest checkpoint, lease owner, lag (records behind). Retired partitions (done for every
    group and the lake) only with --all."""
    config = _config(ctx)
    if group is not None:
        echo_group_status(config, group, as_json, history=history)
        return
    rows = ingest_rows(config.clients(), config.stream_name, config.tables, history=history)
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    header = (
        f"{'partition':<22} {'state':<7} {'next_seq':>9} {'horizon':>9} {'lag':>6}  "
        "lease owner / checkpoint"
    )
    click.echo(header)
    for row in rows:
        click.echo(
            f"{row['partitionId']:<22} {row['state']:<7} {row['nextSeq']:>9} "
            f"{row['trimHorizonSeq']:>9} "
            f"{row['lagRecords'] if row['lagRecords'] is not None else '?':>6}  "
            f"{row['leaseOwner'] or '-'} / {row['ingestCheckpoint'] or '-'}"
        )


@cli.command()
@click.option("--partition", "partition_id", required=True, help="Partition (shard) id.")
@click.option("--from-seq", default=0, show_default=True, type=click.IntRange(min=0))
@click.option("--to-seq", default=None, type=click.IntRange(min=0), help="Exclusive end.")
@click.option("--limit", default=None, type=click.IntRange(min=1), help="At most this many.")
@click.pass_context
def read(
    ctx: click.Context, partition_id: str, from_seq: int, to_seq: int | None, limit: int | None
) -> None:
    """Committed records of one partition as JSON lines, in log order: seq FROM_SEQ up to
    TO_SEQ (exclusive) or the head. An unknown partition, a range that ends before it starts
    and a start past the head are refused."""
    if to_seq is not None and to_seq < from_seq:
        raise ValidationError(
            "--to-seq",
            f"{to_seq} is below --from-seq {from_seq} (the range [from, to) would be negative)",
            limit=from_seq,
        )
    config = _config(ctx)
    reader = LogReader(config.clients(), config.bucket, config.tables)
    head = reader.require_partition(partition_id).next_seq
    if from_seq > head:
        raise ValidationError(
            "--from-seq",
            f"{from_seq} is past partition {partition_id}'s head {head} (its committed records "
            f"are seq 0 to {head - 1}; --from-seq {head} prints nothing)"
            if head
            else f"{from_seq} is past partition {partition_id}'s head 0 (no record committed yet)",
            limit=head,
        )
    for count, record in enumerate(reader.records(partition_id, from_seq, to_seq)):
        if limit is not None and count >= limit:
            break
        click.echo(
            json.dumps(
                {
                    "partitionId": record.partition_id,
                    "seq": record.seq,
                    "partitionKey": record.partition_key,
                    "data": base64.b64encode(record.data).decode("ascii"),
                    "kinesisSequenceNumber": record.kinesis_sequence_number,
                    "arrivalTime": datetime.fromtimestamp(record.arrival_ms / 1000, UTC)
                    .isoformat(timespec="milliseconds")
                    .replace("+00:00", "Z"),
                }
            )
        )


@cli.command()
@click.option(
    "--index-history",
    is_flag=True,
    help="First bring every partition item written before the live index into it (once, "
    "after upgrading from a version without it: a Scan and one write per such item).",
)
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def sync(ctx: click.Context, index_history: bool, as_json: bool) -> None:
    """Shard sync: record lineage from ListShards, mark CLOSED and ENDED partitions."""
    config = _config(ctx)
    clients = config.clients()
    indexed = retirement.index_history(clients, config.tables) if index_history else []
    result = ShardSync(clients, config.stream_name, config.tables).sync()
    _emit(
        as_json,
        {**result.__dict__, "indexed": indexed},
        f"{result.shards} shards; created {result.created}; closed {result.closed}; "
        f"ended {result.ended}; retired {result.retired}"
        + (f"; indexed {indexed}" if index_history else ""),
    )


def main() -> None:  # pragma: no cover - console entry
    cli(standalone_mode=True)  # errors: shardlog.cli.errors.ShardlogGroup


from shardlog.cli.console import console as _console  # noqa: E402 - after cli exists
from shardlog.cli.group import group as _group_group  # noqa: E402 - after cli exists
from shardlog.cli.lake import lake as _lake_group  # noqa: E402 - after cli exists
from shardlog.cli.retention import retention as _retention  # noqa: E402 - after cli exists
from shardlog.cli.smoke import smoke as _smoke  # noqa: E402 - after cli exists
from shardlog.cli.spark import spark as _spark_group  # noqa: E402 - after cli exists

cli.add_command(_spark_group)
cli.add_command(_lake_group)
cli.add_command(consume)
cli.add_command(_smoke)
cli.add_command(_console)
cli.add_command(_group_group)
cli.add_command(_retention)
