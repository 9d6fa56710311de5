"""Fault soak: the model-based machines of the test suite, run for a budget or a count.

``make soak`` (not part of ``make test``) runs the write-path, idempotence, consumer-groups,
Lambda-consumer and lake machines (tests/functional/*/test_*model.py) on fresh random
schedules,
across processes, each process with its own embedded AWS. It prints the schedules explored
(and how many had at least ``--min-steps`` steps), the steps, the faults injected by kind
and the invariant violations. The machines check after every step that nothing was lost,
duplicated or reordered (the write path: each partition's log is a prefix of its shard;
idempotence: each log is a prefix of what the documented guarantee keeps; consumers: no
skip, redeliveries only from a checkpoint, produce order per key; the lake: each log record
below the table's watermark in it exactly once, every referenced file present), so a
violation is any of those.

A failing schedule is shrunk by Hypothesis and saved as a regression test under
``tests/functional/regressions/`` (collected by ``make test``): it replays the exact
shrunk schedule (``@reproduce_failure``) and its docstring holds the steps to read.

    python scripts/soak.py --minutes 60 --schedules 10000 --processes 3
    python scripts/soak.py --machine write-path --minutes 5 --json
"""

from __future__ import annotations

import gc
import importlib
import itertools
import json
import logging
import multiprocessing
import os
import queue
import re
import signal
import sys
import time
import traceback
import urllib.request
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click

ROOT = Path(__file__).resolve().parent.parent
REGRESSIONS = ROOT / "tests" / "functional" / "regressions"


@dataclass(frozen=True)
class Machine:
    """A model-based machine of the test suite, by where it lives."""

    name: str
    module: str
    cls: str
    injects: str  # the faults it injects, for the report
    # Schedules per turn when it is not --chunk: a machine whose schedule costs many times the
    # others' takes fewer per turn, so the soak's time is not mostly spent on it.
    turn: int | None = None

    def load(self) -> tuple[Any, Any]:
        """(the machine class, its Tally)."""
        module = importlib.import_module(self.module)
        return getattr(module, self.cls), module.TALLY


MACHINES = {
    m.name: m
    for m in (
        Machine(
            "write-path",
            "tests.functional.ingest.test_writer_model",
            "WritePathMachine",
            "stalls before any AWS call, crashes after the S3 write, zombies past their "
            "lease, lost answers, throttling, redelivery, split, merge (parents closed), warm "
            "writers overtaken between two batches",
        ),
        Machine(
            "idempotence",
            "tests.functional.ingest.test_idempotence_model",
            "IdempotenceMachine",
            "resends flagged and not, before and after splits and merges (a shard split again "
            "before it took a record), before and after shard sync, inside, at the edge of and "
            "past the window; crashes after the S3 write, lost and throttled answers of the "
            "commit and of the look-up's reads, redelivery",
        ),
        Machine(
            "consumer-groups",
            "tests.functional.consumer.test_model",
            "ConsumerMachine",
            "stalls before any AWS call and lease write, crashes, graceful leaves, lease "
            "expiry, split, merge",
        ),
        Machine(
            "lambda-consumers",
            "tests.functional.lambda_consumer.test_model",
            "LambdaConsumerModel",
            "runner crashes before any AWS call, zombie invocations, lost wakes, timeouts, split",
        ),
        Machine(
            "lambda-consumer-lanes",
            "tests.functional.lambda_consumer.test_model",
            "LambdaConsumerLanesModel",
            "the same at parallelization factor 4: crashes and zombies between the lanes' "
            "checkpoints, lanes retried by a successor",
        ),
        Machine(
            "lake",
            "tests.functional.lake.test_model",
            "LakeMachine",
            "lost catalog answers (UpdateTable applied, resend refused), refused commits, "
            "racing compactions, maintenance racing a compaction, another engine's "
            "snapshots, crashes at each step of compaction and maintenance",
            # A schedule costs about 20 of the others' (pyiceberg commits, Parquet), so few
            # per turn; but not 1: every Hypothesis run's first schedule is its simplest, the
            # same whatever the seed, and at one per turn the lake never drew another.
            turn=5,
        ),
        Machine(
            "start-positions",
            "tests.functional.consumer.test_start_model",
            "StartPositionModel",
            "worker and Lambda groups created before, during and after a split and a merge, at "
            "every start position; ingest lag (closed partitions still receiving), lost wakes",
        ),
        Machine(
            "group-seek",
            "tests.functional.lambda_consumer.test_seek_model",
            "SeekModel",
            "seeks of a Lambda group to every position between runs, mid-invocation and over "
            "crashed runners' live leases, before and after a split (a finished parent "
            "re-opened)",
        ),
    )
}


