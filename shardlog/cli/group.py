"""`shardlog group`: operate on an existing consumer group (worker or Lambda): `seek`."""

from __future__ import annotations

import getpass
import json
import socket
from dataclasses import replace

import click

from shardlog.cli.consume import start_position_of
from shardlog.config import ShardlogConfig
from shardlog.console.queries import iso_ms
from shardlog.consumer.positions import InitialPosition, StartPosition
from shardlog.consumer.seek import GroupSeek, SeekPlan
from shardlog.consumer.settings import validate_group
from shardlog.exceptions import ValidationError
from shardlog.reader import LogReader
from shardlog.tables import Tables


@click.group("group")
def group() -> None:
    """Consumer groups (worker or Lambda): move an existing group's position."""


@group.command("seek")
@click.option("--group", "name", required=True, help="The consumer group (worker or Lambda).")
@click.option("--trim-horizon", is_flag=True, help="Every partition from its first record.")
@click.option("--latest", is_flag=True, help="Only records committed after the seek.")
@click.option(
    "--at-timestamp",
    metavar="T",
    help="Every partition from its first record that arrived at or after T "
    "(epoch ms, or ISO 8601 with a timezone).",
)
@click.option(
    "--at-seq",
    multiple=True,
    metavar="PARTITION=SEQ",
    help="This partition from this log seq (0 to its head; repeatable); the others keep their "
    "checkpoints, but the descendants of a finished partition it re-opens start again at 0.",
)
@click.option("--dry-run", is_flag=True, help="Print what would move; write nothing.")
@click.option("--yes", "-y", is_flag=True, help="Do not ask before skipping records.")
@click.option("--by", help="Who seeks, recorded in the group's item [default: user@host].")
@click.option("--endpoint-url", help="AWS endpoint; overrides the global option.")
@click.option("--json", "as_json", is_flag=True, help="Print the plan (or what was done) as JSON.")
@click.pass_context
def seek(
    ctx: click.Context,
    name: str,
    trim_horizon: bool,
    latest: bool,
    at_timestamp: str | None,
    at_seq: tuple[str, ...],
    dry_run: bool,
    yes: bool,
    by: str | None,
    endpoint_url: str | None,
    as_json: bool,
) -> None:
    """Move every partition's checkpoint of group GROUP to a new position, fenced against
    its running workers or Lambda runner (docs/CONSUMERS.md section 5.1).

    \b
    shardlog group seek --group billing --at-timestamp 2026-11-26T09:00:00Z --dry-run
    shardlog group seek --group billing --trim-horizon --yes

    Per partition it prints the checkpoint before and after and the records that will be
    delivered again (reprocess) or never (skip). Without --yes it asks before skipping
    records. The seek is recorded in the group's item (`shardlog status --group`).
    """
    position = _position(trim_horizon, latest, at_timestamp, at_seq)
    try:
        validate_group(name)
    except ValidationError as exc:
        raise click.BadParameter(str(exc), param_hint="--group") from None
    config = ctx.find_object(ShardlogConfig) or ShardlogConfig.resolve()
    if endpoint_url:
        config = replace(config, endpoint_url=endpoint_url)
    clients = config.clients()
    seeker = GroupSeek(
        Tables(clients, config.tables), LogReader(clients, config.bucket, config.tables)
    )
    plan = seeker.preview(name, position)
    if dry_run:
        _emit(plan, as_json)
        return
    if plan.skip and not yes:
        click.echo(render(plan), err=True)
        click.confirm(
            f"{plan.skip} committed records would be skipped (never delivered to {name}); "
            "seek anyway?",
            abort=True,
            err=True,
        )
    _emit(seeker.seek(name, position, by or _who()), as_json)


def _position(
    trim_horizon: bool, latest: bool, at_timestamp: str | None, at_seq: tuple[str, ...]
) -> StartPosition:
    given = [
        flag
        for flag, on in (
            ("--trim-horizon", trim_horizon),
            ("--latest", latest),
            ("--at-timestamp", at_timestamp is not None),
            ("--at-seq", bool(at_seq)),
        )
        if on
    ]
    if len(given) != 1:
        raise click.UsageError(
            "give exactly one of --trim-horizon, --latest, --at-timestamp T, --at-seq P=N"
            + (f" (got {', '.join(given)})" if given else "")
        )
    named = [item.partition("=")[0] for item in at_seq]
    twice = sorted({p for p in named if named.count(p) > 1})
    if twice:
        raise click.BadParameter(f"a partition is named twice: {twice}", param_hint="--at-seq")
    kind = {
        "--trim-horizon": InitialPosition.TRIM_HORIZON,
        "--latest": InitialPosition.LATEST,
        "--at-timestamp": InitialPosition.AT_TIMESTAMP,
        "--at-seq": InitialPosition.AT_SEQUENCE,
    }[given[0]]
    try:
        return start_position_of(kind.value, at_timestamp, at_seq)
    except ValidationError as exc:
        raise click.BadParameter(str(exc), param_hint=given[0]) from None


def _who() -> str:
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no login name (a container without a passwd entry)
        user = "unknown"
    return f"{user}@{socket.gethostname()}"


def _emit(plan: SeekPlan, as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(plan.as_json(), indent=2, sort_keys=True))
    else:
        click.echo(render(plan))


def render(plan: SeekPlan) -> str:
    """The plan as a table: per partition, the checkpoint before and after, and counts."""
    kind = "a Lambda function" if plan.kind == "lambda" else plan.kind
    what = "done" if plan.done else "dry run: nothing written"
    lines = [
        f"consumer group {plan.group} ({kind}): seek to {plan.position.describe()} ({what})",
        f"{'partition':<22} {'state':<7} {'next_seq':>9} {'checkpoint':>10} -> {'new':>10} "
        f"{'reprocess':>9} {'skip':>9}",
    ]
    for move in plan.moves:
        lines.append(
            f"{move.partition_id:<22} {move.state:<7} {move.head:>9} {move.old or '-':>10} -> "
            f"{move.new:>10} {move.reprocess:>9} {move.skip:>9}"
        )
    lines.append(
        f"{len(plan.moves)} partitions: {plan.reprocess} records to deliver again, "
        f"{plan.skip} to skip (as of now; records committed meanwhile follow the position)"
    )
    if plan.done:
        lines.append(
            f"recorded in the group's item at {iso_ms(plan.at_ms)} by {plan.by}; running "
            "consumers of the group are fenced and stop at their next lease write; a Lambda "
            "group resumes at its next wake (a commit, or the sweep within a minute)"
        )
    return "\n".join(lines)
