"""The package root stays light: the segment codec loads no AWS SDK (docs/FORMAT.md promises
a stdlib-only decoder), and the public names still import from ``shardlog``."""

from __future__ import annotations

import subprocess
import sys

import pytest

import shardlog


def _modules_after(statement: str) -> set[str]:
    code = f"import sys; {statement}; print('\\n'.join(sorted(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True, timeout=60
    )
    return set(out.stdout.split())


def test_importing_the_format_loads_no_boto3() -> None:
    loaded = _modules_after("import shardlog.format")
    assert "shardlog.format" in loaded
    assert not {"boto3", "botocore", "pydantic"} & loaded


def test_importing_the_package_root_loads_no_boto3() -> None:
    assert "boto3" not in _modules_after("import shardlog")


@pytest.mark.parametrize("name", shardlog.__all__)
def test_every_public_name_imports_from_the_root(name: str) -> None:
    assert getattr(shardlog, name) is not None


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no_such_name"):
        shardlog.no_such_name  # noqa: B018


def test_all_lists_exactly_the_lazy_exports() -> None:
    assert set(shardlog.__all__) == set(shardlog._EXPORTS) | {"__version__"}


def test_the_wheel_installs_only_the_shardlog_package() -> None:
    """No top-level `lambdas`, `infra`, `spark_jobs`, `bench` or `tests` in a user's
    site-packages: the packages setuptools finds with pyproject's own settings."""
    import tomllib
    from pathlib import Path

    from setuptools import find_namespace_packages

    root = Path(__file__).resolve().parents[2]
    find = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    packages = find_namespace_packages(str(root), **find["find"])
    assert {"shardlog", "shardlog.cli", "shardlog.local", "shardlog.lambda_consumer"} <= set(
        packages
    )
    assert [p for p in packages if p.split(".")[0] != "shardlog"] == []
