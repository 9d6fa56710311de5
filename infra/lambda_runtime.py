"""What a shardlog Lambda has besides its code asset, installed for the test that runs every
handler from the asset alone: ``make lambda-runtime`` (``python -m infra.lambda_runtime``).

The pins are in infra/lambda-runtime.txt (the python3.12 runtime's boto3 and botocore, the
pinned Powertools layer's contents). They are installed with pip into
``build/lambda-runtime/site`` once per content of that file (the file is copied beside them
when the install completed); the interpreter is this machine's Python 3.11, not Lambda's
3.12 (docs/DEPLOY.md, "What is proven before you deploy").
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Final

REPO_ROOT: Final = Path(__file__).resolve().parent.parent
REQUIREMENTS: Final = REPO_ROOT / "infra" / "lambda-runtime.txt"
RUNTIME_DIR: Final = REPO_ROOT / "build" / "lambda-runtime"


def runtime_site(root: Path = RUNTIME_DIR, requirements: Path = REQUIREMENTS) -> Path:
    """The installed runtime + layer packages (pip downloads them on the first call)."""
    site = root / "site"
    stamp = site / ".requirements"
    wanted = requirements.read_text()
    if stamp.is_file() and stamp.read_text() == wanted:
        return site
    partial = root / "site.partial"
    shutil.rmtree(partial, ignore_errors=True)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-compile",
            "--only-binary=:all:",
            "--target",
            str(partial),
            "-r",
            str(requirements),
        ],
        check=True,
    )
    (partial / ".requirements").write_text(wanted)
    shutil.rmtree(site, ignore_errors=True)
    partial.replace(site)
    return site


if __name__ == "__main__":
    print(runtime_site())
