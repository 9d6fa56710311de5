"""The runner's settings: one JSON document in one environment variable, validated at cold
start (the CDK construct writes it from the same model)."""

from __future__ import annotations

import os
from collections.abc import Mapping

from pydantic import ValidationError

from shardlog import constants as C
from shardlog.exceptions import ConfigurationError
from shardlog.lambda_consumer.settings import RunnerSettings


def runner_settings_from_env(environ: Mapping[str, str] | None = None) -> RunnerSettings:
    env = os.environ if environ is None else environ
    raw = env.get(C.ENV_LAMBDA_CONSUMER)
    if not raw:
        raise ConfigurationError(f"{C.ENV_LAMBDA_CONSUMER} is not set: the runner has no group")
    try:
        return RunnerSettings.model_validate_json(raw)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()
        )
        raise ConfigurationError(f"invalid {C.ENV_LAMBDA_CONSUMER}: {problems}") from exc
