"""The documents hold together: every link and every path they name leads somewhere, the
README stays a front page that links every document, and generated figures live in one page.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support import DOCS, REPO_ROOT

README = REPO_ROOT / "README.md"
DOCUMENTS = [README, *sorted(DOCS.glob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
# A repository path named in prose or code: `bench/report.py`, docs/TABLES.md, tests/unit/.
# A path that goes on with a placeholder (`tests/functional/<concern>/`) is a pattern: skipped.
NAMED_PATH = re.compile(
    r"(?<![\w/.-])((?:docs|bench|shardlog|tests|scripts|infra|lambdas|spark_jobs)/[\w./-]*)"
    r"(?![\w<*{/.-])"
)
NOT_PATHS = {"shardlog/events"}  # the lake table's Glue resource name (docs/LAKE.md)


def name(document: Path) -> str:
    return str(document.relative_to(REPO_ROOT))


def anchors(document: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens."""
    found = set()
    for line in document.read_text().splitlines():
        if line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            found.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return found


@pytest.mark.parametrize("document", DOCUMENTS, ids=name)
def test_every_relative_link_leads_to_a_file_and_heading_that_exist(document: Path) -> None:
    broken = []
    for target in LINK.findall(document.read_text()):
        if re.match(r"[a-z]+:", target):  # http(s), mailto: not this repository's
            continue
        path_part, _, anchor = target.partition("#")
        path = (document.parent / path_part).resolve() if path_part else document
        if not path.exists():
            broken.append(f"{target}: no {path_part}")
        elif anchor and path.suffix == ".md" and anchor not in anchors(path):
            broken.append(f"{target}: no heading #{anchor} in {name(path)}")
    assert broken == []


@pytest.mark.parametrize("document", DOCUMENTS, ids=name)
def test_every_repository_path_a_document_names_exists(document: Path) -> None:
    named = {m.rstrip(".") for m in NAMED_PATH.findall(document.read_text())} - NOT_PATHS
    assert sorted(p for p in named if not (REPO_ROOT / p).exists()) == []


def test_the_readme_is_a_front_page_that_links_every_document() -> None:
    text = README.read_text()
    assert len(text.splitlines()) < 150
    links = set(LINK.findall(text))
    assert (
        sorted(f"docs/{d.name}" for d in DOCS.glob("*.md") if f"docs/{d.name}" not in links) == []
    )
    for command in ("make demo", "make test"):
        assert command in text
    assert "bench/" in NAMED_PATH.findall(text), "the path pattern no longer finds the layout's"


def test_generated_figures_live_in_the_performance_page_only() -> None:
    """`make measured` rewrites one marked block, and only docs/PERFORMANCE.md has one."""
    marked = [name(d) for d in DOCUMENTS if "<!-- measured:begin -->" in d.read_text()]
    assert marked == ["docs/PERFORMANCE.md"]
    text = (DOCS / "PERFORMANCE.md").read_text()
    assert text.count("<!-- measured:begin -->") == text.count("<!-- measured:end -->") == 1
