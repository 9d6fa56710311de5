"""Make moto's EMR Serverless run job runs: StartJobRun starts a real local spark-submit.

moto 5.x stores a job run and reports it SUCCESS at once without running anything, and
its ListJobRuns fails on an application that has no run yet. ``apply()`` patches the
in-process backend (the server side: every boto3 client sees it) so that:

- StartJobRun returns at once with state SUBMITTED and starts, in a thread, the
  ``spark-submit`` of the installed pyspark on ``local[2]`` for the run's entryPoint with
  its entryPointArguments, in the one local configuration (``shardlog.spark.session``).
  An ``s3://`` entryPoint is read from the embedded S3 (the scripts are deployed there,
  as on AWS); a local path is used as is;
- the run is RUNNING while the process lives, then SUCCESS (exit 0) or FAILED with the
  end of its log in ``stateDetails``; CancelJobRun kills it (CANCELLING, then CANCELLED);
- a repeated ``clientToken`` on the same application returns the first run: no second run;
- ListJobRuns of an application with no run is an empty list, newest run first.

sparkSubmitParameters that only make sense on EMR (``spark.archives`` from S3, the
``spark.emr-serverless.*`` settings, the Python interpreter and path of the archive) are
dropped: locally the job runs with this virtualenv's interpreter, whose packages are what
the archive ships on EMR. Other ``--conf`` pairs pass through. pyspark is imported only
when a run starts. The run's processes sign as the execution role's local stand-in
(``shardlog.local.principals.SPARK_JOBS``). Logs:
``<tmp>/shardlog-emr-serverless/<job run id>/spark-submit.log``.

**As shipped** (``run_as_shipped(python)``): a run then uses what its StartJobRun names
instead of this virtualenv. The ``spark.archives`` object is read from the embedded S3 and
unpacked in the run's working directory under its ``#alias`` (what EMR does in each
container; local executors share the driver's directory), the driver's ``PYTHONPATH``
comes from ``spark.emr-serverless.driverEnv.PYTHONPATH`` and the executors' from
``spark.executorEnv.PYTHONPATH``, and ``python`` (an interpreter with no packages of its
own: it stands for the EMR image's Python the run names) runs both sides. pyspark itself
comes from the Spark distribution, as on EMR: spark-submit puts its ``pyspark.zip`` first
on the path.

**Without Spark** (``run_without_spark(True)``, for tests of what starts and watches runs):
a run's entry point runs on this process's Python with its arguments; no JVM starts.
"""

from __future__ import annotations

import atexit
import itertools
import os
import shlex
import subprocess
import sys
import tempfile
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from moto.emrserverless import models as emr_models

from shardlog import constants as C
from shardlog.local import principals
from shardlog.spark.class_archive import launch_options, local_class_archive, with_options
from shardlog.spark.session import JAVA_OPTIONS, LOCAL_MASTER, local_conf, local_environment
from shardlog.spark.spark_home import local_spark_home

LOG_ROOT = Path(tempfile.gettempdir()) / "shardlog-emr-serverless"
ACTIVE_STATES = ("SUBMITTED", "PENDING", "SCHEDULED", "RUNNING", "QUEUED", "CANCELLING")
_EMR_ONLY_CONF_PREFIXES = (
    "spark.archives",
    "spark.submit.pyFiles",
    "spark.emr-serverless.",
    "spark.executorEnv.PYSPARK_PYTHON",
    "spark.executorEnv.PYTHONPATH",
)
_DETAILS_CHARS = 2000
KEPT_UNPACKED = 3  # unpacked spark.archives kept in LOG_ROOT/archives (prune_unpacked)

_SHIPPED_DROPPED_PREFIXES = (
    "spark.archives",  # unpacked by _unpack_archives instead
    "spark.emr-serverless.",
    "spark.executorEnv.PYSPARK_PYTHON",  # the EMR image's path: the shipped python instead
)
_DRIVER_PYTHONPATH = "spark.emr-serverless.driverEnv.PYTHONPATH"

_lock = threading.RLock()
_shipped_python: Path | None = None
_without_spark = False
_processes: dict[str, subprocess.Popen[bytes]] = {}
_original: dict[str, Any] = {}
_applied = False


