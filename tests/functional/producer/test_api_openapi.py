"""docs/openapi.json: generated from the routes, kept in sync, served with Swagger UI."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lambdas.producer_api.handler import openapi_json
from scripts.openapi import main as openapi_main
from shardlog import constants as C
from shardlog.api_client import (
    LAMBDA_MAX_REQUEST_BYTES,
    MAX_BODY_BYTES,
    MAX_DATA_PER_REQUEST_BYTES,
)
from shardlog.clock import ManualClock
from shardlog.idempotence import RECORD_ID_MAX_BYTES, RECORD_ID_PATTERN, wrap
from tests.support import DOCS
from tests.support.api import ApiUnderTest, send, serve
from tests.support.aws import stream_env

DOC = DOCS / "openapi.json"


@pytest.fixture(scope="module")
def spec() -> dict[str, Any]:
    return dict(json.loads(DOC.read_text()))


@pytest.fixture
def served(endpoint_url: str) -> Iterator[ApiUnderTest]:
    yield from serve(stream_env(endpoint_url), ManualClock(), serve_docs=True)


def test_checked_in_document_is_what_the_routes_generate() -> None:
    assert DOC.read_text() == openapi_json(), (
        "docs/openapi.json is stale: run .venv/bin/python -m scripts.openapi"
    )
    assert openapi_main(["--check", str(DOC)]) == 0


def test_check_mode_fails_on_a_stale_document(tmp_path: Path) -> None:
    stale = tmp_path / "openapi.json"
    stale.write_text(DOC.read_text().replace("1 to 500 records", "1 to 400 records"))
    assert openapi_main(["--check", str(stale)]) == 1
    assert openapi_main([str(stale)]) == 0
    assert stale.read_text() == DOC.read_text()


def test_document_declares_every_answer_with_the_error_shape(spec: dict[str, Any]) -> None:
    post = spec["paths"]["/v1/records"]["post"]
    assert set(post["responses"]) == {"200", "400", "413", "415", "429", "500", "502", "503"}
    for status in ("400", "413", "415", "429", "500", "502", "503"):
        schema = post["responses"][status]["content"]["application/json"]["schema"]
        assert schema == {"$ref": "#/components/schemas/ErrorBody"}
    for status in ("429", "503"):
        assert "Retry-After" in post["responses"][status]["headers"]
    assert "headers" not in post["responses"]["502"]  # unknown: never "send it again later"
    assert "OutcomeUnknown" in post["responses"]["502"]["description"]
    error = spec["components"]["schemas"]["ErrorBody"]
    assert set(error["required"]) == {"error", "field", "limit"}
    assert error["additionalProperties"] is False
    assert "422" not in json.dumps(spec["paths"])
    assert "HTTPValidationError" not in spec["components"]["schemas"]


def test_document_states_the_kinesis_limits_from_the_constants(spec: dict[str, Any]) -> None:
    schemas = spec["components"]["schemas"]
    records = schemas["PutRecordsRequest"]["properties"]["records"]
    assert (records["minItems"], records["maxItems"]) == (1, C.KINESIS_MAX_RECORDS_PER_PUT)
    assert schemas["PutRecordsRequest"]["additionalProperties"] is False
    entry = schemas["RecordIn"]
    assert entry["additionalProperties"] is False
    assert entry["required"] == ["partitionKey", "data"]
    key = entry["properties"]["partitionKey"]
    assert (key["minLength"], key["maxLength"]) == (1, C.PARTITION_KEY_MAX_CHARS)
    record_id = entry["properties"]["recordId"]
    assert (record_id["minLength"], record_id["maxLength"]) == (1, RECORD_ID_MAX_BYTES)
    assert record_id["pattern"] == RECORD_ID_PATTERN
    assert str(C.KINESIS_MAX_RECORD_BYTES) in entry["properties"]["data"]["description"]
    assert str(C.KINESIS_MAX_RECORD_BYTES) in spec["info"]["description"]
    assert str(MAX_BODY_BYTES) in spec["info"]["description"]
    assert f"{MAX_DATA_PER_REQUEST_BYTES:,}" in spec["info"]["description"]
    assert spec["components"]["securitySchemes"]["sigv4"]["x-amazon-apigateway-authtype"] == (
        "awsSigv4"
    )


def test_the_local_server_serves_the_document_and_swagger_ui(served: ApiUnderTest) -> None:
    document = send(served.url, "GET", "/openapi.json")
    assert document.status == 200
    assert document.header("Content-Type") == "application/json"
    assert document.body.decode() == DOC.read_text()

    page = send(served.url, "GET", "/docs")
    assert page.status == 200
    assert page.header("Content-Type") == "text/html"
    html = page.body.decode()
    assert "SwaggerUIBundle" in html and "shardlog producer API" in html
    assert "/v1/records" in html


def test_docs_routes_exist_only_on_the_local_server(endpoint_url: str) -> None:
    for api in serve(stream_env(endpoint_url), ManualClock(), serve_docs=False):
        assert send(api.url, "GET", "/docs").status == 404
        assert send(api.url, "GET", "/openapi.json").status == 404


def test_the_documents_state_the_body_limit_the_real_maximum_and_the_envelope() -> None:
    api_doc = (DOCS / "API.md").read_text()  # the one document that states them
    assert f"{MAX_BODY_BYTES:,} bytes" in api_doc
    assert f"{MAX_DATA_PER_REQUEST_BYTES:,} bytes" in api_doc
    assert f"{LAMBDA_MAX_REQUEST_BYTES:,} bytes" in api_doc
    assert f"{LAMBDA_MAX_REQUEST_BYTES - MAX_BODY_BYTES:,}" in api_doc  # the headroom
    example = wrap("p:7", b"hello")
    assert " ".join(f"{b:02X}" for b in example[:9]) in api_doc  # the envelope's example
    assert "## Idempotent produce" in api_doc and "FORMAT.md" in api_doc
