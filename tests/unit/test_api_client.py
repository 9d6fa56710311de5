"""ApiClient request signing: SigV4 (service execute-api) for AWS URLs, nothing on loopback;
the wire form of a record; what a failed exchange says about its records.

Requests are built, never sent: no network.
"""

from __future__ import annotations

import http.client
import json
import re
import socket
import urllib.error

import boto3
import pytest

from shardlog.api_client import (
    ApiClient,
    encode_body,
    is_loopback,
    transport_failure,
    wire_record,
    wire_size,
)
from shardlog.outcomes import OUTCOME_UNKNOWN
from shardlog.records import ProducerRecord

AWS_URL = "https://abc123.execute-api.eu-west-1.amazonaws.com/api"


@pytest.fixture
def session() -> boto3.session.Session:
    return boto3.session.Session(
        aws_access_key_id="AKIDEXAMPLE",
        aws_secret_access_key="wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
        region_name="us-east-1",
    )


def test_aws_url_is_signed_for_execute_api_in_the_urls_region(
    session: boto3.session.Session,
) -> None:
    client = ApiClient(AWS_URL, session=session)
    request = client.prepare("POST", "/v1/records", b'{"records": []}')

    assert client.sign and client.region == "eu-west-1"
    authorization = request.get_header("Authorization")
    assert authorization is not None
    scope = re.search(r"Credential=AKIDEXAMPLE/(\d{8})/([^/]+)/([^/]+)/aws4_request", authorization)
    assert scope is not None, authorization
    assert scope.group(2, 3) == ("eu-west-1", "execute-api")
    assert authorization.startswith("AWS4-HMAC-SHA256 ")
    assert "SignedHeaders=" in authorization and "Signature=" in authorization
    assert request.get_header("X-amz-date") is not None
    assert request.full_url == AWS_URL + "/v1/records"
    assert request.get_method() == "POST"
    assert request.data == b'{"records": []}'


def test_signature_covers_the_body(session: boto3.session.Session) -> None:
    client = ApiClient(AWS_URL, session=session)
    first = client.prepare("POST", "/v1/records", b'{"records": [1]}')
    second = client.prepare("POST", "/v1/records", b'{"records": [2]}')
    assert first.get_header("Authorization") != second.get_header("Authorization")


def test_temporary_credentials_send_their_session_token() -> None:
    session = boto3.session.Session(
        aws_access_key_id="ASIAEXAMPLE",
        aws_secret_access_key="secret",
        aws_session_token="token-123",
    )
    request = ApiClient(AWS_URL, session=session).prepare("GET", "/v1/health", None)
    assert request.get_header("X-amz-security-token") == "token-123"


@pytest.mark.parametrize(
    "url", ["http://127.0.0.1:4567", "http://localhost:4567/", "http://[::1]:4567"]
)
def test_loopback_is_not_signed(url: str, session: boto3.session.Session) -> None:
    client = ApiClient(url, session=session)
    request = client.prepare("POST", "/v1/records", b"{}")
    assert is_loopback(url) and not client.sign
    assert request.get_header("Authorization") is None
    assert request.get_header("Content-type") == "application/json"


def test_sign_can_be_forced_either_way(session: boto3.session.Session) -> None:
    forced = ApiClient("http://127.0.0.1:4567", session=session, sign=True, region="us-west-2")
    authorization = forced.prepare("GET", "/v1/health", None).get_header("Authorization")
    assert authorization is not None and "/us-west-2/execute-api/" in authorization
    unsigned = ApiClient(AWS_URL, session=session, sign=False)
    assert unsigned.prepare("GET", "/v1/health", None).get_header("Authorization") is None


def test_region_falls_back_to_the_session_for_custom_domains(
    session: boto3.session.Session,
) -> None:
    client = ApiClient("https://api.example.com/shardlog", session=session)
    assert client.sign and client.region == "us-east-1"


@pytest.mark.parametrize("url", ["ftp://example.com", "example.com/v1", "http://"])
def test_non_http_urls_are_refused(url: str) -> None:
    with pytest.raises(ValueError):
        ApiClient(url)


# --- what a failed exchange says about the records -------------------------------------------


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (urllib.error.URLError(ConnectionRefusedError(111, "refused")), "EndpointConnectionError"),
        (urllib.error.URLError(socket.gaierror(-2, "no such host")), "EndpointConnectionError"),
        # Sending may have reached the API; awaiting or reading the answer certainly did.
        (urllib.error.URLError(TimeoutError("timed out")), OUTCOME_UNKNOWN),
        (http.client.RemoteDisconnected("closed"), OUTCOME_UNKNOWN),
        (ConnectionResetError(104, "reset"), OUTCOME_UNKNOWN),
        (TimeoutError("timed out"), OUTCOME_UNKNOWN),
        (http.client.IncompleteRead(b"{"), OUTCOME_UNKNOWN),
    ],
)
def test_transport_failures_are_unknown_unless_nothing_was_sent(
    error: OSError | http.client.HTTPException, code: str
) -> None:
    failure = transport_failure(error)
    assert failure.error_code == code
    assert failure.may_be_in_the_stream is (code == OUTCOME_UNKNOWN)


def test_records_go_on_the_wire_as_the_api_documents() -> None:
    record = ProducerRecord("k", b"\x00\xff", "42", "id-1")
    assert wire_record(record) == {
        "partitionKey": "k",
        "data": "AP8=",
        "explicitHashKey": "42",
        "recordId": "id-1",
    }
    assert wire_record(ProducerRecord("k", b"")) == {"partitionKey": "k", "data": ""}


@pytest.mark.parametrize(
    "record",
    [
        ProducerRecord("k", b""),
        ProducerRecord("k", b"a"),
        ProducerRecord("key", b"ab", "170141183460469231731687303715884105728"),
        ProducerRecord('quote " back \\ tab \t', b"abc", None, "p:1"),
        ProducerRecord("\u00e9\U0001f600\u65e5", b"\x00" * 1000, "0", "r" * 64),
    ],
)
def test_the_wire_size_of_a_record_is_its_size_in_the_body(record: ProducerRecord) -> None:
    alone = encode_body([record])
    assert wire_size(record) == len(alone) - len(b'{"records":[]}')
    two = encode_body([record, record])
    assert len(two) == len(b'{"records":[]}') + 2 * wire_size(record) + 1
    assert json.loads(two) == {"records": [wire_record(record)] * 2}