def _now() -> datetime:
    return datetime.now(UTC)


def run_as_shipped(python: str | Path | None) -> None:
    """Run later job runs from their archive with this interpreter (None: this virtualenv)."""
    global _shipped_python
    _shipped_python = None if python is None else Path(python)


def run_without_spark(enabled: bool) -> None:
    """Later job runs run their entry point on this process's Python, with the run's
    arguments and environment, and no Spark (off by default). For tests of what starts and
    watches runs (the Spark trigger, compaction by volume), whose scripts only stay RUNNING
    until released: a spark-submit's JVM costs seconds of CPU there and proves nothing."""
    global _without_spark
    _without_spark = enabled


def submitted_conf(spark_submit_parameters: str | None) -> dict[str, str]:
    """The ``--conf`` pairs of a run's sparkSubmitParameters."""
    confs: dict[str, str] = {}
    words = shlex.split(spark_submit_parameters or "")
    for flag, value in itertools.pairwise(words):
        if flag == "--conf" and "=" in value:
            key, _, setting = value.partition("=")
            confs[key] = setting
    return confs


def local_spark_conf(
    spark_submit_parameters: str | None, *, shipped: bool = False, java_options: str = ""
) -> list[str]:
    """The ``--conf`` arguments of a run that make sense locally, after the one local
    configuration (``shardlog.spark.session.local_conf``); ``java_options`` added to the
    driver JVM's."""
    dropped = _SHIPPED_DROPPED_PREFIXES if shipped else _EMR_ONLY_CONF_PREFIXES
    confs = local_conf()
    for key, setting in submitted_conf(spark_submit_parameters).items():
        if not key.startswith(dropped):
            confs[key] = setting
    if java_options:
        confs[JAVA_OPTIONS] = with_options(confs.get(JAVA_OPTIONS, ""), java_options)
    return [arg for key, value in confs.items() for arg in ("--conf", f"{key}={value}")]


def _unpack_archives(job_run: Any, account_id: str, workdir: Path) -> None:
    """Each ``spark.archives`` entry (``s3://bucket/key#alias``) at workdir/alias: unpacked
    once per object version into LOG_ROOT/archives (EMR unpacks it in every container; here
    the runs of one archive share one read-only copy)."""
    import shutil
    import tarfile
    import zipfile

    from moto.s3.models import s3_backends

    params = job_run.job_driver["sparkSubmit"].get("sparkSubmitParameters")
    for entry in filter(None, submitted_conf(params).get("spark.archives", "").split(",")):
        uri, _, alias = entry.partition("#")
        bucket, _, key = uri.removeprefix("s3://").partition("/")
        stored = s3_backends[account_id]["aws"].get_object(bucket, key)
        if stored is None:
            raise FileNotFoundError(f"spark.archives {uri} is not in the embedded S3")
        unpacked = LOG_ROOT / "archives" / stored.etag.strip('"')
        if unpacked.is_dir():
            os.utime(unpacked)  # in use again: the newest stay (prune_unpacked)
        else:
            partial = unpacked.with_suffix(".partial")
            shutil.rmtree(partial, ignore_errors=True)
            partial.mkdir(parents=True)
            local = partial.with_suffix(".download")
            local.write_bytes(stored.value)
            if key.endswith(".zip"):
                with zipfile.ZipFile(local) as archive:
                    archive.extractall(partial)
            else:
                with tarfile.open(local) as archive:
                    archive.extractall(partial)
            local.unlink()
            partial.replace(unpacked)
        (workdir / (alias or Path(key).name)).symlink_to(unpacked, target_is_directory=True)
        with _lock:
            running = [LOG_ROOT / run_id for run_id in _processes]
        in_use = {link.resolve() for run in running if run.is_dir() for link in run.iterdir()}
        prune_unpacked(LOG_ROOT / "archives", in_use | {unpacked.resolve()})


