"""The soak's own parts: a failing schedule becomes a regression test that replays it."""

from __future__ import annotations

import importlib.util
import os
import signal
import threading
from pathlib import Path

import click
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
    run_state_machine_as_test,
)

from scripts.soak import (
    MACHINES,
    Machine,
    Plan,
    ProgressLines,
    _counting,
    _parse_turns,
    _violation,
    save_regression,
    stop_on_signals,
)
from tests.support.schedules import Tally


class Overflow(RuleBasedStateMachine):
    """A machine with a bug: its total may pass 12."""

    endpoint_url = ""

    def __init__(self) -> None:
        super().__init__()
        self.total = 0

    @rule(amount=st.integers(0, 5))
    def add(self, amount: int) -> None:
        self.total += amount

    @invariant()
    def small(self) -> None:
        assert self.total < 12, "the total passed 12"


def _failure(min_steps: int = 0) -> BaseException:
    try:
        run_state_machine_as_test(
            Overflow,
            settings=settings(
                max_examples=500,
                database=None,
                print_blob=True,
                suppress_health_check=list(HealthCheck),
            ),
            _min_steps=min_steps,
        )
    except AssertionError as exc:
        return exc
    raise AssertionError("the buggy machine never failed")


def test_a_failing_schedule_is_saved_as_a_test_that_replays_it(tmp_path: Path) -> None:
    violation = _violation("toy", _failure(), seed=7)
    assert violation.blob.startswith("@reproduce_failure(")
    assert violation.steps[0] == "state = Overflow()"
    assert any(step.startswith("state.add(amount=") for step in violation.steps)

    path = save_regression(violation, Machine("toy", __name__, "Overflow", ""), tmp_path)

    assert path.name.startswith("test_soak_toy_") and (tmp_path / "__init__.py").exists()
    source = path.read_text()
    assert "the total passed 12" in source and "state = Overflow()" in source
    spec = importlib.util.spec_from_file_location("saved_regression", path)
    assert spec is not None and spec.loader is not None
    saved = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(saved)
    with pytest.raises(AssertionError, match="the total passed 12"):
        saved.test_soak_schedule("http://127.0.0.1:9")  # replays the shrunk schedule


def test_a_schedule_found_with_a_minimum_of_steps_replays_with_it(tmp_path: Path) -> None:
    """The soak runs every schedule at least --min-steps long; the saved test replays the
    shrunk schedule under the same minimum."""
    violation = _violation("toy", _failure(min_steps=4), seed=7, min_steps=4)
    path = save_regression(violation, Machine("toy", __name__, "Overflow", ""), tmp_path)

    assert "_min_steps=4," in path.read_text()
    spec = importlib.util.spec_from_file_location("saved_min_steps", path)
    assert spec is not None and spec.loader is not None
    saved = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(saved)
    with pytest.raises(AssertionError, match="the total passed 12"):
        saved.test_soak_schedule("http://127.0.0.1:9")


def test_every_soaked_machine_is_a_state_machine_with_a_tally() -> None:
    for machine in MACHINES.values():
        cls, tally = machine.load()
        assert issubclass(cls, RuleBasedStateMachine), machine.name
        assert hasattr(cls, "endpoint_url"), machine.name
        tally.add("probe")
        assert tally.counts["probe"] >= 1


def test_a_turn_overrides_the_chunk_for_its_machine_only() -> None:
    plan = Plan(names=["lake", "write-path"], steps=20, min_steps=20, chunk=20, base_seed=1,
                turns=_parse_turns(("lake=2",)))  # fmt: skip
    assert (plan.examples("lake"), plan.examples("write-path")) == (2, 20)
    assert 2 <= (MACHINES["lake"].turn or 0) < 20  # few: keeps the lake from eating the soak
    assert _parse_turns(("write-path=1000",)) == {"write-path": 1000}


