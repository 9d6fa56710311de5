"""The producer API's OpenAPI document: title, description with the limits, servers, the
SigV4 security scheme, and the error answers of each route. Powertools generates the
document from the routes (handler.py) and these; docs/openapi.json holds it."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.event_handler import APIGatewayRestResolver
from aws_lambda_powertools.event_handler.openapi.models import (
    OpenAPI,
    SecurityScheme,
    Server,
    ServerVariable,
)
from aws_lambda_powertools.event_handler.openapi.types import OpenAPIResponse
from pydantic import TypeAdapter

from lambdas.producer_api.models import ErrorBody
from shardlog import __version__
from shardlog import constants as C
from shardlog.api_client import (
    LAMBDA_MAX_REQUEST_BYTES,
    MAX_BODY_BYTES,
    MAX_DATA_PER_REQUEST_BYTES,
)
from shardlog.idempotence import RECORD_ID_MAX_BYTES
from shardlog.outcomes import OUTCOME_UNKNOWN

DOCS_PATH = "/docs"  # Swagger UI, served by the local server only
OPENAPI_PATH = "/openapi.json"
API_TITLE = "shardlog producer API"
JSON_MEDIA_TYPE = "application/json"

API_DESCRIPTION = f"""\
Puts records on shardlog's Kinesis stream; the ingest function appends them to the S3 log
exactly once, in per-key order.

Limits:
- 1 to {C.KINESIS_MAX_RECORDS_PER_PUT} records per request;
- `partitionKey`: 1 to {C.PARTITION_KEY_MAX_CHARS} characters;
- `data` (base64): decoded data plus the UTF-8 partition key (plus the envelope of a \
`recordId`) at most {C.KINESIS_MAX_RECORD_BYTES} bytes (1 MiB) per record, else 413 naming \
`records[i].data`;
- `recordId` (optional, idempotent produce): 1 to {RECORD_ID_MAX_BYTES} characters of \
A-Z a-z 0-9 . _ : -; `resent` (optional, with `recordId`): true on a record sent again \
after an unknown outcome;
- the request body at most {MAX_BODY_BYTES} bytes, else 413 before parsing: below \
Lambda's {LAMBDA_MAX_REQUEST_BYTES}-byte request cap, so a request carries at most \
{MAX_DATA_PER_REQUEST_BYTES:,} bytes of data (base64 is 4/3 of it), less than Kinesis' \
5 MiB per call.

Every error is `{{"error", "field", "limit"}}`. A 200 can hold failed records (like
PutRecords: `failedRecordCount` > 0, those records carry `errorCode` and `errorMessage`):
send them again, in order. When provably nothing was put the answer is 429 (throttled) or
503 (unavailable) with Retry-After: send the request again. When the outcome of every
record is unknown (Kinesis' answer was lost) the answer is 502: the records may be in
the stream, so send them again only with `recordId`s and `"resent": true` (idempotent
produce: the copies are dropped at ingest).

On AWS every request must be signed with AWS Signature Version 4 (service
`execute-api`); the local server (`shardlog local up`) takes unsigned requests.
"""

SERVERS = [
    Server(
        url="https://{restApiId}.execute-api.{region}.amazonaws.com/api",
        description="On AWS: the stack's ProducerApiUrl output (SigV4-signed requests only)",
        variables={
            "restApiId": ServerVariable(default="your-api-id"),
            "region": ServerVariable(default=C.DEFAULT_REGION),
        },
    ),
    Server(url="http://127.0.0.1:4567", description="shardlog local up (unsigned)"),
]
SECURITY_SCHEMES: dict[str, SecurityScheme] = {
    "sigv4": TypeAdapter(SecurityScheme).validate_python(
        {
            "type": "apiKey",
            "in": "header",
            "name": "Authorization",
            "description": "AWS Signature Version 4, service execute-api (API Gateway IAM auth)",
            "x-amazon-apigateway-authtype": "awsSigv4",
        }
    )
}


def _error(description: str, retry_after: bool = False) -> OpenAPIResponse:
    response: OpenAPIResponse = {
        "description": description,
        "content": {JSON_MEDIA_TYPE: {"model": ErrorBody}},
    }
    if retry_after:
        response["headers"] = {
            "Retry-After": {
                "description": "Seconds to wait before sending the request again.",
                "schema": {"type": "integer", "minimum": 0},
            }
        }
    return response


RECORDS_RESPONSES: dict[int, OpenAPIResponse] = {
    200: {"description": "One result per record, in request order (some may have failed)."},
    400: _error(
        "Bad input: invalid JSON, a missing, unknown or mistyped field, an empty or too long "
        "partition key, bad base64, a bad explicitHashKey, 0 or more than 500 records."
    ),
    413: _error("The body or one record is larger than its limit."),
    415: _error("Content-Type is not application/json (charset utf-8, if given)."),
    429: _error("Kinesis throttled the whole request; nothing was put.", retry_after=True),
    500: _error("The stream refused the records (not found, no access); nothing was put."),
    502: _error(
        f"The outcome is unknown ({OUTCOME_UNKNOWN}): Kinesis' answer to every record was "
        "lost or was a server error, or the function failed. The records may be in the "
        "stream: send them again only with recordIds."
    ),
    503: _error(
        "Kinesis failed every record or could not be reached; nothing was put.",
        retry_after=True,
    ),
}
HEALTH_RESPONSES: dict[int, OpenAPIResponse] = {
    200: {"description": "The function answers."},
    500: _error("The function failed."),
}


class ProducerApiResolver(APIGatewayRestResolver):
    """Powertools' REST resolver; its OpenAPI document lists this API's 400, not the 422
    Powertools adds for validation errors (they are answered 400 here)."""

    def get_openapi_schema(self, **kwargs: Any) -> OpenAPI:  # type: ignore[override]
        schema = super().get_openapi_schema(**kwargs)
        for item in (schema.paths or {}).values():
            for method in ("get", "put", "post", "delete", "options", "head", "patch", "trace"):
                operation = getattr(item, method, None)
                if operation is not None and operation.responses:
                    operation.responses.pop(422, None)
                    operation.responses.pop("422", None)  # type: ignore[call-overload]
        if schema.components is not None and schema.components.schemas:
            for name in ("HTTPValidationError", "ValidationError", "ResponseValidationError"):
                schema.components.schemas.pop(name, None)
        return schema


def configure(app: APIGatewayRestResolver) -> None:
    app.configure_openapi(
        title=API_TITLE,
        version=__version__,
        description=API_DESCRIPTION,
        servers=SERVERS,
        security_schemes=SECURITY_SCHEMES,
        security=[{"sigv4": []}],
    )