def prune_unpacked(root: Path, in_use: set[Path], kept: int = KEPT_UNPACKED) -> list[Path]:
    """Unpacked archives beyond the newest ``kept`` go, but none in ``in_use`` (a running
    job's link): each build of the archive is a new object, and each unpacked copy is about
    350 MB. Returns what was removed."""
    import shutil

    unpacked = sorted(
        (p for p in root.iterdir() if p.is_dir() and p.suffix != ".partial"),
        key=lambda p: p.stat().st_mtime,
        reverse=True,
    )
    removed = [p for p in unpacked[kept:] if p.resolve() not in in_use]
    for old in removed:
        shutil.rmtree(old, ignore_errors=True)
    return removed


def spark_submit_executable() -> Path:
    """The ``spark-submit`` of the local Spark home (``shardlog.spark.spark_home``; raises if
    pyspark is missing)."""
    home = local_spark_home()
    if home is None:
        raise RuntimeError("pyspark is not installed: pip install 'shardlog[spark]'")
    return home / "bin" / "spark-submit"


def _entry_point_file(job_run: Any, account_id: str, workdir: Path) -> Path:
    entry = str(job_run.job_driver["sparkSubmit"]["entryPoint"])
    if not entry.startswith("s3://"):
        return Path(entry.removeprefix("file://"))
    from moto.s3.models import s3_backends

    bucket, _, key = entry.removeprefix("s3://").partition("/")
    s3 = s3_backends[account_id]["aws"]
    stored = s3.get_object(bucket, key)
    if stored is None:
        raise FileNotFoundError(f"entryPoint {entry} is not in the embedded S3")
    target = workdir / Path(key).name
    target.write_bytes(stored.value)
    return target


def _command(job_run: Any, entry: Path, shipped: bool = False, java_options: str = "") -> list[str]:
    driver = job_run.job_driver["sparkSubmit"]
    conf = local_spark_conf(
        driver.get("sparkSubmitParameters"), shipped=shipped, java_options=java_options
    )
    return [
        str(spark_submit_executable()),
        "--master",
        LOCAL_MASTER,
        "--name",
        job_run.name or job_run.id,
        *conf,
        str(entry),
        *_arguments(job_run),
    ]


def _arguments(job_run: Any) -> list[str]:
    """The run's entryPointArguments, as its entry point gets them."""
    return [str(a) for a in job_run.job_driver["sparkSubmit"].get("entryPointArguments", [])]


def _environment(job_run: Any, shipped: Path | None = None) -> dict[str, str]:
    env = dict(os.environ) | local_environment(str(shipped or sys.executable))
    if shipped is not None:  # nothing of this environment's path: only what the run names
        env.pop("PYTHONPATH", None)
        params = job_run.job_driver["sparkSubmit"].get("sparkSubmitParameters")
        driver_path = submitted_conf(params).get(_DRIVER_PYTHONPATH)
        if driver_path:
            env["PYTHONPATH"] = driver_path
    # The driver and its executors sign as the execution role, as on EMR Serverless.
    env[C.ENV_LOCAL_PRINCIPAL] = principals.SPARK_JOBS
    return env


def _set_state(job_run: Any, state: str, details: str | None = None) -> None:
    now = _now()
    with _lock:
        if job_run.state in ("CANCELLING", "CANCELLED") and state != "CANCELLED":
            return
        job_run.state = state
        if details is not None:
            job_run.state_details = details
        job_run.updated_at = now
        if state == "RUNNING":
            job_run.started_at = now
        if state in ("SUCCESS", "FAILED", "CANCELLED"):
            job_run.ended_at = now
            started = getattr(job_run, "started_at", None) or job_run.created_at
            job_run.total_execution_duration_seconds = int((now - started).total_seconds())


def _tail(path: Path) -> str:
    text = path.read_text(errors="replace") if path.exists() else ""
    return text[-_DETAILS_CHARS:]


