"""`shardlog console`: serve the console (shardlog/console, docs/CONSOLE.md) on 127.0.0.1."""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
from dataclasses import replace
from typing import TYPE_CHECKING

import click

from shardlog import constants as C
from shardlog.config import ShardlogConfig

if TYPE_CHECKING:  # pragma: no cover
    from shardlog.console.server import ConsoleServer

DEFAULT_CONSOLE_PORT = 4568


@click.command("console")
@click.option(
    "--port",
    default=DEFAULT_CONSOLE_PORT,
    show_default=True,
    type=click.IntRange(0, 65535),
    help="Port on 127.0.0.1 (0: any free port).",
)
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="Only 127.0.0.1 or localhost: the console is never exposed beyond this machine.",
)
@click.option(
    "--endpoint-url",
    help="AWS endpoint (the embedded AWS's URL); overrides the global option.",
)
@click.option(
    "--stack-name",
    envvar=C.ENV_STACK_NAME,
    help="Read a deployed stack, found by its CloudFormation outputs; default: the names "
    "of the global options, the environment or the state file.",
)
@click.option(
    "--allow-actions",
    is_flag=True,
    help="Offer the actions (shard sync), each behind a confirmation and the process's token. "
    "Without it the console only reads.",
)
@click.option(
    "--max-seconds",
    type=click.FloatRange(min=0),
    default=None,
    help="Stop by itself after this long (default: until interrupted).",
)
@click.pass_context
def console(
    ctx: click.Context,
    port: int,
    host: str,
    endpoint_url: str | None,
    stack_name: str | None,
    allow_actions: bool,
    max_seconds: float | None,
) -> None:
    """Serve a web console of the log on 127.0.0.1: partitions and lineage, a message
    browser, consumer groups with their lag and on-failure batches, the lake table.

    It reads with your AWS credentials (as every command does), the same against a deployed
    stack (--stack-name) or the embedded AWS (`shardlog local up` starts one itself).
    Each page view costs a bounded number of AWS requests (docs/CONSOLE.md).
    """
    from shardlog.console.server import Console, ConsoleServer
    from shardlog.console.source import Deployment

    base = ctx.find_object(ShardlogConfig) or ShardlogConfig.resolve()
    config = replace(base, endpoint_url=endpoint_url or base.endpoint_url)
    ctx.find_root().obj = config  # an error's line names this endpoint
    if stack_name:
        deployment = Deployment.from_stack(config.clients(), stack_name)
    else:
        deployment = Deployment.from_config(config)
    # Another host than loopback is refused (ConsoleHostError: one line, exit 2).
    server = ConsoleServer(Console(deployment, allow_actions=allow_actions), port=port, host=host)
    serve(server, max_seconds)


def serve(server: ConsoleServer, max_seconds: float | None) -> None:
    """Start ``server``, print its URL, serve until interrupted (or ``max_seconds``)."""
    _access_log()
    url = start_console(server, "--port")
    mode = "actions allowed" if server.console.allow_actions else "read-only"
    click.echo(f"console at {url} ({mode}); Ctrl-C to stop")
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        with contextlib.suppress(KeyboardInterrupt):
            stop.wait(max_seconds)
    finally:
        server.shutdown()
    click.echo("stopped")


def _access_log() -> None:
    """The console's access log (method, path, status) on stderr."""
    logger = logging.getLogger("shardlog.console")
    if not logger.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(asctime)s console %(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)


def start_console(server: ConsoleServer, option: str) -> str:
    """Bind and start; a busy port is one line (exit 2), not a traceback."""
    from shardlog.console.server import ConsolePortError

    try:
        return server.start()
    except OSError as exc:
        raise ConsolePortError(
            f"cannot listen on 127.0.0.1:{server.port} ({exc.strerror or exc}): pass another "
            f"{option} (0 picks a free one) or stop what uses it"
        ) from None
