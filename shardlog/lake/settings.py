"""Where the lake table lives: catalog name, catalog properties, identifier, location.

The properties are exactly what ``pyiceberg.catalog.load_catalog(name, **properties)``
takes, so ``.shardlog/local.json`` (key ``lake``) lets any pyiceberg user open the table:

- on AWS: the Glue Data Catalog of the region; S3 and Glue credentials from the usual chain;
- on the embedded AWS: the same Glue catalog code, pointed at moto's server
  (``glue.endpoint``, ``s3.endpoint`` and the local, never real, keys).

The table's location is ``s3://<log bucket>/lake/<database>/<table>``: data and metadata
sit beside the log, under the bucket's encryption and TLS-only policy. No pyiceberg
import here: the local runtime writes these settings without the Spark extra installed.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from shardlog import constants as C
from shardlog.config import LOCAL_CREDENTIALS, ShardlogConfig, local_credentials


@dataclass(frozen=True)
class LakeSettings:
    table: str = C.DEFAULT_LAKE_TABLE  # <database>.<table>
    location: str = ""
    catalog_name: str = C.DEFAULT_LAKE_CATALOG
    properties: Mapping[str, str] = field(default_factory=dict)

    @property
    def database(self) -> str:
        return self.table.split(".", 1)[0]

    @property
    def bucket(self) -> str:
        return self.location.removeprefix("s3://").split("/", 1)[0]

    @property
    def key_prefix(self) -> str:
        """The table location's key in its bucket, ending in '/'."""
        return self.location.removeprefix("s3://").split("/", 1)[1].rstrip("/") + "/"

    def sibling(self, name: str) -> LakeSettings:
        """Another table of the same database and catalog, beside this one (a declared
        typed table, or its dead-letter table: ``shardlog.lake.declared``)."""
        parent = self.location.rstrip("/").rsplit("/", 1)[0]
        return replace(self, table=f"{self.database}.{name}", location=f"{parent}/{name}")

    @classmethod
    def for_deployment(
        cls,
        bucket: str,
        region: str = C.DEFAULT_REGION,
        endpoint_url: str | None = None,
        table: str | None = None,
    ) -> LakeSettings:
        identifier = table or os.environ.get(C.ENV_LAKE_TABLE) or C.DEFAULT_LAKE_TABLE
        database, _, name = identifier.partition(".")
        if not database or not name or "." in name:
            raise ValueError(f"lake table must be <database>.<table>, not {identifier!r}")
        properties = {"type": "glue", "glue.region": region, "s3.region": region}
        if endpoint_url:
            # The process's own principal when it has one (a Spark job run's: the role's).
            key, secret = local_credentials() or LOCAL_CREDENTIALS
            properties |= {
                "glue.endpoint": endpoint_url,
                "glue.access-key-id": key,
                "glue.secret-access-key": secret,
                "s3.endpoint": endpoint_url,
                "s3.access-key-id": key,
                "s3.secret-access-key": secret,
            }
        return cls(
            table=identifier,
            location=f"s3://{bucket}/{C.LAKE_PREFIX}{database}/{name}",
            properties=properties,
        )

    @classmethod
    def from_config(cls, config: ShardlogConfig, table: str | None = None) -> LakeSettings:
        """From a state file's ``lake`` entry if it has one, else derived from the config."""
        saved = config.extra.get("lake")
        if isinstance(saved, dict) and table is None and not os.environ.get(C.ENV_LAKE_TABLE):
            return cls.from_json(saved)
        return cls.for_deployment(config.bucket, config.region, config.endpoint_url, table)

    def to_json(self) -> dict[str, Any]:
        return {
            "catalog": self.catalog_name,
            "properties": dict(self.properties),
            "table": self.table,
            "location": self.location,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> LakeSettings:
        return cls(
            table=str(data["table"]),
            location=str(data["location"]),
            catalog_name=str(data.get("catalog", C.DEFAULT_LAKE_CATALOG)),
            properties={str(k): str(v) for k, v in data.get("properties", {}).items()},
        )