def _run(job_run: Any, account_id: str) -> None:
    workdir = LOG_ROOT / job_run.id
    log_path = workdir / "spark-submit.log"
    written: Path | None = None
    try:
        workdir.mkdir(parents=True, exist_ok=True)
        shipped = _shipped_python
        if shipped is not None:
            _unpack_archives(job_run, account_id, workdir)
        entry = _entry_point_file(job_run, account_id, workdir)
        archive = None
        if _without_spark:
            command = [sys.executable, str(entry), *_arguments(job_run)]
        else:
            # The JVMs' class archive (shardlog.spark.class_archive): mapped when there is
            # one, else this run's JVM writes one as it exits, published below if it exits
            # cleanly.
            archive = local_class_archive()
            java_options, written = launch_options(archive)
            command = _command(job_run, entry, shipped is not None, java_options)
        with log_path.open("wb") as log, _lock:
            if job_run.state == "CANCELLING":
                _set_state(job_run, "CANCELLED", "cancelled before it started")
                return
            process = subprocess.Popen(
                command,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=_environment(job_run, shipped),
                cwd=workdir,
                start_new_session=True,
            )
            _processes[job_run.id] = process
            _set_state(job_run, "RUNNING", f"local spark-submit, log: {log_path}")
        timeout_s = 60 * int(job_run.execution_timeout_minutes)
        try:
            code = process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            _set_state(job_run, "FAILED", f"timed out after {timeout_s}s; log: {log_path}")
            return
        if archive is not None and written is not None:
            archive.publish(written, code)
        if job_run.state == "CANCELLING":
            _set_state(job_run, "CANCELLED", f"cancelled; log: {log_path}")
        elif code == 0:
            _set_state(job_run, "SUCCESS", f"log: {log_path}")
        else:
            _set_state(job_run, "FAILED", f"spark-submit exited {code}:\n{_tail(log_path)}")
    except Exception as exc:  # a run that cannot start fails; the server must not
        _set_state(job_run, "FAILED", f"could not run locally: {exc}")
    finally:
        if written is not None:  # not published: a run killed, cancelled or failed to start
            written.unlink(missing_ok=True)
        with _lock:
            _processes.pop(job_run.id, None)


def _start_job_run(self: emr_models.EMRServerlessBackend, **kwargs: Any) -> Any:
    with _lock:
        token = kwargs.get("client_token")
        application_id = kwargs["application_id"]
        for existing in self.job_runs.get(application_id, []):
            if token and existing.client_token == token:
                return existing  # idempotent: the same token never starts a second run
        job_run = _original["start_job_run"](self, **kwargs)
        job_run.created_at = job_run.updated_at = _now()
        job_run.state = "SUBMITTED"
        job_run.state_details = None
    threading.Thread(
        target=_run, args=(job_run, self.account_id), name=f"emr-{job_run.id}", daemon=True
    ).start()
    return job_run


def _list_job_runs(self: emr_models.EMRServerlessBackend, **kwargs: Any) -> list[Any]:
    application_id = kwargs["application_id"]
    self.get_application(application_id)  # ResourceNotFound for an unknown application
    with _lock:
        self.job_runs.setdefault(application_id, [])
        runs = _original["list_job_runs"](self, **kwargs)
    return sorted(runs, key=lambda run: run.created_at, reverse=True)


def _cancel_job_run(
    self: emr_models.EMRServerlessBackend, application_id: str, job_run_id: str
) -> tuple[str, str]:
    job_run = self.get_job_run(application_id, job_run_id)
    with _lock:
        if job_run.state in ("SUCCESS", "FAILED", "CANCELLED"):
            return application_id, job_run_id
        process = _processes.get(job_run_id)
        _set_state(job_run, "CANCELLING")
        if process is not None:  # else not started yet: the runner never starts it
            process.kill()
    return application_id, job_run_id


def _kill_all() -> None:
    with _lock:
        for process in list(_processes.values()):
            process.kill()


def apply() -> None:
    """Install the patches (idempotent). Call before the moto server takes requests."""
    global _applied
    with _lock:
        if _applied:
            return
        backend = emr_models.EMRServerlessBackend
        _original["start_job_run"] = backend.start_job_run
        _original["list_job_runs"] = backend.list_job_runs
        backend.start_job_run = _start_job_run  # type: ignore[method-assign,assignment]
        backend.list_job_runs = _list_job_runs  # type: ignore[method-assign,assignment]
        backend.cancel_job_run = _cancel_job_run  # type: ignore[method-assign]
        atexit.register(_kill_all)  # no spark-submit outlives the embedded AWS's process
        _applied = True
