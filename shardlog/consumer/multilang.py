"""The KCL MultiLangDaemon protocol: one child process per held partition, JSON lines.

Exactly the messages of KCL's multilang package (software.amazon.kinesis.multilang,
amazon_kclpy): the daemon writes one JSON object per line to the child's STDIN,

    {"action": "initialize", "shardId", "sequenceNumber", "subSequenceNumber"}
    {"action": "processRecords", "records": [{"action": "record", "data" (base64),
        "partitionKey", "sequenceNumber", "approximateArrivalTimestamp" (epoch ms),
        "subSequenceNumber"}], "millisBehindLatest"}
    {"action": "leaseLost"}  {"action": "shardEnded"}  {"action": "shutdownRequested"}
    {"action": "checkpoint", "sequenceNumber", "subSequenceNumber", "error"}  (a reply)

and after each of the first five reads the child's STDOUT until
``{"action": "status", "responseFor": <that action>}``, serving any
``{"action": "checkpoint", "sequenceNumber", "subSequenceNumber"}`` request on the
way (null sequenceNumber = everything delivered; at shard end, SHARD_END). Empty
lines and lines that are not a protocol message are skipped, as KCL does; STDERR
is logged. A child that exits, breaks the protocol, or sends nothing for
``response_timeout_ms`` is killed: ProcessorFailedError, so the worker releases
the lease and takes the partition again after a backoff (a new child).

A child's line is read at most ``max_line_bytes`` at a time: a longer STDOUT line (no
protocol message is anywhere near as long) is read on to its end in small chunks and
dropped, never held whole, so a child printing without end cannot grow the worker by more
than the cap; a longer STDERR line is logged cut to the cap. The daemon's memory per child
is bounded whatever the child prints.

The mapping to shardlog: sequenceNumber = the record's log seq (decimal string),
subSequenceNumber = 0 (shardlog does not aggregate). A checkpoint at sequenceNumber
S means records up to and including S are processed; the consumers table stores
S + 1, the next seq to read. initialize's sequenceNumber is that S (the last
record checkpointed), or TRIM_HORIZON when nothing was.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import os
import queue
import signal
import subprocess
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import IO, Any

from shardlog.consumer.checkpointer import Checkpointer
from shardlog.consumer.exceptions import CheckpointError, ProcessorFailedError
from shardlog.consumer.processor import ProcessorFactory
from shardlog.exceptions import ValidationError
from shardlog.format import LogRecord

logger = logging.getLogger("shardlog.consumer.multilang")

TRIM_HORIZON = "TRIM_HORIZON"
_EOF = object()
# The longest line a child may print: protocol messages are a few hundred bytes; this leaves
# room for long non-protocol lines (skipped) without letting one grow the worker unbounded.
DEFAULT_MAX_LINE_BYTES = 1 << 20
MIN_MAX_LINE_BYTES = 1024  # a status or checkpoint message must always fit
_DISCARD_CHUNK_BYTES = 64 * 1024


@dataclass(frozen=True)
class OverlongLine:
    """A line longer than the cap, read to its end and dropped: only its size is kept."""

    size: int


def bounded_lines(stream: IO[bytes], max_line_bytes: int) -> Iterator[bytes | OverlongLine]:
    """The stream's lines (newline excluded from the count), each at most ``max_line_bytes``;
    a longer one is consumed in chunks and reported as ``OverlongLine`` with its size."""
    while True:
        line = stream.readline(max_line_bytes + 1)
        if not line:
            return
        if len(line) <= max_line_bytes or line.endswith(b"\n"):
            yield line
            continue
        size = len(line)
        while not line.endswith(b"\n"):
            line = stream.readline(_DISCARD_CHUNK_BYTES)
            if not line:
                break
            size += len(line)
        yield OverlongLine(size - line.endswith(b"\n"))


@dataclass(frozen=True)
class MultiLangSettings:
    # A child that sends no line for this long while a reply is due is hung: killed, restarted.
    response_timeout_ms: int = 60_000
    # After the last message (or STDIN closed), a child gets this long to exit before a SIGKILL.
    shutdown_timeout_ms: int = 5_000
    # A longer line on the child's STDOUT is dropped unread (STDERR: logged cut to this).
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES

    def __post_init__(self) -> None:
        for name in ("response_timeout_ms", "shutdown_timeout_ms"):
            if getattr(self, name) < 1:
                raise ValidationError(name, "must be >= 1", limit=1)
        if self.max_line_bytes < MIN_MAX_LINE_BYTES:
            raise ValidationError(
                "max_line_bytes",
                f"must be >= {MIN_MAX_LINE_BYTES} (a protocol message must fit)",
                limit=MIN_MAX_LINE_BYTES,
            )


# --- messages ---------------------------------------------------------------------------
def initialize_message(shard_id: str, start_seq: int) -> dict[str, Any]:
    sequence = TRIM_HORIZON if start_seq <= 0 else str(start_seq - 1)
    return {
        "action": "initialize",
        "shardId": shard_id,
        "sequenceNumber": sequence,
        "subSequenceNumber": 0,
    }


def record_message(record: LogRecord) -> dict[str, Any]:
    return {
        "action": "record",
        "data": base64.b64encode(record.data).decode("ascii"),
        "partitionKey": record.partition_key,
        "sequenceNumber": str(record.seq),
        "approximateArrivalTimestamp": record.arrival_ms,
        "subSequenceNumber": 0,
    }


def process_records_message(
    records: Sequence[LogRecord], millis_behind_latest: int
) -> dict[str, Any]:
    return {
        "action": "processRecords",
        "records": [record_message(r) for r in records],
        "millisBehindLatest": millis_behind_latest,
    }


def checkpoint_reply(sequence: Any, subsequence: Any, error: str | None) -> dict[str, Any]:
    return {
        "action": "checkpoint",
        "sequenceNumber": sequence,
        "subSequenceNumber": subsequence,
        "error": error,
    }


LEASE_LOST = {"action": "leaseLost"}
SHARD_ENDED = {"action": "shardEnded"}
SHUTDOWN_REQUESTED = {"action": "shutdownRequested"}


def parse_line(line: str) -> dict[str, Any] | None:
    """A protocol message from one STDOUT line, or None for anything else (skipped)."""
    text = line.strip()
    if not text:
        return None
    try:
        message = json.loads(text)
    except ValueError:
        return None
    if not isinstance(message, dict) or message.get("action") not in ("status", "checkpoint"):
        return None
    return message


# --- one child process --------------------------------------------------------------------
class ChildProcess:
    """A child with a writer thread for STDIN and reader threads for STDOUT and STDERR, so
    neither a full pipe nor a silent child can block the daemon past its timeouts."""

    def __init__(
        self,
        command: Sequence[str],
        partition_id: str,
        max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
    ) -> None:
        self.command = list(command)
        self.partition_id = partition_id
        self.max_line_bytes = max_line_bytes
        self._lines: queue.Queue[Any] = queue.Queue()
        self._outgoing: queue.Queue[bytes | None] = queue.Queue()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        return self.proc.pid if self.proc else -1

    def start(self) -> None:
        self.proc = subprocess.Popen(
            self.command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,  # its own process group, so a kill takes its children too
        )
        name = f"shardlog-child-{self.partition_id}-{self.proc.pid}"
        assert self.proc.stdin and self.proc.stdout and self.proc.stderr
        for target, stream in (
            (self._write_stdin, self.proc.stdin),
            (self._read_stdout, self.proc.stdout),
            (self._read_stderr, self.proc.stderr),
        ):
            threading.Thread(target=target, args=(stream,), name=name, daemon=True).start()

    def send(self, message: dict[str, Any]) -> None:
        self._outgoing.put((json.dumps(message) + "\n").encode("utf-8"))

    def next_message(self, timeout_s: float, waiting_for: str) -> dict[str, Any]:
        """The next protocol message; ProcessorFailedError on exit or after timeout_s of silence."""
        deadline = time.monotonic() + timeout_s
        while True:
            remaining = deadline - time.monotonic()
            try:
                line = self._lines.get(timeout=max(remaining, 0))
            except queue.Empty:
                raise ProcessorFailedError(
                    f"child pid {self.pid} sent no reply to {waiting_for} within "
                    f"{timeout_s * 1000:.0f} ms (hung)"
                ) from None
            if line is _EOF:
                code = self.proc.wait() if self.proc else None
                raise ProcessorFailedError(
                    f"child pid {self.pid} exited with code {code} while the daemon waited "
                    f"for its reply to {waiting_for} (crashed)"
                )
            if isinstance(line, OverlongLine):
                logger.warning(
                    "%s: skipping a line of %d bytes on the child's STDOUT (longer than "
                    "max_line_bytes = %d; not a protocol message)",
                    self.partition_id,
                    line.size,
                    self.max_line_bytes,
                )
                continue
            message = parse_line(line)
            if message is None:
                if line.strip():
                    logger.info(
                        "%s: skipping unexpected line on the child's STDOUT: %s",
                        self.partition_id,
                        line.rstrip()[:500],
                    )
                continue
            return message

    def stop(self, timeout_s: float) -> int | None:
        """Close STDIN (the child's loop ends at EOF), wait, SIGKILL if it does not exit."""
        if self.proc is None:
            return None
        self._outgoing.put(None)
        try:
            return self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return self.kill()

    def kill(self) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGKILL)
        self._outgoing.put(None)
        return self.proc.wait()

    def _write_stdin(self, stream: IO[bytes]) -> None:
        while True:
            data = self._outgoing.get()
            if data is None:
                break
            try:
                stream.write(data)
                stream.flush()
            except OSError:  # the child is gone; its STDOUT reader reports it
                break
        with contextlib.suppress(OSError):
            stream.close()

    def _read_stdout(self, stream: IO[bytes]) -> None:
        for raw in bounded_lines(stream, self.max_line_bytes):
            if isinstance(raw, OverlongLine):
                self._lines.put(raw)
            else:
                self._lines.put(raw.decode("utf-8", errors="replace"))
        self._lines.put(_EOF)

    def _read_stderr(self, stream: IO[bytes]) -> None:
        for raw in bounded_lines(stream, self.max_line_bytes):
            if isinstance(raw, OverlongLine):
                text = f"(a line of {raw.size} bytes, longer than max_line_bytes: not shown)"
            else:
                text = raw.decode("utf-8", errors="replace").rstrip()
            if text:
                logger.warning("[%s child pid %d] %s", self.partition_id, self.pid, text)


