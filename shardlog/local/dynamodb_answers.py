"""Make moto's DynamoDB answer the requests that return items with DynamoDB's JSON written
directly.

Every lease write, checkpoint and head read of the log is a GetItem or an UpdateItem with
``ReturnValues: ALL_NEW``: a Lambda consumer's runner sends a fenced checkpoint per batch
(50 a second at 5,000 records/s) and reads the head and its checkpoint per wake. moto
answers through its generic serializer, which walks the item against the operation's
output shape member by member: a quarter of an UpdateItem's CPU in the embedded AWS
(profiled 2026-11-27, a runner's checkpoint). The reads of many items pay it per item:
a group's leases (Query), the partitions' heads (BatchGetItem), a commit's consistent read
(TransactGetItems), the partitions table (Scan). On 2026-11-29 the serializer took 7.2 of
the 8.9 s of CPU moto's Query handler spent in tests/functional/{consumer,lambda_consumer,
ingest}, 3.6 of BatchGetItem's 4.2, 1.8 of TransactGetItems' 2.1, 1.4 of Scan's 1.8.

The answer moto builds is already DynamoDB's wire form (attribute values as
``{"S": ...}``, numbers as strings), except binary values, which it holds as bytes for its
serializer to encode, and a few keys the operation's output shape does not have (PutItem's
``ConsumedCapacityUnits``), which the serializer leaves out: ``apply()`` writes that answer
with ``json.dumps``, walking the output shape down to the attribute values as the
serializer does (keys of no member and None values left out, binary values in base64) and
each attribute value whole, with the same content type; moto's CRC32 header is computed
over this body as over the serializer's. An answer holding anything else (a date) goes to
moto's serializer as before. Errors are raised before an answer exists, so they are moto's.

tests/functional/local/test_dynamodb_answers.py holds the answers to moto's own, over HTTP,
for every attribute type, every operation above and every return value.
"""

from __future__ import annotations

import base64
import json
import threading
from typing import Any

from botocore.model import Shape
from moto.core.responses import get_service_model
from moto.dynamodb import responses as moto_responses

JSON_CONTENT_TYPE = "application/x-amz-json-1.0"  # what moto's serializer sets for DynamoDB
ANSWERED = (
    "get_item",
    "update_item",
    "put_item",
    "delete_item",
    "query",
    "scan",
    "batch_get_item",
    "transact_get_items",
)

_lock = threading.Lock()
_originals: dict[str, Any] = {}


class _NotPlain(Exception):
    """A value of the answer that only moto's serializer knows how to write."""


def wire(value: Any) -> Any:
    """The JSON value DynamoDB sends for ``value`` of moto's answer; _NotPlain else."""
    if isinstance(value, str | bool | int | float) or value is None:
        return value
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, dict):
        return {str(k): wire(v) for k, v in value.items()}
    if isinstance(value, list):
        return [wire(v) for v in value]
    raise _NotPlain(type(value).__name__)


def shaped(value: Any, shape: Shape) -> Any:
    """``value`` as the serializer writes it for ``shape``: a structure's members only,
    None left out; an attribute value (``wire``) whole, as moto holds only its types."""
    if shape.name == "AttributeValue":
        return wire(value)
    kind = shape.type_name
    if kind == "structure" and isinstance(value, dict):
        members = shape.members  # type: ignore[attr-defined]
        return {
            k: shaped(v, members[k]) for k, v in value.items() if k in members and v is not None
        }
    if kind == "map" and isinstance(value, dict):
        return {str(k): shaped(v, shape.value) for k, v in value.items()}  # type: ignore[attr-defined]
    if kind == "list" and isinstance(value, list):
        return [shaped(v, shape.member) for v in value]  # type: ignore[attr-defined]
    if kind in ("structure", "map", "list", "timestamp"):
        raise _NotPlain(f"{type(value).__name__} as {kind}")
    return wire(value)


def _answered_directly(method: Any) -> Any:
    operation = "".join(part.title() for part in method.__name__.split("_"))

    def answer(self: moto_responses.DynamoHandler) -> Any:
        result = method(self)
        if not isinstance(result, moto_responses.DynamoResult):
            return result
        output = get_service_model("dynamodb").operation_model(operation).output_shape
        try:
            body = json.dumps(shaped(result.result, output))
        except _NotPlain:
            return result
        return body, {"Content-Type": JSON_CONTENT_TYPE}

    answer.__name__ = method.__name__
    answer.__doc__ = method.__doc__
    return answer


def apply() -> None:
    """Install (idempotent)."""
    with _lock:
        if _originals:
            return
        for name in ANSWERED:
            original = getattr(moto_responses.DynamoHandler, name)
            _originals[name] = original
            setattr(moto_responses.DynamoHandler, name, _answered_directly(original))


def original(name: str) -> Any:
    """moto's own handler method (for tests that compare the answers)."""
    return _originals[name]
