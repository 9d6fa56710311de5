"""The API's one error shape (``HttpError``), and the checks before and around Powertools'
parsing.

``precheck`` refuses a wrong media type (415) or a body over ``MAX_BODY_BYTES`` (413)
before anything parses the body; ``validation_error`` turns Powertools' validation errors
(its default is a 422) into this API's 400 naming the field.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping
from typing import Any

from aws_lambda_powertools.event_handler import Response, content_types
from aws_lambda_powertools.event_handler.openapi.exceptions import RequestValidationError

from lambdas.producer_api.spec import JSON_MEDIA_TYPE
from shardlog.api_client import MAX_BODY_BYTES, RECORDS_PATH


class HttpError(Exception):
    """An answer other than 200, in the API's error shape ``{"error", "field", "limit"}``."""

    def __init__(
        self,
        status: int,
        error: str,
        *,
        field: str | None = None,
        limit: int | str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(error)
        self.status = status
        self.error = error
        self.field = field
        self.limit = limit
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        return {"error": self.error, "field": self.field, "limit": json_safe_limit(self.limit)}


def json_safe_limit(limit: Any) -> int | str | None:
    """Limits as JSON numbers a JavaScript client reads exactly, else as strings."""
    if limit is None or isinstance(limit, str):
        return limit
    if isinstance(limit, int) and not isinstance(limit, bool) and abs(limit) < 2**53:
        return limit
    return str(limit)


def error_response(error: HttpError) -> Response:
    return Response(
        status_code=error.status,
        content_type=content_types.APPLICATION_JSON,
        body=error.body(),
        headers=error.headers,
    )


def precheck(event: Mapping[str, Any]) -> HttpError | None:
    """Refuse a POST /v1/records by media type and size before anything parses the body."""
    if event.get("httpMethod") != "POST" or event.get("path") != RECORDS_PATH:
        return None
    headers = {str(k).lower(): str(v) for k, v in (event.get("headers") or {}).items()}
    media_type = headers.get("content-type", "")
    kind, _, params = media_type.partition(";")
    charset = ""
    for param in params.split(";"):
        name, _, value = param.partition("=")
        if name.strip().lower() == "charset":
            charset = value.strip().strip('"').lower()
    if kind.strip().lower() != JSON_MEDIA_TYPE or charset not in ("", "utf-8"):
        return HttpError(
            415,
            f"Content-Type must be application/json, got {media_type or 'none'!r}",
            field="Content-Type",
            limit=JSON_MEDIA_TYPE,
        )
    body = event.get("body") or ""
    if event.get("isBase64Encoded"):
        try:
            raw = base64.b64decode(body, validate=True)
        except (binascii.Error, ValueError):
            return HttpError(400, "body: invalid base64 transfer encoding", field="body")
    else:
        raw = body.encode("utf-8", "surrogatepass")
    if len(raw) > MAX_BODY_BYTES:
        return HttpError(
            413,
            f"body: {len(raw)} bytes, at most {MAX_BODY_BYTES} (below Lambda's 6 MiB request cap)",
            field="body",
            limit=MAX_BODY_BYTES,
        )
    if event.get("isBase64Encoded"):
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError:
            return HttpError(400, "body: JSON must be UTF-8", field="body")
    return None


def with_canonical_media_type(event: dict[str, Any]) -> dict[str, Any]:
    """The event with a JSON Content-Type spelled as Powertools matches it (media types are
    case-insensitive; Powertools compares them as written)."""
    if event.get("httpMethod") != "POST" or event.get("path") != RECORDS_PATH:
        return event
    event = dict(event)
    for key in ("headers", "multiValueHeaders"):
        headers = event.get(key)
        if headers:
            event[key] = {
                name: value
                for name, value in headers.items()
                if str(name).lower() != "content-type"
            }
            canonical = [JSON_MEDIA_TYPE] if key == "multiValueHeaders" else JSON_MEDIA_TYPE
            event[key]["Content-Type"] = canonical
    return event


def proxy_response(error: HttpError) -> dict[str, Any]:
    """An API Gateway proxy response for an error found before the resolver ran."""
    headers = {"Content-Type": content_types.APPLICATION_JSON, **error.headers}
    return {
        "statusCode": error.status,
        "multiValueHeaders": {name: [value] for name, value in headers.items()},
        "body": json.dumps(error.body(), separators=(",", ":")),
        "isBase64Encoded": False,
    }


def _field_of(loc: tuple[Any, ...] | list[Any]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


_VALIDATION_REASONS = {
    "missing": "required",
    "extra_forbidden": "unknown field",
    "string_type": "must be a string",
    "list_type": "must be an array",
    "model_attributes_type": "must be a JSON object",
    "model_type": "must be a JSON object",
    "dict_type": "must be a JSON object",
}


def validation_error(exc: RequestValidationError) -> HttpError:
    """Powertools' validation error (its default is 422) as this API's 400."""
    errors = list(exc.errors())
    if not errors:
        return HttpError(400, "body: invalid request", field="body")
    first = errors[0]
    if first.get("type") == "json_invalid":
        detail = (first.get("ctx") or {}).get("error", "")
        return HttpError(400, f"body: invalid JSON ({detail})".replace(" ()", ""), field="body")
    loc = list(first.get("loc") or ())
    if loc[:1] == ["body"]:
        loc = loc[1:]
    field = _field_of(loc) or "body"
    reason = _VALIDATION_REASONS.get(str(first.get("type")), str(first.get("msg", "invalid")))
    if field == "body" and first.get("type") == "missing":
        reason = "required (a JSON object)"
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return HttpError(400, f"{field}: {reason}{more}", field=field)
