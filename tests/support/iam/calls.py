"""From a recorded HTTP request (shardlog.local.request_log) back to the API call it was.

The embedded AWS records what went over the wire; IAM authorizes API operations. botocore's
service models say how each operation is put on the wire, so they also say how to read it
back: the ``X-Amz-Target`` header names the operation of JSON protocols, the ``Action`` field
of query protocols, and for REST protocols the method and path template (``requestUri``) do,
with the member locations (uri, querystring, header, body) giving the parameters. A request
that matches no operation of the services below fails loudly: a call the replay cannot read is
never skipped.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from functools import cache
from typing import Any
from urllib.parse import parse_qsl, unquote

import botocore.session
from botocore.model import OperationModel, ServiceModel

# The signature scope's service name -> the botocore services signing with it.
SERVICES_BY_SIGNING_NAME: dict[str, tuple[str, ...]] = {
    "dynamodb": ("dynamodb", "dynamodbstreams"),
    "kinesis": ("kinesis",),
    "s3": ("s3",),
    "sqs": ("sqs",),
    "sns": ("sns",),
    "glue": ("glue",),
    "emr-serverless": ("emr-serverless",),
    "lambda": ("lambda",),
    "iam": ("iam",),
    "sts": ("sts",),
    "kms": ("kms",),
    "monitoring": ("cloudwatch",),
    "scheduler": ("scheduler",),
    "events": ("events",),
}


class UnreadableRequest(ValueError):
    """A recorded request that maps to no known API operation."""


@dataclass(frozen=True)
class Call:
    principal: str
    service: str  # botocore's name: "dynamodbstreams", "s3", ...
    operation: str  # "GetItem"
    params: dict[str, Any]
    region: str
    status: int
    stand_in: bool = False
    headers: dict[str, str] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return f"{self.service}:{self.operation}"

    def describe(self) -> str:
        shown = {k: v for k, v in self.params.items() if isinstance(v, str) and len(v) < 200}
        return f"{self.name} {json.dumps(shown, sort_keys=True)} -> {self.status}"


@cache
def _session() -> botocore.session.Session:
    return botocore.session.get_session()


@cache
def service_model(name: str) -> ServiceModel:
    return _session().get_service_model(name)


def read_call(record: dict[str, Any]) -> Call:
    """The API call a recorded request (or a recorded stand-in) was."""
    if record.get("standIn"):
        return Call(
            principal=record["principal"],
            service=record["service"],
            operation=record["operation"],
            params=dict(record["params"]),
            region=record.get("region", "us-east-1"),
            status=int(record.get("status", 200)),
            stand_in=True,
        )
    candidates = SERVICES_BY_SIGNING_NAME.get(record["service"])
    if candidates is None:
        raise UnreadableRequest(
            f"requests signed for {record['service']!r} are not known to the replay: "
            "add the service to SERVICES_BY_SIGNING_NAME"
        )
    for name in candidates:
        found = _operation(service_model(name), record)
        if found is not None:
            operation, params = found
            return Call(
                principal=record["principal"],
                service=name,
                operation=operation.name,
                params=params,
                region=record["region"],
                status=int(record.get("status", 0)),
                headers=dict(record.get("headers", {})),
            )
    raise UnreadableRequest(
        f"{record['method']} {record['path']}?{record['query']} ({record['service']}) "
        "matches no operation"
    )


def _operation(
    model: ServiceModel, record: dict[str, Any]
) -> tuple[OperationModel, dict[str, Any]] | None:
    if model.protocol == "json":
        return _json_operation(model, record)
    if model.protocol == "query":
        return _query_operation(model, record)
    return _rest_operation(model, record)


def _json_operation(
    model: ServiceModel, record: dict[str, Any]
) -> tuple[OperationModel, dict[str, Any]] | None:
    target = record.get("headers", {}).get("x-amz-target", "")
    prefix, _, name = target.partition(".")
    if prefix != model.metadata.get("targetPrefix") or name not in model.operation_names:
        return None
    body = record.get("body") or "{}"
    return model.operation_model(name), dict(json.loads(body))


def _query_operation(
    model: ServiceModel, record: dict[str, Any]
) -> tuple[OperationModel, dict[str, Any]] | None:
    fields = dict(parse_qsl(record.get("body") or "")) | dict(parse_qsl(record.get("query", "")))
    name = fields.pop("Action", "")
    if name not in model.operation_names:
        return None
    fields.pop("Version", None)
    return model.operation_model(name), fields


@dataclass(frozen=True)
class _Route:
    operation: str
    method: str
    segments: tuple[str, ...]  # literal text, "{Label}" or "{Label+}"
    query: tuple[tuple[str, str | None], ...]  # literal query keys (and values) it requires
    headers: tuple[str, ...]  # headers of required members (CopyObject: x-amz-copy-source)

    @property
    def specificity(self) -> tuple[int, int, int]:
        literal = sum(1 for s in self.segments if not s.startswith("{"))
        return (len(self.query), len(self.headers), literal)


@cache
def _routes(name: str) -> tuple[_Route, ...]:
    model = service_model(name)
    routes = []
    for operation in model.operation_names:
        http = model.operation_model(operation).http
        path, _, query = str(http["requestUri"]).partition("?")
        literal_query = tuple(
            (key, value or None)
            for key, _, value in (part.partition("=") for part in query.split("&") if part)
        )
        segments = tuple(s for s in path.split("/") if s)
        shape = model.operation_model(operation).input_shape
        headers = tuple(
            str(shape.members[m].serialization.get("name", m)).lower()
            for m in (shape.required_members if shape is not None else [])
            if shape.members[m].serialization.get("location") == "header"
        )
        routes.append(_Route(operation, str(http["method"]), segments, literal_query, headers))
    return tuple(sorted(routes, key=lambda r: r.specificity, reverse=True))


def _rest_operation(
    model: ServiceModel, record: dict[str, Any]
) -> tuple[OperationModel, dict[str, Any]] | None:
    path_segments = [s for s in record["path"].split("/") if s]
    query = dict(parse_qsl(record.get("query", ""), keep_blank_values=True))
    for route in _routes(model.service_name):
        if route.method != record["method"]:
            continue
        if any(k not in query or (v is not None and query[k] != v) for k, v in route.query):
            continue
        if any(h not in record.get("headers", {}) for h in route.headers):
            continue
        labels = _match_path(route.segments, path_segments)
        if labels is None:
            continue
        operation = model.operation_model(route.operation)
        return operation, _rest_params(operation, labels, query, record)
    return None


def _match_path(template: tuple[str, ...], path: list[str]) -> dict[str, str] | None:
    labels: dict[str, str] = {}
    for i, part in enumerate(template):
        if part.startswith("{") and part.endswith("+}"):
            rest = path[i:]
            if not rest:
                return None
            labels[part[1:-2]] = unquote("/".join(rest))
            return labels if i == len(template) - 1 else None
        if i >= len(path):
            return None
        if part.startswith("{"):
            labels[part[1:-1]] = unquote(path[i])
        elif part != path[i]:
            return None
    return labels if len(path) == len(template) else None


def _rest_params(
    operation: OperationModel,
    labels: dict[str, str],
    query: dict[str, str],
    record: dict[str, Any],
) -> dict[str, Any]:
    params: dict[str, Any] = {}
    shape = operation.input_shape
    if shape is None:
        return params
    headers = record.get("headers", {})
    body_text = record.get("body")
    body = json.loads(body_text) if body_text and body_text.lstrip().startswith("{") else {}
    for member, member_shape in shape.members.items():
        location = member_shape.serialization.get("location")
        wire = member_shape.serialization.get("name", member)
        if location == "uri" and wire in labels:
            params[member] = labels[wire]
        elif location == "querystring" and wire in query:
            params[member] = query[wire]
        elif location == "header" and wire.lower() in headers:
            params[member] = headers[wire.lower()]
        elif location is None and member in body:
            params[member] = body[member]
    if body_text and not body and "delete" in query:  # S3 DeleteObjects: the keys, from XML
        params["Delete"] = {
            "Objects": [{"Key": k} for k in re.findall(r"<Key>([^<]*)</Key>", body_text)]
        }
    return params
