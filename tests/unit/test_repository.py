"""The repository documents itself and keeps one place for each concept."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support import DOCS, REPO_ROOT

SOURCE_DIRS = ("shardlog", "lambdas", "spark_jobs", "infra", "bench")


def source_files() -> list[Path]:
    return sorted(p for d in SOURCE_DIRS for p in (REPO_ROOT / d).rglob("*.py"))


def offenders(pattern: str, allowed: set[str]) -> list[str]:
    regex = re.compile(pattern)
    found = []
    for path in source_files():
        relative = str(path.relative_to(REPO_ROOT))
        if relative in allowed:
            continue
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            if regex.search(line):
                found.append(f"{relative}:{number}: {line.strip()}")
    return found


def test_only_the_segment_store_knows_the_log_layout() -> None:
    allowed = {"shardlog/segments.py", "shardlog/constants.py"}
    assert offenders(r"[\"']events/", allowed) == []
    assert offenders(r"def (segment_key|partition_prefix|seq_of_key)\b", allowed) == []
    # The IAM grants of the stack name the prefix (infra/); nothing else lists or builds it.
    assert [o for o in offenders(r"EVENTS_PREFIX", allowed) if not o.startswith("infra/")] == []


def test_only_the_tables_module_recognises_a_refused_condition() -> None:
    assert (
        offenders(r"[\"']ConditionalCheckFailed", {"shardlog/exceptions.py", "shardlog/tables.py"})
        == []
    )


def test_only_the_partitions_table_layer_sets_a_partition_state() -> None:
    allowed = {"shardlog/dal/partitions.py", "shardlog/constants.py", "shardlog/tables.py"}
    assert offenders(r"#state = ", allowed) == []


@pytest.mark.parametrize("document", ["README.md", *(p.name for p in DOCS.glob("*.md"))])
def test_documents_never_point_outside_the_repository(document: str) -> None:
    path = REPO_ROOT / document if document == "README.md" else DOCS / document
    assert "../shared" not in path.read_text()


def test_the_architecture_map_names_modules_that_exist() -> None:
    text = (DOCS / "ARCHITECTURE.md").read_text()
    named = set(
        re.findall(r"`((?:shardlog|lambdas|infra|spark_jobs|bench)/[\w/]*(?:\.py)?)`", text)
    )
    assert named, "no module named"
    missing = sorted(n for n in named if not (REPO_ROOT / n).exists())
    assert missing == []


def test_readme_links_the_architecture() -> None:
    assert "docs/ARCHITECTURE.md" in (REPO_ROOT / "README.md").read_text()
