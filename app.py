#!/usr/bin/env python3
"""CDK entry point: `npx cdk synth` / `npx cdk deploy` run this (see docs/DEPLOY.md)."""

from __future__ import annotations

from aws_cdk import App

from infra.stack import build_app


def main() -> None:
    app = App()
    build_app(app)
    app.synth()


if __name__ == "__main__":
    main()
