"""Make moto's DynamoDB answer GetItem and UpdateItem with DynamoDB's JSON written directly.

Every lease write, checkpoint and head read of the log is a GetItem or an UpdateItem with
``ReturnValues: ALL_NEW``: a Lambda consumer's runner sends a fenced checkpoint per batch
(50 a second at 5,000 records/s) and reads the head and its checkpoint per wake. moto
answers through its generic serializer, which walks the item against the operation's
output shape member by member: a quarter of an UpdateItem's CPU in the embedded AWS
(profiled 2026-11-27, a runner's checkpoint).

The answer moto builds is already DynamoDB's wire form (attribute values as
``{"S": ...}``, numbers as strings), except binary values, which it holds as bytes for its
serializer to encode: ``apply()`` writes that answer with ``json.dumps``, binary values in
base64, as the serializer does, with the same content type; moto's CRC32 header is computed
over this body as over the serializer's. An answer holding anything else (a date) goes to
moto's serializer as before. Errors are raised before an answer exists, so they are moto's.

tests/functional/local/test_dynamodb_answers.py holds the answers to moto's own, over HTTP,
for every attribute type and return value.
"""

from __future__ import annotations

import base64
import json
import threading
from typing import Any

from moto.dynamodb import responses as moto_responses

JSON_CONTENT_TYPE = "application/x-amz-json-1.0"  # what moto's serializer sets for DynamoDB
ANSWERED = ("get_item", "update_item")

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


def _answered_directly(method: Any) -> Any:
    def answer(self: moto_responses.DynamoHandler) -> Any:
        result = method(self)
        if not isinstance(result, moto_responses.DynamoResult):
            return result
        try:
            body = json.dumps(wire(result.result))
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
