"""Where a shardlog deployment lives: stream, bucket, tables, region, endpoint.

Resolution order: explicit arguments, then environment variables, then the
local runtime's state file (.shardlog/local.json), then the defaults.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from shardlog import constants as C
from shardlog.aws import AwsConfig, Clients
from shardlog.tables import TableNames

LOCAL_CREDENTIALS = ("shardlog-local", "shardlog-local")  # moto accepts any; never real
# Against the embedded AWS, each deployed function (and the Spark jobs, and a consumer group's
# workers) signs with an access key id of its own that names it, as each has a role of its own
# on AWS: the embedded AWS checks no signature, but records who made each request
# (shardlog.local.request_log), so the requests can be checked against the synthesized
# policies of the function that made them. Not secret: the embedded AWS accepts any key.
PRINCIPAL_KEY_PREFIX = "SHARDLOGAS"


def principal_key(principal: str) -> str:
    """The local access key id that names ``principal`` (hex: keys are [A-Z0-9])."""
    return PRINCIPAL_KEY_PREFIX + principal.encode().hex().upper()


def principal_of_key(access_key_id: str) -> str | None:
    """The principal a local access key id names, or None for any other key."""
    if not access_key_id.startswith(PRINCIPAL_KEY_PREFIX):
        return None
    try:
        return bytes.fromhex(access_key_id.removeprefix(PRINCIPAL_KEY_PREFIX)).decode()
    except ValueError:
        return None


def local_credentials(principal: str | None = None) -> tuple[str, str] | None:
    """The credentials of ``principal`` (else of this process's, from
    SHARDLOG_LOCAL_PRINCIPAL) against the embedded AWS; None when neither names one."""
    principal = principal or os.environ.get(C.ENV_LOCAL_PRINCIPAL)
    if not principal:
        return None
    return principal_key(principal), LOCAL_CREDENTIALS[1]


@dataclass(frozen=True)
class ShardlogConfig:
    stream_name: str = C.DEFAULT_STREAM_NAME
    bucket: str = C.DEFAULT_BUCKET_NAME
    partitions_table: str = C.DEFAULT_PARTITIONS_TABLE
    consumers_table: str = C.DEFAULT_CONSUMERS_TABLE
    region: str = C.DEFAULT_REGION
    endpoint_url: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)  # e.g. apiUrl from the local runtime

    @property
    def tables(self) -> TableNames:
        return TableNames(self.partitions_table, self.consumers_table)

    @property
    def is_local(self) -> bool:
        return self.endpoint_url is not None and "127.0.0.1" in self.endpoint_url

    def clients(self, principal: str | None = None) -> Clients:
        """Clients of this deployment; against the embedded AWS, signed as ``principal``
        (shardlog.local.principals names them) or as this process's principal, if any."""
        aws = AwsConfig(region=self.region, endpoint_url=self.endpoint_url)
        if self.is_local:
            named = local_credentials(principal)
            if named is not None:
                aws.access_key_id, aws.secret_access_key = named
            elif not os.environ.get("AWS_ACCESS_KEY_ID"):
                aws.access_key_id, aws.secret_access_key = LOCAL_CREDENTIALS
        return Clients(config=aws)

    def with_overrides(self, **overrides: Any) -> ShardlogConfig:
        return replace(self, **{k: v for k, v in overrides.items() if v is not None})

    # --- the local state file ---------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        extra = data.pop("extra")
        return {
            "endpointUrl": data["endpoint_url"],
            "region": data["region"],
            "streamName": data["stream_name"],
            "bucket": data["bucket"],
            "partitionsTable": data["partitions_table"],
            "consumersTable": data["consumers_table"],
            **extra,
        }

    def write(self, path: str | Path = C.LOCAL_STATE_FILE) -> Path:
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.to_json(), indent=2) + "\n")
        tmp.replace(target)
        return target

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ShardlogConfig:
        known = {
            "endpointUrl": "endpoint_url",
            "region": "region",
            "streamName": "stream_name",
            "bucket": "bucket",
            "partitionsTable": "partitions_table",
            "consumersTable": "consumers_table",
        }
        kwargs = {attr: data[key] for key, attr in known.items() if data.get(key) is not None}
        extra = {k: v for k, v in data.items() if k not in known}
        return cls(**kwargs, extra=extra)

    @classmethod
    def resolve(
        cls, state_file: str | Path | None = C.LOCAL_STATE_FILE, **overrides: Any
    ) -> ShardlogConfig:
        config = cls()
        if state_file is not None and Path(state_file).is_file():
            config = cls.from_json(json.loads(Path(state_file).read_text()))
        env = {
            "stream_name": os.environ.get(C.ENV_STREAM_NAME),
            "bucket": os.environ.get(C.ENV_BUCKET_NAME),
            "partitions_table": os.environ.get(C.ENV_PARTITIONS_TABLE),
            "consumers_table": os.environ.get(C.ENV_CONSUMERS_TABLE),
            "region": os.environ.get(C.ENV_REGION),
            "endpoint_url": os.environ.get(C.ENV_ENDPOINT_URL),
        }
        return config.with_overrides(**env).with_overrides(**overrides)
