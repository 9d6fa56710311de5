"""The embedded AWS in a process of its own (shardlog/local/server_process.py): the local
runtime works over it end to end, its state is the child's, it stops with its parent (also
when the parent dies), and a child that cannot start is one readable error."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest
from moto.core import DEFAULT_ACCOUNT_ID
from moto.kinesis.models import kinesis_backends

from shardlog import constants as C
from shardlog.exceptions import PortInUseError
from shardlog.lambda_consumer.settings import LambdaConsumerSettings
from shardlog.local import server_process
from shardlog.local.lambda_consumers import LocalGroup
from shardlog.local.server_process import EmbeddedAWSProcess, EmbeddedAWSStartError
from shardlog.producer import Producer
from shardlog.records import ProducerRecord
from tests.support.lambda_consumers import Recorder
from tests.support.runtime import e2e_runtime

KEYS = [f"user-{i}" for i in range(6)]
GONE_WITHIN_S = 30.0


def gone(pid: int) -> bool:
    """The process ended (a zombie nobody reaped has ended too)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


def wait_gone(pid: int, timeout_s: float = GONE_WITHIN_S) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if gone(pid):
            return True
        time.sleep(0.05)  # bounded by the deadline
    return gone(pid)


def refused(endpoint: str) -> bool:
    host, port = endpoint.removeprefix("http://").split(":")
    with socket.socket() as sock:
        try:
            sock.connect((host, int(port)))
        except ConnectionRefusedError:
            return True
    return False


def test_the_runtime_produces_ingests_and_consumes_over_the_child_and_stops_it() -> None:
    recorder = Recorder()
    group = LambdaConsumerSettings(group="apart", function_name="recorder", batch_size=10)
    runtime = e2e_runtime(
        "apart",
        api_port=None,
        aws_process=True,
        lambda_consumers=[LocalGroup(group, recorder, "tests:recorder")],
    )
    with runtime:
        aws = runtime.aws
        assert isinstance(aws, EmbeddedAWSProcess)
        pid = aws.pid
        assert pid is not None and pid != os.getpid()
        counts = dict.fromkeys(KEYS, 0)
        batch = []
        for i in range(60):
            key = KEYS[i % len(KEYS)]
            batch.append(ProducerRecord(key, f"{key}:{counts[key]}".encode()))
            counts[key] += 1
        Producer(runtime.config.stream_name, runtime.clients).put_records(batch)

        def delivered() -> int:
            return len({(s.partition_id, s.seq) for call in recorder.calls for s in call})

        assert runtime.wait_until(lambda: delivered() == 60, timeout_s=60), delivered()
        assert runtime.committed_records() == 60
        # The state is the child's: this process's moto holds no such stream.
        streams = kinesis_backends[DEFAULT_ACCOUNT_ID][C.DEFAULT_REGION].streams
        assert runtime.config.stream_name not in streams
        started = time.monotonic()
    stop_s = time.monotonic() - started

    assert aws.returncode == 0  # it stopped when its stdin closed: no signal was needed
    assert stop_s < server_process.STOP_TIMEOUT_S
    assert gone(pid)
    assert refused(aws.endpoint_url)
    per_key: dict[str, list[int]] = defaultdict(list)
    seen: set[tuple[str, int]] = set()
    for call in recorder.calls:
        for s in call:
            if (s.partition_id, s.seq) not in seen:
                seen.add((s.partition_id, s.seq))
                key, number = s.data.decode().split(":")
                per_key[key].append(int(number))
    assert dict(per_key) == {key: list(range(n)) for key, n in counts.items()}


PARENT = """
import os, signal, sys
from shardlog.local.server_process import EmbeddedAWSProcess
aws = EmbeddedAWSProcess()
aws.start()
print(aws.pid, aws.endpoint_url, flush=True)
os.kill(os.getpid(), signal.SIGKILL)  # no stop(), no atexit: the parent just dies
"""


def test_the_child_ends_when_its_parent_dies_without_stopping_it() -> None:
    parent = subprocess.run(
        [sys.executable, "-c", PARENT], capture_output=True, text=True, timeout=120
    )
    assert parent.returncode == -signal.SIGKILL, parent.stderr
    pid_text, endpoint = parent.stdout.split()
    pid = int(pid_text)
    try:
        assert wait_gone(pid), "the embedded AWS's process outlived its parent"
        assert refused(endpoint)
    finally:
        if not gone(pid):  # never leave it behind, even when the test fails
            os.kill(pid, signal.SIGKILL)


@pytest.fixture
def broken_moto(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A ``moto`` package first on the child's path: write its ``__init__.py``."""
    package = tmp_path / "moto"
    package.mkdir()
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    yield package / "__init__.py"


def test_a_child_that_fails_to_start_is_one_error_with_its_last_words(
    broken_moto: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    broken_moto.write_text("raise ImportError('moto cannot be imported here (a test)')\n")
    aws = EmbeddedAWSProcess()

    with pytest.raises(EmbeddedAWSStartError) as raised:
        aws.start()

    message = str(raised.value)
    assert message.startswith("the embedded AWS's process did not start (it exited with code 1)")
    assert "ImportError: moto cannot be imported here (a test)" in message
    assert raised.value.__cause__ is None and raised.value.__context__ is None
    assert aws.pid is None  # stopped: nothing left to stop
    assert "moto cannot be imported here" in capfd.readouterr().err  # relayed as it came


def test_a_child_that_never_answers_is_stopped_at_the_deadline(
    broken_moto: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    broken_moto.write_text("import time\ntime.sleep(600)\n")
    monkeypatch.setattr(server_process, "START_TIMEOUT_S", 2.0)
    monkeypatch.setattr(server_process, "STOP_TIMEOUT_S", 2.0)
    aws = EmbeddedAWSProcess()
    started = time.monotonic()

    with pytest.raises(EmbeddedAWSStartError, match="did not start; it wrote nothing on stderr"):
        aws.start()

    assert time.monotonic() - started < 30  # deadline 2 s, then stdin, SIGTERM: 2 s each
    assert aws.returncode == -signal.SIGTERM  # it slept through its stdin's end


def test_a_port_in_use_is_the_same_error_as_in_process() -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = int(holder.getsockname()[1])
        aws = EmbeddedAWSProcess(port=port)
        with pytest.raises(PortInUseError) as raised:
            aws.start()
    assert (raised.value.what, raised.value.port) == ("embedded AWS", port)
    assert aws.returncode == 2  # it said so and ended
    assert aws.pid is None