@pytest.mark.parametrize(
    ("value", "names"),
    [("nosuch=3", "is not a machine"), ("lake=1", "from 2 to 1000"),
     ("lake=1001", "from 2 to 1000"), ("lake", "from 2 to 1000"), ("lake=x", "from 2 to 1000")],
)  # fmt: skip
def test_a_bad_turn_is_refused_naming_it(value: str, names: str) -> None:
    with pytest.raises(click.BadParameter, match=names):
        _parse_turns((value,))


class Draws(RuleBasedStateMachine):
    """Records each schedule's draws."""

    schedules: list[list[int]] = []

    def __init__(self) -> None:
        super().__init__()
        self.draws: list[int] = []
        Draws.schedules.append(self.draws)

    @rule(n=st.integers(0, 10**6))
    def draw(self, n: int) -> None:
        self.draws.append(n)


def _first_schedules(examples: int, seed: int) -> list[list[int]]:
    from hypothesis import Phase
    from hypothesis import seed as with_seed

    Draws.schedules = []
    run_state_machine_as_test(
        with_seed(seed)(Draws),
        settings=settings(max_examples=examples, stateful_step_count=5, database=None,
                          derandomize=False, phases=(Phase.generate,),
                          suppress_health_check=list(HealthCheck)),
        _min_steps=5,
    )  # fmt: skip
    return [s for s in Draws.schedules if s]


def test_a_runs_first_schedule_is_the_same_whatever_the_seed_so_a_turn_takes_two() -> None:
    """Why a turn (and --chunk) is at least 2: the lake's turn of 1 drew one schedule for a
    whole soak."""
    assert _first_schedules(1, seed=1) == _first_schedules(1, seed=2)
    first, *more = _first_schedules(3, seed=1)
    assert more and all(schedule != first for schedule in more)
    assert all((m.turn or 2) >= 2 for m in MACHINES.values())


class Steps(RuleBasedStateMachine):
    """Counts its steps as the soaked machines do: ``steps`` in an invariant."""

    tally = Tally()

    @rule()
    def step(self) -> None:
        pass

    @invariant()
    def count(self) -> None:
        self.tally.add("steps")


class OneInit(Steps):
    @initialize()
    def first(self) -> None:
        pass


class ThreeInits(OneInit):
    @initialize()
    def second(self) -> None:
        pass

    @initialize()
    def third(self) -> None:
        pass


class Events(list[tuple[str, str, int]]):
    put = list.append


@pytest.mark.parametrize("machine", [Steps, OneInit, ThreeInits], ids=["none", "one", "three"])
def test_each_schedule_reports_the_steps_it_ran_whatever_its_initialize_rules(
    machine: type[Steps],
) -> None:
    events = Events()
    run_state_machine_as_test(
        _counting(machine, machine.tally, events, "m"),
        settings=settings(max_examples=3, stateful_step_count=9, database=None),
        _min_steps=9,
    )
    assert [steps for _kind, _name, steps in events] == [9, 9, 9]


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_stops_the_soak_and_names_itself_in_the_report(signum: signal.Signals) -> None:
    stop = threading.Event()
    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        received = stop_on_signals(stop)
        assert not stop.is_set() and received == {}
        os.kill(os.getpid(), signum)  # handled in the main thread before kill returns
        assert stop.is_set() and received == {"stopped_by": signum.name}
    finally:
        for s, handler in before.items():
            signal.signal(s, handler)


def test_a_soak_without_a_terminal_prints_one_progress_line_a_minute() -> None:
    lines = ProgressLines(target=1_000, started=100.0)
    assert lines.line(159.0, 40) is None  # not a minute yet
    assert lines.line(160.0, 50) == "1 min: 50 long schedules (50.0/min, about 19 min to 1,000)"
    assert lines.line(219.0, 90) is None  # a minute since the last line, not since the start
    assert (
        lines.line(220.0, 1_000) == "2 min: 1,000 long schedules (500.0/min, about 0 min to 1,000)"
    )
