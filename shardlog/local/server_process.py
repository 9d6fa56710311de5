"""The embedded AWS in a process of its own: moto's server, its state and its interpreter lock
apart from the local runtime's.

In one process, the embedded AWS's request threads share one interpreter lock with
everything else the runtime runs (the ingest poller and handler, the Lambda consumers'
event sources and runners, the user's function): at 5,000 records/s that process used all
of one core and commits fell behind (docs/PERFORMANCE.md, "The embedded AWS in a process of
its own"). ``EmbeddedAWSProcess`` runs the same server (``shardlog.local.http_server``) with
the same fidelity patches (``shardlog.local.embedded.apply_fidelity``) in a child process;
every client reaches it over HTTP as before.

The protocol between the two processes:

- the parent starts ``python -m shardlog.local.server_process --host H --port P`` with a
  pipe on its stdin, stdout and stderr;
- the child applies the patches, listens (``P`` 0: a free port) and writes one JSON line
  on stdout (anything else it prints goes to its stderr): ``{"port": N}``, or
  ``{"portInUse": {"host": H, "port": P}}`` when another process holds
  the port (the parent raises ``PortInUseError``, as the in-process server does); any other
  failure ends the child with its traceback on stderr;
- the parent waits for that line (bounded: ``START_TIMEOUT_S``), then asks for moto's
  dashboard until it answers (bounded too): only then is the endpoint handed out;
- the child serves until its stdin ends: the parent closes it to stop the child, and the
  kernel closes it when the parent dies, however it dies, so no child outlives its parent.
  The child ignores SIGINT: a Ctrl-C reaches the whole process group, and the runtime's
  threads still make requests while they stop;
- the child's stderr is copied to the parent's stderr line by line as it comes (a request
  the server failed on logs there), and its last lines are in the error when the child
  fails to start or ends on its own.

The state (streams, tables, buckets, queues) lives in the child and ends with it. What reads
moto's backends directly must run in the process that serves: the fidelity patches do (they
are applied in the child). A listener of ``shardlog.local.request_log.recording()`` sees only
its own process's server, so a test that records requests in memory uses the in-process
server; ``SHARDLOG_REQUEST_LOG`` (a directory) is inherited, and the child appends its
records there as ``requests-<its pid>.jsonl``.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import IO

from shardlog.exceptions import PortInUseError, ShardlogError
from shardlog.local import request_log
from shardlog.local.embedded import EmbeddedAWS, EmbeddedServer
from shardlog.local.ports import EMBEDDED_AWS

START_TIMEOUT_S = 60.0  # importing moto and binding takes 2 to 3 s on an idle core
STOP_TIMEOUT_S = 10.0  # then SIGTERM, then SIGKILL, each with this bound
HEALTH_PATH = "/moto-api/"  # moto's dashboard: no state read, no state changed
STDERR_TAIL_LINES = 40
_PACKAGE_ROOT = Path(__file__).resolve().parents[2]  # the directory holding shardlog/


def embedded_aws(port: int = 0, *, process: bool = False) -> EmbeddedServer:
    """The embedded AWS on ``port`` (0: a free one): in this process, or (``process``) in a
    child process of its own."""
    return EmbeddedAWSProcess(port=port) if process else EmbeddedAWS(port=port)


class EmbeddedAWSStartError(ShardlogError):
    """The embedded AWS's process did not come up: why, with the end of its stderr."""


