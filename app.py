#!/usr/bin/env python3
"""CDK entry point: `npx cdk synth` / `npx cdk deploy` run this (see docs/DEPLOY.md)."""

from __future__ import annotations

import sys

from aws_cdk import App

from infra.settings import SettingsError
from infra.stack import build_app


def main() -> None:
    app = App()
    try:
        build_app(app)
    except SettingsError as exc:  # a context value to fix: say which, without a traceback
        sys.exit(f"shardlog: {exc}")
    app.synth()


if __name__ == "__main__":
    main()
