"""The producer API handler's settings, validated once at cold start."""

from __future__ import annotations

import os
from collections.abc import Mapping

from pydantic import BaseModel, Field, ValidationError

from shardlog import constants as C
from shardlog.exceptions import ConfigurationError


class ProducerApiSettings(BaseModel, frozen=True):
    stream_name: str = Field(min_length=1, max_length=128, pattern=r"^[a-zA-Z0-9_.-]+$")
    # Retries of entries Kinesis failed, inside one request (API Gateway waits at most 29 s).
    max_attempts: int = Field(default=5, ge=1, le=20)
    base_backoff_ms: int = Field(default=50, ge=0, le=10_000)
    max_backoff_ms: int = Field(default=1_000, ge=0, le=10_000)
    # What a throttled caller is told to wait (the Retry-After header of 429 and 503).
    retry_after_s: int = Field(default=1, ge=0, le=3_600)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> ProducerApiSettings:
        env = os.environ if environ is None else environ
        names = {"stream_name": C.ENV_STREAM_NAME}
        values = {field: env[var] for field, var in names.items() if var in env}
        try:
            return cls.model_validate(values)
        except ValidationError as exc:
            problems = "; ".join(
                f"{names.get(str(e['loc'][0]), e['loc'][0])}: {e['msg']}"
                for e in exc.errors()
                if e["loc"]
            )
            raise ConfigurationError(f"invalid producer API settings: {problems}") from exc