class EmbeddedAWSProcess:
    """The embedded AWS served by a child process; the same surface as ``EmbeddedAWS``."""

    def __init__(self, port: int = 0, host: str = "127.0.0.1") -> None:
        if host not in ("127.0.0.1", "localhost"):
            raise ValueError("the embedded AWS only listens on the loopback interface")
        self.host = host
        self.port = port
        self.returncode: int | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._stderr: _StderrRelay | None = None

    @property
    def endpoint_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def start(self) -> str:
        """Start the child and wait (bounded) until it serves; on any failure it is stopped
        and the error says why."""
        # Stand-in records (shardlog.local.request_log.stand_in) are made in this process.
        request_log.install_from_environment()
        self._process = subprocess.Popen(
            [*self.command(), "--host", self.host, "--port", str(self.port)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=_child_environment(),
        )
        assert self._process.stderr is not None
        self._stderr = _StderrRelay(self._process.stderr)
        try:
            self.port = self._await_port(time.monotonic() + START_TIMEOUT_S)
            self._await_health(time.monotonic() + START_TIMEOUT_S)
        except BaseException:
            self.stop()
            raise
        return self.endpoint_url

    @staticmethod
    def command() -> list[str]:
        """The child's command line, without its options."""
        return [sys.executable, "-m", "shardlog.local.server_process"]

    def _await_port(self, deadline: float) -> int:
        process = self._process
        assert process is not None and process.stdout is not None
        while time.monotonic() < deadline:
            ready, _, _ = select.select([process.stdout], [], [], 0.1)
            if ready:
                line = process.stdout.readline()
                if not line:  # the child closed its stdout without a word: it is ending
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        process.wait(STOP_TIMEOUT_S)  # for its exit code
                    break
                return self._port_from(line)
            if process.poll() is not None:
                break
        raise self._failed("did not start")

    def _port_from(self, line: bytes) -> int:
        try:
            answer = json.loads(line)
        except ValueError:
            raise self._failed(f"answered {line[:200]!r} instead of its port") from None
        if "portInUse" in answer:
            raise PortInUseError(EMBEDDED_AWS, answer["portInUse"]["host"], self.port)
        return int(answer["port"])

    def _await_health(self, deadline: float) -> None:
        url = self.endpoint_url + HEALTH_PATH
        while time.monotonic() < deadline:
            if self._process is not None and self._process.poll() is not None:
                break
            with (
                contextlib.suppress(OSError, urllib.error.URLError),
                urllib.request.urlopen(url, timeout=5) as answer,
            ):
                if answer.status == 200:
                    return
            time.sleep(0.05)  # bounded by the deadline
        raise self._failed(f"listened on {self.endpoint_url} but did not answer {HEALTH_PATH}")

    def _failed(self, what: str) -> EmbeddedAWSStartError:
        process = self._process
        code = process.poll() if process is not None else None
        if process is not None and code is not None and self._stderr is not None:
            self._stderr.join(STOP_TIMEOUT_S)  # its last words, before they are quoted
        ended = f" (it exited with code {code})" if code is not None else ""
        tail = self._stderr.tail() if self._stderr is not None else ""
        said = f"; its stderr ended with:\n{tail}" if tail else "; it wrote nothing on stderr"
        return EmbeddedAWSStartError(f"the embedded AWS's process {what}{ended}{said}")

    def stop(self) -> None:
        """Close the child's stdin (it stops serving and exits), then wait, bounded: SIGTERM,
        then SIGKILL. Its stderr has been copied to this process's as it came."""
        process, self._process = self._process, None
        if process is None:
            return
        with contextlib.suppress(OSError):  # a child that already ended closed its end
            assert process.stdin is not None
            process.stdin.close()
        for escalate in (None, process.terminate, process.kill):
            if escalate is not None:
                with contextlib.suppress(OSError):
                    escalate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.returncode = process.wait(STOP_TIMEOUT_S)
                break
        if self._stderr is not None:
            self._stderr.join(STOP_TIMEOUT_S)
        if process.stdout is not None:
            process.stdout.close()

    def __enter__(self) -> EmbeddedAWSProcess:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _child_environment() -> dict[str, str]:
    """This process's environment, with the package's directory first on the path (the
    child imports the same shardlog, also when it runs from a checkout not installed)."""
    env = dict(os.environ)
    path = env.get("PYTHONPATH")
    env["PYTHONPATH"] = f"{_PACKAGE_ROOT}{os.pathsep}{path}" if path else str(_PACKAGE_ROOT)
    return env


class _StderrRelay:
    """Copies the child's stderr to this process's stderr as it comes; keeps its last lines."""

    def __init__(self, stream: IO[bytes]) -> None:
        self._stream = stream
        self._lines: collections.deque[str] = collections.deque(maxlen=STDERR_TAIL_LINES)
        self._thread = threading.Thread(target=self._copy, name="embedded-aws-stderr", daemon=True)
        self._thread.start()

    def _copy(self) -> None:
        with self._stream:
            for raw in iter(self._stream.readline, b""):
                line = raw.decode("utf-8", errors="replace")
                self._lines.append(line.rstrip("\n"))
                with contextlib.suppress(OSError, ValueError):  # our stderr closed
                    sys.stderr.write(line)
                    sys.stderr.flush()

    def join(self, timeout_s: float) -> None:
        self._thread.join(timeout_s)

    def tail(self) -> str:
        return "\n".join(self._lines)


def serve(host: str, port: int, stdin: IO[bytes], stdout: IO[str]) -> int:
    """The child: serve until ``stdin`` ends. Returns the exit code."""
    aws = EmbeddedAWS(port=port, host=host)
    try:
        aws.start()
    except PortInUseError as exc:
        stdout.write(json.dumps({"portInUse": {"host": exc.host, "port": exc.port}}) + "\n")
        stdout.flush()
        return 2
    stdout.write(json.dumps({"port": aws.port}) + "\n")
    stdout.close()  # the one line the parent reads
    try:
        while stdin.read(65536):  # nothing is sent: this waits for the end of the pipe
            pass
    finally:
        aws.stop()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Serve the embedded AWS until stdin ends (started by the local runtime)."
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args(argv)
    # A Ctrl-C reaches the whole process group; the parent stops this process when its own
    # threads no longer make requests (by closing stdin).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # The pipe on stdout carries the one ready line; whatever else is printed goes to stderr,
    # which the parent relays (nobody reads stdout after that line: it would fill and block).
    ready = os.fdopen(os.dup(sys.stdout.fileno()), "w")
    sys.stdout.flush()
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    return serve(args.host, args.port, sys.stdin.buffer, ready)


if __name__ == "__main__":
    raise SystemExit(main())
