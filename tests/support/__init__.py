"""What the tests share: the embedded AWS environment, factories and read-backs.

Tests import from here (``tests.support.aws``, ``tests.support.factories``, ...), never
from a conftest: conftest modules only declare fixtures.
"""

from __future__ import annotations

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
DOCS = REPO_ROOT / "docs"