@dataclass
class Violation:
    machine: str
    error: str
    steps: list[str]
    blob: str  # the @reproduce_failure(...) line, when Hypothesis printed one
    seed: int
    saved: str = ""
    min_steps: int = 0  # the schedule ran at least this many steps (replayed the same way)


@dataclass
class Totals:
    schedules: Counter[str] = field(default_factory=Counter)
    long_schedules: Counter[str] = field(default_factory=Counter)  # >= min_steps steps
    steps: Counter[str] = field(default_factory=Counter)
    faults: dict[str, Counter[str]] = field(default_factory=dict)
    per_minute: Counter[int] = field(default_factory=Counter)  # long schedules, by minute
    violations: list[Violation] = field(default_factory=list)

    def add_counts(self, machine: str, counts: dict[str, int]) -> None:
        self.faults.setdefault(machine, Counter()).update(counts)

    def as_json(self, elapsed_s: float, processes: int, min_steps: int) -> dict[str, Any]:
        return {
            "elapsed_s": round(elapsed_s, 1),
            "processes": processes,
            "min_steps": min_steps,
            "schedules": sum(self.schedules.values()),
            "schedules_with_min_steps": sum(self.long_schedules.values()),
            "steps": sum(self.steps.values()),
            # schedules with min_steps ended in each minute of the run: a steady rate, or not
            "schedules_with_min_steps_per_minute": [
                self.per_minute[m] for m in range(max(self.per_minute, default=-1) + 1)
            ],
            "machines": {
                name: {
                    "schedules": self.schedules[name],
                    "schedules_with_min_steps": self.long_schedules[name],
                    "steps": self.steps[name],
                    "counts": dict(sorted(self.faults.get(name, Counter()).items())),
                }
                for name in sorted(self.schedules)
            },
            "violations": [v.__dict__ for v in self.violations],
        }


# --- one process -------------------------------------------------------------------------------
def _counting(machine_cls: Any, tally: Any, events: Any, name: str) -> Any:
    """The machine, reporting each schedule's step count when it ends. The machines count
    ``steps`` in an invariant, which Hypothesis checks before the first step and after every
    step, except while ``@initialize`` rules (steps themselves) remain to run: with N of
    them, the check before the first step and those after the first N - 1 steps are skipped
    (the lake machine's three initialize rules made its 20-step schedules count 18)."""

    class Counted(machine_cls):  # type: ignore[misc, valid-type]
        def __init__(self) -> None:
            self._soak_steps_at_start = tally.counts["steps"]
            super().__init__()
            # Hypothesis' own list of the schedule's @initialize rules still to run.
            initialize = len(getattr(self, "_initialize_rules_to_run", ()))
            self._soak_uncounted = initialize - 1 if initialize else -1

        def teardown(self) -> None:
            try:
                super().teardown()
            finally:
                checks = tally.counts["steps"] - self._soak_steps_at_start
                steps = max(0, checks + self._soak_uncounted) if checks > 0 else 0
                events.put(("schedule", name, steps))

    Counted.__name__ = Counted.__qualname__ = machine_cls.__name__
    return Counted


def _violation(name: str, exc: BaseException, seed: int, min_steps: int = 0) -> Violation:
    notes = [str(n) for n in getattr(exc, "__notes__", [])]
    printed = re.search(r"@reproduce_failure\([^)]*\)", "\n".join(notes))
    blob = printed.group(0) if printed else ""
    steps = [n for n in notes if n.startswith("state")]
    return Violation(
        name, f"{type(exc).__name__}: {exc}"[:500], steps, blob, seed, min_steps=min_steps
    )


def _reset(endpoint_url: str) -> None:
    """Forget every resource of the process's embedded AWS (each schedule makes its own)."""
    request = urllib.request.Request(f"{endpoint_url}/moto-api/reset", method="POST")
    with urllib.request.urlopen(request, timeout=30):
        pass


@dataclass(frozen=True)
class Plan:
    """What one soak process runs."""

    names: list[str]  # the machines, in turn
    steps: int  # at most, per schedule
    min_steps: int  # at least, per schedule
    chunk: int  # schedules per Hypothesis run
    base_seed: int
    turns: dict[str, int] = field(default_factory=dict)  # per machine, instead of chunk

    def examples(self, name: str) -> int:
        """Schedules per Hypothesis run of this machine."""
        return self.turns.get(name, self.chunk)


