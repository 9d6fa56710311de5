"""Loading a handler's settings from its environment, validated once at cold start."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TypeVar

from pydantic import BaseModel, ValidationError

from shardlog.exceptions import ConfigurationError

Settings = TypeVar("Settings", bound=BaseModel)


def settings_from_env(
    model: type[Settings],
    variables: Mapping[str, str],
    what: str,
    environ: Mapping[str, str] | None = None,
) -> Settings:
    """Build ``model`` from the environment variables named per field in ``variables``.

    An unset (or empty) variable leaves the field's default; a missing required one or a bad
    value raises ConfigurationError naming the variable and the rule it broke.
    """
    env = os.environ if environ is None else environ
    values = {field: env[var] for field, var in variables.items() if env.get(var)}
    try:
        return model.model_validate(values)
    except ValidationError as exc:
        problems = "; ".join(
            f"{variables.get(str(e['loc'][0]), e['loc'][0])}: {e['msg']}"
            for e in exc.errors()
            if e["loc"]
        )
        raise ConfigurationError(f"invalid {what} settings: {problems}") from exc
