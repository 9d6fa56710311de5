"""Errors a person can read: one line saying what is wrong and what to do, exit code 2.

Every `shardlog` command runs inside ``ShardlogGroup.invoke``, so one place turns the errors
``shardlog.explain`` knows (missing credentials, an endpoint nobody answers on, a stream, table
or bucket that does not exist, throttling, shardlog's own errors) into ``error: <what> : <what
to do>`` on stderr. Anything else is a bug and keeps its traceback; ``--debug`` (or
SHARDLOG_DEBUG=1) shows the traceback for every error.
"""

from __future__ import annotations

from typing import Any

import click

from shardlog.config import ShardlogConfig
from shardlog.explain import explain

EXIT_ERROR = 2
DEBUG_OPTION = "debug"


class ShardlogGroup(click.Group):
    """The root command group: its invoke runs every subcommand, so errors end here."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (click.ClickException, click.exceptions.Exit, click.Abort):
            raise
        except Exception as exc:
            if ctx.params.get(DEBUG_OPTION):
                raise
            message = explain(exc, ctx.find_object(ShardlogConfig))
            if message is None:  # not an error of the environment: a bug, keep its traceback
                raise
            click.echo(f"error: {message}", err=True)
            ctx.exit(EXIT_ERROR)