class ProgressLines:
    """Where stderr is not a terminal (a soak left running under nohup), a progress bar shows
    nothing until the end: one line a minute instead, with the rate and the time to go."""

    def __init__(self, target: int, started: float, every_s: float = 60.0) -> None:
        self.target, self.started, self.every_s = target, started, every_s
        self.printed = started

    def line(self, now: float, long_schedules: int) -> str | None:
        """The line to print at ``now`` (monotonic seconds), None before the next minute."""
        if now - self.printed < self.every_s:
            return None
        self.printed = now
        minutes = (now - self.started) / 60
        rate = long_schedules / minutes if minutes else 0.0
        left = max(self.target - long_schedules, 0)
        to_go = f", about {left / rate:.0f} min to {self.target:,}" if rate else ""
        return f"{minutes:.0f} min: {long_schedules:,} long schedules ({rate:.1f}/min{to_go})"


def stop_on_signals(stop: Any) -> dict[str, str]:
    """SIGTERM or SIGINT (Ctrl-C) asks the soak to stop: the processes finish the turn under
    way and the report still comes, with the signal's name under ``stopped_by``."""
    received: dict[str, str] = {}

    def handle(signum: int, _frame: Any) -> None:
        received["stopped_by"] = signal.Signals(signum).name
        stop.set()

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, handle)
    return received


def _soak_process(plan: Plan, events: Any, stop: Any) -> None:
    """One process: its own embedded AWS, the machines in turn until told to stop. A
    schedule that fails is a violation; the soak itself failing is an ``error``."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the group: the parent stops us
    try:
        _soak(plan, events, stop)
    except BaseException:
        events.put(("error", traceback.format_exc(), None))
    finally:
        events.put(("done", None, None))


def _soak(plan: Plan, events: Any, stop: Any) -> None:
    from hypothesis import HealthCheck, Phase, settings
    from hypothesis import seed as with_seed
    from hypothesis.stateful import run_state_machine_as_test

    from shardlog.local.embedded import EmbeddedAWS
    from shardlog.local.quiet import quiet_powertools

    # As in the test suite: never real AWS, and the faults' expected errors are not news.
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN"):
        os.environ.pop(name, None)
    os.environ["AWS_ACCESS_KEY_ID"] = os.environ["AWS_SECRET_ACCESS_KEY"] = "testing"
    quiet_powertools()
    logging.disable(logging.CRITICAL)
    loaded = {name: MACHINES[name].load() for name in plan.names}
    # What is loaded by now lives as long as the process: keep the collector off it, and
    # collect the young generation less often (7% of a consumer schedule's time).
    gc.collect()
    gc.freeze()
    gc.set_threshold(20_000, 20, 20)
    run_settings = {
        name: settings(
            max_examples=plan.examples(name),
            stateful_step_count=plan.steps,
            deadline=None,
            database=None,
            derandomize=False,
            print_blob=True,
            phases=(Phase.generate, Phase.shrink),
            suppress_health_check=list(HealthCheck),
        )
        for name in plan.names
    }
    with EmbeddedAWS() as aws:
        for round_ in itertools.count():
            name = plan.names[round_ % len(plan.names)]
            if stop.is_set():
                return
            machine_cls, tally = loaded[name]
            machine_cls.endpoint_url = aws.endpoint_url
            tally.reset()
            chunk_seed = plan.base_seed * 1_000_003 + round_
            counted = with_seed(chunk_seed)(_counting(machine_cls, tally, events, name))
            try:
                # Hypothesis ends a schedule early now and then (mostly when it mutates an
                # earlier one); _min_steps keeps every schedule at least min_steps long.
                run_state_machine_as_test(
                    counted, settings=run_settings[name], _min_steps=plan.min_steps
                )
            except Exception as exc:  # an invariant violation, shrunk by Hypothesis
                events.put(
                    ("violation", vars(_violation(name, exc, chunk_seed, plan.min_steps)), None)
                )
            events.put(("counts", name, dict(tally.counts)))
            _reset(aws.endpoint_url)


# --- regressions ---------------------------------------------------------------------------------
def save_regression(violation: Violation, machine: Machine, directory: Path = REGRESSIONS) -> Path:
    """Write the shrunk schedule as a test that replays it exactly; return its path."""
    directory.mkdir(parents=True, exist_ok=True)
    init = directory / "__init__.py"
    if not init.exists():
        init.write_text('"""Schedules the soak (scripts/soak.py) found failing, shrunk."""\n')
    stamp = datetime.now(UTC).strftime("%Y%m%d_%H%M%S")
    slug = re.sub(r"\W", "_", violation.machine)
    path = directory / f"test_soak_{slug}_{stamp}_{violation.seed}.py"
    replay = (
        f"    machine = {violation.blob[1:]}({machine.cls})\n"
        if violation.blob
        else f"    machine = seed({violation.seed})({machine.cls})\n"
    )
    steps = "\n".join(f"        {line}" for line in violation.steps) or "        (not printed)"
    min_steps = f"\n        _min_steps={violation.min_steps}," if violation.min_steps else ""
    path.write_text(
        f'''"""Found by scripts/soak.py on {stamp} UTC (seed {violation.seed}), then shrunk:

    {violation.error.splitlines()[0] if violation.error else ""}

