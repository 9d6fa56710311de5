"""The Lambda code asset: the `shardlog` and `lambdas` packages, Python sources only.

Bundled by a local ILocalBundling, so synth never needs Docker. Third-party code is not
bundled: boto3 is in the Lambda runtime and Powertools (with pydantic v2) comes from the
pinned public layer (infra/constants.py). The copy is deterministic: files are visited in
sorted order, copied without their timestamps or modes, and the asset hash is computed from
the output, so the same sources always give the same asset.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any, Final

import jsii
from aws_cdk import AssetHashType, BundlingOptions, DockerImage, ILocalBundling
from aws_cdk import aws_lambda as lambda_

REPO_ROOT: Final = Path(__file__).resolve().parent.parent

# What the handlers import. The local runtime (moto), the CLI (click) and the demo are never
# imported by a handler and would only ship code whose dependencies Lambda does not have.
ASSET_PACKAGES: Final = ("shardlog", "lambdas")
EXCLUDED_PATHS: Final = frozenset({"shardlog/local", "shardlog/cli", "shardlog/__main__.py"})
INCLUDED_SUFFIXES: Final = frozenset({".py", ".typed"})


def asset_files(root: Path = REPO_ROOT) -> list[Path]:
    """The files of the asset, relative to root, in a stable order."""
    files: list[Path] = []
    for package in ASSET_PACKAGES:
        for path in sorted((root / package).rglob("*")):
            relative = path.relative_to(root)
            if not path.is_file() or path.suffix not in INCLUDED_SUFFIXES:
                continue
            if "__pycache__" in relative.parts:
                continue
            posix = relative.as_posix()
            if any(posix == p or posix.startswith(f"{p}/") for p in EXCLUDED_PATHS):
                continue
            files.append(relative)
    return files


def copy_asset(output_dir: Path, root: Path = REPO_ROOT) -> list[Path]:
    """Copy the asset files into output_dir; contents only, so mtimes never reach the hash."""
    files = asset_files(root)
    for relative in files:
        target = output_dir / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(root / relative, target)
    return files


@jsii.implements(ILocalBundling)
class PythonSourceBundling:
    """Local bundling that copies the Python packages; it never falls back to Docker."""

    def __init__(self, root: Path = REPO_ROOT) -> None:
        self._root = root

    def try_bundle(self, output_dir: str, *_args: Any, **_options: Any) -> bool:
        if not copy_asset(Path(output_dir), self._root):
            raise RuntimeError(f"no Python sources found under {self._root} for the Lambda asset")
        return True


def lambda_code(root: Path = REPO_ROOT) -> lambda_.Code:
    """The one code asset every shardlog function shares (handlers differ by entry point)."""
    return lambda_.Code.from_asset(
        str(root / ASSET_PACKAGES[-1]),
        asset_hash_type=AssetHashType.OUTPUT,
        bundling=BundlingOptions(
            # Required by the API but never pulled: PythonSourceBundling always bundles locally.
            image=DockerImage.from_registry("local-bundling-only"),
            local=PythonSourceBundling(root),
        ),
    )