# --- the processor the worker drives --------------------------------------------------------
class MultiLangProcessor:
    """A PartitionProcessor that forwards the lifecycle to a child process."""

    def __init__(
        self, command: Sequence[str], partition_id: str, settings: MultiLangSettings
    ) -> None:
        self.command = list(command)
        self.partition_id = partition_id
        self.settings = settings
        self.child: ChildProcess | None = None

    def initialize(self, partition_id: str, start_seq: int) -> None:
        child = ChildProcess(self.command, partition_id, self.settings.max_line_bytes)
        try:
            child.start()
        except OSError as exc:
            raise ProcessorFailedError(f"could not start {self.command!r}: {exc}") from exc
        self.child = child
        logger.info("%s: started child pid %d: %s", partition_id, child.pid, " ".join(self.command))
        self._exchange(initialize_message(partition_id, start_seq), None)

    def process_records(self, records: list[LogRecord], checkpointer: Checkpointer) -> None:
        message = process_records_message(records, checkpointer.millis_behind_latest)
        self._exchange(message, checkpointer)

    def lease_lost(self) -> None:
        if self.child is not None:
            self._exchange(LEASE_LOST, None)

    def shard_ended(self, checkpointer: Checkpointer) -> None:
        self._exchange(SHARD_ENDED, checkpointer)

    def shutdown_requested(self, checkpointer: Checkpointer) -> None:
        self._exchange(SHUTDOWN_REQUESTED, checkpointer)

    def close(self) -> None:
        child, self.child = self.child, None
        if child is not None:
            code = child.stop(self.settings.shutdown_timeout_ms / 1000)
            logger.info("%s: child pid %d exited with code %s", self.partition_id, child.pid, code)

    # --- the exchange ---------------------------------------------------------------------
    def _exchange(self, message: dict[str, Any], checkpointer: Checkpointer | None) -> None:
        """Send one message; serve checkpoints until the child's status for it arrives."""
        child = self.child
        if child is None:
            raise ProcessorFailedError(f"no child process for {self.partition_id}")
        action = message["action"]
        try:
            child.send(message)
            timeout_s = self.settings.response_timeout_ms / 1000
            while True:
                reply = child.next_message(timeout_s, action)
                if reply["action"] == "checkpoint":
                    child.send(self._checkpoint(reply, checkpointer))
                    continue
                if reply.get("responseFor") != action:
                    raise ProcessorFailedError(
                        f"child pid {child.pid} answered status for {reply.get('responseFor')!r} "
                        f"while the daemon waited for {action!r}"
                    )
                return
        except ProcessorFailedError:
            self.child = None
            code = child.kill()
            logger.error(
                "%s: child pid %d stopped (exit code %s)", self.partition_id, child.pid, code
            )
            raise

    def _checkpoint(self, request: dict[str, Any], checkpointer: Checkpointer | None) -> dict:
        sequence = request.get("sequenceNumber")
        subsequence = request.get("subSequenceNumber")
        error: str | None = None
        if checkpointer is None:
            error = "InvalidStateException"  # no checkpointer during initialize and leaseLost
        elif not _optional_string(sequence) or not _optional_int(subsequence):
            error = "IllegalArgumentException"
        else:
            try:
                checkpointer.checkpoint(sequence, subsequence)
            except CheckpointError as exc:
                error = exc.kcl_error
                logger.warning("%s: checkpoint %s refused: %s", self.partition_id, sequence, exc)
            except Exception as exc:  # an AWS or network error: KCL's dependency exception
                error = "KinesisClientLibDependencyException"
                logger.warning("%s: checkpoint %s failed: %s", self.partition_id, sequence, exc)
        return checkpoint_reply(sequence, subsequence, error)


def _optional_string(value: Any) -> bool:
    return value is None or isinstance(value, str)


def _optional_int(value: Any) -> bool:
    return value is None or (isinstance(value, int) and not isinstance(value, bool))


def multilang_factory(
    command: Sequence[str], settings: MultiLangSettings | None = None
) -> ProcessorFactory:
    """One MultiLangProcessor (one child) per partition the worker takes."""
    if not command:
        raise ValidationError("command", "give the record processor's command line", limit=1)
    resolved = settings or MultiLangSettings()
    return lambda partition_id: MultiLangProcessor(command, partition_id, resolved)
