"""Opt-in per-test cost record: where the suite's CPU goes (docs/TESTING.md, "Where the time
goes"). Active when ``SHARDLOG_TEST_CPU=<file>`` is set; each test's setup, call and teardown
together are measured as

- ``cpu``: this process's CPU seconds (``time.process_time()``); the embedded AWS serves its
  requests on threads of this process, so its work is counted with the test's;
- ``children_cpu``: CPU seconds of child processes that ended meanwhile (spark-submit, the
  CDK CLI, the local Lambda runtime; ``os.times()``);
- ``wall``: elapsed seconds, which on a shared machine say more about the load than the test.

A session-scoped fixture's setup lands on the first test that uses it. At the end the records
are written as JSON (a list of ``{"test", "cpu", "children_cpu", "wall"}``, slowest first);
under pytest-xdist each worker writes ``<file>.<worker id>``."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Generator
from pathlib import Path

import pytest

ENV = "SHARDLOG_TEST_CPU"


class CpuCosts:
    """Collects the records and writes them when the session ends."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.records: list[dict[str, float | str]] = []

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item) -> Generator[None, None, None]:
        cpu, wall, children = time.process_time(), time.perf_counter(), _children_cpu()
        yield
        self.records.append(
            {
                "test": item.nodeid,
                "cpu": round(time.process_time() - cpu, 4),
                "children_cpu": round(_children_cpu() - children, 4),
                "wall": round(time.perf_counter() - wall, 4),
            }
        )

    def pytest_sessionfinish(self) -> None:
        worker = os.environ.get("PYTEST_XDIST_WORKER")
        path = self.path.with_name(f"{self.path.name}.{worker}") if worker else self.path
        ranked = sorted(self.records, key=lambda r: -float(r["cpu"]) - float(r["children_cpu"]))
        path.write_text(json.dumps(ranked, indent=1) + "\n")


def _children_cpu() -> float:
    times = os.times()
    return times.children_user + times.children_system


def register(config: pytest.Config) -> None:
    """Register the recorder when the environment asks for it."""
    target = os.environ.get(ENV)
    if target:
        config.pluginmanager.register(CpuCosts(Path(target)), "shardlog-cpu-costs")


def summary(paths: list[Path], top: int = 25) -> str:
    """The records of ``paths``: CPU seconds per directory, then the ``top`` costliest tests."""
    records = [r for p in paths for r in json.loads(p.read_text())]
    by_dir: dict[str, list[float]] = {}
    for r in records:
        row = by_dir.setdefault(str(r["test"]).split("::")[0].rsplit("/", 1)[0], [0, 0, 0, 0])
        row[0] += 1
        row[1] += float(r["cpu"])
        row[2] += float(r["children_cpu"])
        row[3] += float(r["wall"])
    lines = [f"{'directory':<34} {'tests':>5} {'cpu s':>8} {'child s':>8} {'wall s':>8}"]
    for name, (n, cpu, child, wall) in sorted(by_dir.items(), key=lambda kv: -kv[1][1]):
        lines.append(f"{name:<34} {n:>5.0f} {cpu:>8.1f} {child:>8.1f} {wall:>8.1f}")
    lines.append("")
    ranked = sorted(records, key=lambda r: -float(r["cpu"]) - float(r["children_cpu"]))
    for r in ranked[:top]:
        lines.append(f"{r['cpu']:>8.1f} {r['children_cpu']:>8.1f} {r['wall']:>8.1f}  {r['test']}")
    return "\n".join(lines)


if __name__ == "__main__":  # python -m tests.cpu_costs FILE... : the table of the records
    import sys

    print(summary([Path(p) for p in sys.argv[1:]]))
