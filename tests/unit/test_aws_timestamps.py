"""The clients' timestamp parsing (shardlog.aws.parse_timestamp): the instant botocore's own
parsing gives, for every form AWS answers with and every other form botocore reads."""

from __future__ import annotations

from datetime import datetime

import pytest
from botocore.utils import parse_timestamp as botocore_parse

from shardlog.aws import Clients, new_session, parse_timestamp

FAST = [
    "2026-11-29T06:30:00.000Z",  # S3's LastModified
    "2026-11-29T06:30:00Z",
    "2026-11-29T06:30:00.123456Z",
    "2026-11-29T06:30:00.5+00:00",
    "2026-11-29T08:30:00+02:00",
    "2026-11-29T01:00:00-05:30",
    1764397800,  # epoch seconds: the JSON protocols (Kinesis's ApproximateArrivalTimestamp)
    1764397800.123,
    0,
]
BOTOCORES = [  # what the fast path leaves to botocore: the same answer
    "2026-11-29T06:30:00.123456789Z",  # more places than a datetime holds
    "Sun, 29 Nov 2026 06:30:00 GMT",  # RFC 822 (HTTP headers: S3's Last-Modified)
    "1764397800",  # epoch seconds as text
    "20261129",  # digits only: epoch seconds to botocore, a date to fromisoformat
    "2026-11-29",  # a date alone
    "2026-11-29T06:30:00",  # no zone: botocore's answer is naive
    " 2026-11-29T06:30:00Z",
]


@pytest.mark.parametrize("value", FAST + BOTOCORES)
def test_the_same_instant_as_botocores(value: object) -> None:
    ours, theirs = parse_timestamp(value), botocore_parse(value)
    assert isinstance(ours, datetime)
    assert (ours.tzinfo is None) == (theirs.tzinfo is None)
    assert ours == theirs
    assert ours.utcoffset() == theirs.utcoffset() or ours.timestamp() == theirs.timestamp()


def test_what_botocore_refuses_is_refused() -> None:
    for value in ("yesterday", "2026-13-40T00:00:00Z"):
        with pytest.raises(ValueError, match="Invalid timestamp"):
            parse_timestamp(value)


def test_every_client_of_a_session_parses_with_it() -> None:
    clients = Clients(new_session("us-east-1"), endpoint_url="http://127.0.0.1:9")
    for client in (clients.s3, clients.kinesis, clients.dynamodb):
        parser = client._endpoint._response_parser_factory.create_parser("json")
        assert parser._timestamp_parser is parse_timestamp
