"""Write (or check) docs/openapi.json, the producer API's OpenAPI document, from the routes.

Usage (from the repository's root): python -m scripts.openapi [--check] [PATH]

A docs tool: it lives here, not beside the handler, so the Lambda asset does not ship it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from shardlog.local.quiet import quiet_powertools

DEFAULT_PATH = Path(__file__).resolve().parents[1] / "docs" / "openapi.json"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    parser.add_argument("path", nargs="?", type=Path, default=DEFAULT_PATH)
    parser.add_argument("--check", action="store_true", help="Fail if the file is stale.")
    args = parser.parse_args(argv)
    quiet_powertools()
    from lambdas.producer_api.handler import openapi_json

    document = openapi_json()
    if args.check:
        current = args.path.read_text() if args.path.is_file() else ""
        if current != document:
            print(f"{args.path} is stale: run python -m scripts.openapi", file=sys.stderr)
            return 1
        return 0
    args.path.write_text(document)
    print(f"wrote {args.path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
