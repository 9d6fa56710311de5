"""The embedded AWS's keep-alive HTTP server (shardlog.local.http_server): connections are
reused, bodies of every framing arrive whole, and a stopped server is down for pooled
clients too."""

from __future__ import annotations

import http.client
import uuid
from collections.abc import Iterator
from typing import Any

import moto.core.utils as moto_utils
import pytest
from botocore.exceptions import EndpointConnectionError
from moto.core import responses as moto_responses
from moto.dynamodb.responses import DynamoHandler
from moto.kinesis.responses import KinesisResponse
from moto.sqs.responses import SQSResponse

from shardlog.config import ShardlogConfig
from shardlog.local.http_server import KeepAliveMotoServer, remember_action_names


@pytest.fixture
def server() -> Iterator[KeepAliveMotoServer]:
    running = KeepAliveMotoServer("127.0.0.1")
    running.start()
    yield running
    running.stop()


def _clients(port: int) -> Any:
    return ShardlogConfig(endpoint_url=f"http://127.0.0.1:{port}").clients()


def _bucket(s3: Any) -> str:
    name = f"keepalive-{uuid.uuid4().hex[:10]}"
    s3.create_bucket(Bucket=name)
    return name


def test_many_calls_share_one_connection(server: KeepAliveMotoServer) -> None:
    s3 = _clients(server.port).s3
    bucket = _bucket(s3)
    for i in range(20):
        s3.put_object(Bucket=bucket, Key=f"k{i}", Body=b"x" * i)
    listed = s3.list_objects_v2(Bucket=bucket)["KeyCount"]

    assert listed == 20
    # werkzeug's server (moto's own) would have accepted 22 connections
    assert server.connections_opened == 1


def test_a_response_carries_its_length_and_keeps_the_connection(
    server: KeepAliveMotoServer,
) -> None:
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    for _ in range(3):
        # moto's dashboard page: its state dump (/moto-api/data.json) reads every attribute of
        # every model, and a Lambda function's docker client fails without Docker (500) once
        # any test of the process created a function (the deployed stack's, say).
        connection.request("GET", "/moto-api/")
        response = connection.getresponse()
        body = response.read()
        assert response.status == 200
        assert int(response.headers["Content-Length"]) == len(body)
        assert response.headers.get("Connection", "").lower() != "close"
    connection.close()
    assert server.connections_opened == 1


def test_a_chunked_body_arrives_whole_and_the_next_request_starts_clean(
    server: KeepAliveMotoServer,
) -> None:
    s3 = _clients(server.port).s3
    bucket = _bucket(s3)
    payload = b"0123456789" * 5_000
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    statuses = []
    # Two chunked PUTs on one connection (unsigned: moto accepts them).
    for key in ("first", "second"):
        connection.request(
            "PUT",
            f"/{bucket}/{key}",
            body=iter([payload[:12_345], key.encode(), payload[12_345:]]),
            encode_chunked=True,
            headers={"Transfer-Encoding": "chunked"},
        )
        response = connection.getresponse()
        response.read()
        statuses.append(response.status)
    connection.close()

    assert statuses == [200, 200]
    for key in ("first", "second"):
        stored = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
        assert stored == payload[:12_345] + key.encode() + payload[12_345:]
    assert server.connections_opened == 2  # the raw connection, then boto3's


def test_head_answers_the_length_a_get_would_have_and_no_body(
    server: KeepAliveMotoServer,
) -> None:
    s3 = _clients(server.port).s3
    bucket = _bucket(s3)
    s3.put_object(Bucket=bucket, Key="sized", Body=b"y" * 4_321)

    assert s3.head_object(Bucket=bucket, Key="sized")["ContentLength"] == 4_321
    # the connection still works: the HEAD sent no body to misread as the next response
    assert s3.get_object(Bucket=bucket, Key="sized")["Body"].read() == b"y" * 4_321


def test_a_large_body_round_trips(server: KeepAliveMotoServer) -> None:
    s3 = _clients(server.port).s3
    bucket = _bucket(s3)
    payload = bytes(range(256)) * 40_000  # 10 MiB

    s3.put_object(Bucket=bucket, Key="large", Body=payload)

    assert s3.get_object(Bucket=bucket, Key="large")["Body"].read() == payload


def test_a_stopped_server_is_down_for_pooled_connections() -> None:
    server = KeepAliveMotoServer("127.0.0.1")
    server.start()
    s3 = _clients(server.port).s3
    s3.list_buckets()  # a pooled, kept-alive connection now exists

    server.stop()

    with pytest.raises(EndpointConnectionError):
        s3.list_buckets()


def test_an_app_failure_is_a_500_and_the_connection_closes() -> None:
    def failing_app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        raise RuntimeError("boom")

    server = KeepAliveMotoServer("127.0.0.1", app=failing_app)
    server.start()
    try:
        connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
        connection.request("GET", "/")
        response = connection.getresponse()
        body = response.read()
    finally:
        server.stop()

    assert response.status == 500
    assert b"embedded AWS failed" in body
    assert response.headers["Connection"] == "close"


def test_action_names_are_moto_s_listed_once_per_class() -> None:
    remember_action_names()
    remember_action_names()  # idempotent: one cache, not a cache of a cache
    remembered = moto_responses.method_names_from_class
    assert remembered.__wrapped__ is moto_utils.method_names_from_class  # type: ignore[attr-defined]
    for cls in (DynamoHandler, KinesisResponse, SQSResponse):
        assert remembered(cls) == moto_utils.method_names_from_class(cls)
    hits = remembered.cache_info().hits  # type: ignore[attr-defined]
    remembered(DynamoHandler)
    assert remembered.cache_info().hits == hits + 1  # type: ignore[attr-defined]
