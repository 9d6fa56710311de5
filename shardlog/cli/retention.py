"""`shardlog retention`: run the trim of every partition (shardlog/retention.py), or show
what it would trim. The deployed stack runs the same trim on a schedule."""

from __future__ import annotations

import json

import click

from shardlog import constants as C
from shardlog.config import ShardlogConfig
from shardlog.retention import RetentionPolicy, Trimmer


@click.group("retention")
def retention() -> None:
    """Record retention: the trim horizon below which the log no longer answers."""


@retention.command("run")
@click.option(
    "--days",
    type=click.IntRange(C.MIN_RECORD_RETENTION_DAYS, C.MAX_RECORD_RETENTION_DAYS),
    envvar=C.ENV_RECORD_RETENTION_DAYS,
    required=True,
    help=f"Keep records at least this many days (or {C.ENV_RECORD_RETENTION_DAYS}).",
)
@click.option(
    "--hold-for-groups/--no-hold-for-groups",
    default=True,
    show_default=True,
    help="Keep every segment some consumer group has not read yet.",
)
@click.option("--dry-run", is_flag=True, help="Print what would be trimmed; change nothing.")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def run(ctx: click.Context, days: int, hold_for_groups: bool, dry_run: bool, as_json: bool) -> None:
    """Advance each partition's trim horizon over the segments older than DAYS that the lake
    holds and (by default) every group has read, then tag them for the bucket's lifecycle
    rule to expire. Nothing is deleted here."""
    config = ctx.find_object(ShardlogConfig) or ShardlogConfig.resolve()
    policy = RetentionPolicy(days, hold_for_groups)
    trims = Trimmer(config.clients(), config.bucket, config.tables, policy).run(dry_run=dry_run)
    if as_json:
        rows = [
            {
                "partitionId": t.partition_id,
                "horizonBefore": t.horizon_before,
                "trimHorizonSeq": t.horizon,
                "reason": t.reason,
                "tagged": t.tagged,
                "dryRun": dry_run,
            }
            for t in trims
        ]
        click.echo(json.dumps(rows, indent=2))
        return
    for trim in trims:
        click.echo(("(dry run) " if dry_run else "") + trim.describe())
