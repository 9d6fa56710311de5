"""The Lambda asset: Python sources of shardlog and lambdas only, bundled without Docker,
identical for identical sources."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from infra.assets import asset_files, copy_asset
from tests.infra.cdk_synth import Synthesized


def _digest(directory: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(p for p in directory.rglob("*") if p.is_file()):
        digest.update(path.relative_to(directory).as_posix().encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def _ingest_asset_dir(synth: Synthesized) -> Path:
    (ingest,) = [
        f
        for f in synth.resources("AWS::Lambda::Function").values()
        if f["Properties"]["Handler"] == "lambdas.ingest.handler.handler"
    ]
    object_key = ingest["Properties"]["Code"]["S3Key"]
    manifest = json.loads((synth.outdir / f"{synth.stack.stack_name}.assets.json").read_text())
    (source,) = [
        entry["source"]["path"]
        for entry in manifest["files"].values()
        if any(d["objectKey"] == object_key for d in entry["destinations"].values())
    ]
    return synth.outdir / source


def test_asset_holds_the_handlers_and_the_core_library(synth: Synthesized) -> None:
    asset = _ingest_asset_dir(synth)
    files = {p.relative_to(asset).as_posix() for p in asset.rglob("*") if p.is_file()}
    assert "lambdas/ingest/handler.py" in files
    assert "lambdas/shard_sync/handler.py" in files
    assert "shardlog/constants.py" in files
    assert "shardlog/writer.py" in files


def test_asset_holds_nothing_else(synth: Synthesized) -> None:
    asset = _ingest_asset_dir(synth)
    files = [p.relative_to(asset) for p in asset.rglob("*") if p.is_file()]
    assert files
    for path in files:
        assert path.parts[0] in ("shardlog", "lambdas"), path
        assert path.suffix in (".py", ".typed"), path
        assert "__pycache__" not in path.parts, path
        assert path.parts[:2] not in (("shardlog", "local"), ("shardlog", "cli")), path


def test_bundling_is_deterministic(tmp_path: Path) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    assert copy_asset(first) == copy_asset(second) == asset_files()
    assert _digest(first) == _digest(second)