The shrunk schedule (replayed exactly below; ``@reproduce_failure`` is tied to the
Hypothesis version that found it):

{steps}
"""

from hypothesis import HealthCheck, reproduce_failure, seed, settings
from hypothesis.stateful import run_state_machine_as_test

from {machine.module} import {machine.cls}


def test_soak_schedule(endpoint_url: str) -> None:
    {machine.cls}.endpoint_url = endpoint_url
{replay}    run_state_machine_as_test(
        machine,
        settings=settings(
            max_examples=1, deadline=None, database=None,
            suppress_health_check=list(HealthCheck),
        ),{min_steps}
    )
'''
    )
    return path


# Schedules per Hypothesis run, at least: a run's first schedule is its simplest (Hypothesis
# tries the minimal example first), the same whatever the seed, so runs of one schedule each
# would repeat it for the whole soak (tests/unit/test_soak.py shows it).
MIN_TURN = 2


def _parse_turns(values: tuple[str, ...]) -> dict[str, int]:
    """``MACHINE=N`` options as a mapping; one clear error for a bad one."""
    turns: dict[str, int] = {}
    for value in values:
        name, _, count = value.partition("=")
        if name not in MACHINES:
            raise click.BadParameter(
                f"{name!r} is not a machine (one of {', '.join(sorted(MACHINES))})",
                param_hint="--turn",
            )
        if not count.isdigit() or not MIN_TURN <= int(count) <= 1000:
            raise click.BadParameter(
                f"{value!r}: N must be a whole number from {MIN_TURN} to 1000 (a Hypothesis "
                "run's first schedule is its simplest, whatever the seed)",
                param_hint="--turn",
            )
        turns[name] = int(count)
    return turns


# --- the CLI -------------------------------------------------------------------------------------
@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--minutes",
    type=click.FloatRange(0.1, 24 * 60),
    default=60.0,
    show_default=True,
    help="Time budget; the soak stops when it is spent.",
)
@click.option(
    "--schedules",
    type=click.IntRange(1),
    default=10_000,
    show_default=True,
    help="Stop once this many schedules with at least --min-steps steps ran.",
)
@click.option(
    "--processes",
    type=click.IntRange(1, 64),
    default=3,
    show_default=True,
    help="Processes, each with its own embedded AWS (3 keep 2 cores busy: in each, the "
    "machine and its embedded AWS take turns on one interpreter lock).",
)
@click.option(
    "--steps",
    type=click.IntRange(1, 500),
    default=20,
    show_default=True,
    help="Steps per schedule (Hypothesis' stateful_step_count).",
)
@click.option(
    "--min-steps",
    type=click.IntRange(1, 500),
    default=20,
    show_default=True,
    help="Every schedule runs at least this many steps (Hypothesis' _min_steps) and "
    "counts toward --schedules when it did.",
)
@click.option(
    "--machine",
    "machines",
    multiple=True,
    type=click.Choice(sorted(MACHINES)),
    help="Machines to run (repeatable; default: all).",
)
@click.option(
    "--chunk",
    type=click.IntRange(2, 1000),
    default=5,
    show_default=True,
    help="Schedules per Hypothesis run before the next machine's turn (a machine with a "
    "turn of its own, e.g. the lake's 5, takes that many; see --turn). At least 2: a run's "
    "first schedule is its simplest, the same whatever the seed.",
)
@click.option(
    "--turn",
    "turns",
    multiple=True,
    metavar="MACHINE=N",
    callback=lambda _ctx, _param, value: _parse_turns(value),
    help="Schedules per turn of one machine, instead of --chunk (repeatable).",
)
@click.option(
    "--save/--no-save",
    default=True,
    show_default=True,
    help="Save each failing schedule as a regression test.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def main(
    minutes: float,
    schedules: int,
    processes: int,
    steps: int,
    min_steps: int,
    machines: tuple[str, ...],
    chunk: int,
    turns: dict[str, int],
    save: bool,
    as_json: bool,
) -> None:
    """Run the model-based machines on fresh random schedules and report what they met."""
    if min_steps > steps:
        raise click.BadParameter(
            f"{min_steps} is more than --steps {steps}", param_hint="--min-steps"
        )
    names = list(machines or sorted(MACHINES))
    context = multiprocessing.get_context("spawn")
    events = context.Queue()
    stop = context.Event()
    started = time.monotonic()
    deadline = started + minutes * 60
    workers = [
        context.Process(
            target=_soak_process,
            args=(
                Plan(
                    names=names[i % len(names) :] + names[: i % len(names)],
                    steps=steps,
                    min_steps=min_steps,
                    chunk=chunk,
                    base_seed=int(time.time()) * 64 + i,
                    turns={
                        n: t for n in names if (t := turns.get(n, MACHINES[n].turn)) is not None
                    },
                ),
                events,
                stop,
            ),
            daemon=True,
        )
        for i in range(processes)
    ]
    for worker in workers:
        worker.start()
    stopped = stop_on_signals(stop)
    totals = Totals()
    errors: list[str] = []
    running = processes
    lines = None if sys.stderr.isatty() else ProgressLines(schedules, started)
    with click.progressbar(length=schedules, label="schedules", file=sys.stderr) as bar:
        while running:
            if time.monotonic() >= deadline or sum(totals.long_schedules.values()) >= schedules:
                stop.set()
            if lines and (line := lines.line(time.monotonic(), totals.long_schedules.total())):
                click.echo(line, err=True)
            try:
                kind, *rest = events.get(timeout=5)
            except queue.Empty:
                if not any(w.is_alive() for w in workers):
                    break
                continue
            if kind == "schedule":
                name, count = rest
                totals.schedules[name] += 1
                totals.steps[name] += count
                if count >= min_steps:
                    totals.long_schedules[name] += 1
                    totals.per_minute[int((time.monotonic() - started) // 60)] += 1
                    bar.update(1)
            elif kind == "counts":
                totals.add_counts(rest[0], rest[1])
            elif kind == "error":
                errors.append(rest[0])
                stop.set()
            elif kind == "violation":
                violation = Violation(**rest[0])
                if save:
                    violation.saved = str(
                        save_regression(violation, MACHINES[violation.machine]).relative_to(ROOT)
                    )
                totals.violations.append(violation)
            elif kind == "done":
                running -= 1
    for worker in workers:
        worker.join(timeout=60)
    if running:
        errors.append(f"{running} soak process(es) died without reporting")
    elapsed = time.monotonic() - started
    report = totals.as_json(elapsed, processes, min_steps) | {
        "stopped_by": stopped.get("stopped_by")
    }
    if as_json:
        click.echo(json.dumps(report, indent=2))
    else:
        _print_report(report)
    for error in errors:
        click.echo(f"the soak itself failed (not a schedule):\n{error}", err=True)
    sys.exit(2 if errors else 1 if totals.violations else 0)


def _print_report(report: dict[str, Any]) -> None:
    minutes = report["elapsed_s"] / 60
    click.echo(
        f"soak: {report['schedules']:,} schedules ({report['schedules_with_min_steps']:,} "
        f"with >= {report['min_steps']} steps), {report['steps']:,} steps in {minutes:.1f} min "
        f"on {report['processes']} processes"
        + (f" (stopped early by {report['stopped_by']})" if report.get("stopped_by") else "")
    )
    full_minutes = report["schedules_with_min_steps_per_minute"][:-1]  # the last is partial
    if full_minutes:
        click.echo(
            f"per minute: {min(full_minutes):,} to {max(full_minutes):,} schedules with >= "
            f"{report['min_steps']} steps (first full minute {full_minutes[0]:,}, last "
            f"{full_minutes[-1]:,})"
        )
    for name, machine in report["machines"].items():
        click.echo(
            f"\n{name}: {machine['schedules']:,} schedules "
            f"({machine['schedules_with_min_steps']:,} with >= {report['min_steps']} steps), "
            f"{machine['steps']:,} steps; injects {MACHINES[name].injects}"
        )
        for kind, count in machine["counts"].items():
            if kind not in ("schedules", "steps"):
                click.echo(f"  {kind:<48} {count:>9,}")
    violations = report["violations"]
    click.echo(
        f"\ninvariant violations: {len(violations)} "
        "(a lost, duplicated or reordered record, a skip or a checkpoint going back is one)"
    )
    for v in violations:
        click.echo(f"  {v['machine']}: {v['error'].splitlines()[0]} -> {v['saved'] or 'not saved'}")


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
