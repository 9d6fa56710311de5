"""The producer API handler's settings, validated once at cold start."""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import BaseModel, Field

from lambdas.settings import settings_from_env
from shardlog import constants as C
from shardlog.settings import StreamName


class ProducerApiSettings(BaseModel, frozen=True):
    stream_name: StreamName
    # Retries of entries Kinesis failed, inside one request (API Gateway waits at most 29 s).
    max_attempts: int = Field(default=5, ge=1, le=20)
    base_backoff_ms: int = Field(default=50, ge=0, le=10_000)
    max_backoff_ms: int = Field(default=1_000, ge=0, le=10_000)
    # What a throttled caller is told to wait (the Retry-After header of 429 and 503).
    retry_after_s: int = Field(default=1, ge=0, le=3_600)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> ProducerApiSettings:
        names = {"stream_name": C.ENV_STREAM_NAME}
        return settings_from_env(cls, names, "producer API", environ)
