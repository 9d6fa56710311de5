"""Lost answers: a real TCP proxy on 127.0.0.1 (tests/support/proxy.py) forwards each
request whole, lets the server serve it (a PutRecords puts its records), then cuts the
connection before the answer reaches the client. Nothing may be put twice behind the
caller's back, nothing that may be in the stream is ever answered "nothing was put", and
with record ids (idempotent produce) the same record is sent again, same id."""

from __future__ import annotations

import base64
from collections import Counter
from collections.abc import Iterator
from dataclasses import replace

import pytest

from shardlog.api_client import ApiClient
from shardlog.aws import Clients, RequestCounter
from shardlog.clock import ManualClock
from shardlog.exceptions import ProducerError
from shardlog.idempotence import unwrap
from shardlog.outcomes import NOT_SENT, OUTCOME_UNKNOWN, FailureKind, PutFailure, PutResult
from shardlog.producer import Producer
from shardlog.shardsync import list_shards
from tests.support.api import ApiUnderTest, post_json, serve
from tests.support.aws import AwsEnv, stream_env
from tests.support.proxy import LossyProxy
from tests.support.readback import read_stream


@pytest.fixture
def env(endpoint_url: str) -> AwsEnv:
    return stream_env(endpoint_url)


@pytest.fixture
def proxy(env: AwsEnv) -> Iterator[LossyProxy]:
    assert env.config.endpoint_url is not None
    with LossyProxy(env.config.endpoint_url) as running:
        yield running


def proxied(env: AwsEnv, proxy: LossyProxy) -> Clients:
    """Clients of the same resources, reached through the proxy."""
    return replace(env.config, endpoint_url=proxy.url).clients()


def stored(env: AwsEnv) -> list[tuple[str | None, bytes]]:
    """(record id, payload) of every record in the stream."""
    return [unwrap(r.data) for r in read_stream(env)]


# --- the SDK Producer -------------------------------------------------------------------


def test_one_lost_answer_does_not_put_the_record_twice(
    env: AwsEnv, proxy: LossyProxy, clock: ManualClock
) -> None:
    clients = proxied(env, proxy)
    requests = RequestCounter().attach(clients)
    producer = Producer(env.config.stream_name, clients, clock=clock)
    proxy.lose_answers(1)

    with pytest.raises(ProducerError) as caught:
        producer.put_records([("k", b"once")])

    assert [r.data for r in read_stream(env)] == [b"once"]
    assert proxy.lost == 1 and requests.by_operation["kinesis.PutRecords"] == 1
    (outcome,) = caught.value.outcomes
    assert isinstance(outcome, PutFailure) and outcome.error_code == OUTCOME_UNKNOWN
    assert outcome.kind is FailureKind.UNKNOWN and outcome.may_be_in_the_stream
    assert caught.value.aws_error_code == OUTCOME_UNKNOWN
    assert clock.slept == []  # never retried


def test_an_unknown_outcome_holds_back_the_rest_without_retrying(
    env: AwsEnv, proxy: LossyProxy, clock: ManualClock
) -> None:
    producer = Producer(env.config.stream_name, proxied(env, proxy), clock=clock)
    proxy.lose_answers(1)

    outcomes = producer.try_put_records([("a", b"a0"), ("b", b"b0"), ("a", b"a1")])

    assert [o.error_code for o in outcomes if isinstance(o, PutFailure)] == [
        OUTCOME_UNKNOWN,
        OUTCOME_UNKNOWN,
        NOT_SENT,
    ]
    assert "may or may not be in the stream" in outcomes[0].error_message  # type: ignore[union-attr]
    assert sorted(r.data for r in read_stream(env)) == [b"a0", b"b0"]  # the lost call's


def test_idempotent_producer_sends_the_same_record_again_after_a_lost_answer(
    env: AwsEnv, proxy: LossyProxy, clock: ManualClock
) -> None:
    producer = Producer(env.config.stream_name, proxied(env, proxy), idempotent=True, clock=clock)
    proxy.lose_answers(1)

    results = producer.put_records([("k", b"p0"), ("k", b"p1")])

    assert len(results) == 2 and len(clock.slept) == 1
    copies = stored(env)
    assert [payload for _, payload in copies] == [b"p0", b"p0", b"p1"]
    ids = [record_id for record_id, _ in copies]
    assert ids[0] == ids[1] != ids[2]  # the copy carries the same id: ingest drops it
    assert all(i is not None and i.startswith(producer.record_ids.producer_id) for i in ids)  # type: ignore[union-attr]
    located = {(r.shard_id, r.sequence_number): unwrap(r.data)[1] for r in read_stream(env)}
    assert [located[(r.shard_id, r.sequence_number)] for r in results] == [b"p0", b"p1"]


def test_idempotent_producer_gives_up_after_max_attempts_as_unknown(
    env: AwsEnv, proxy: LossyProxy, clock: ManualClock
) -> None:
    producer = Producer(
        env.config.stream_name, proxied(env, proxy), idempotent=True, max_attempts=3, clock=clock
    )
    proxy.lose_answers(None)

    (outcome,) = producer.try_put_records([("k", b"p")])

    assert isinstance(outcome, PutFailure) and outcome.kind is FailureKind.UNKNOWN
    assert "after 3 attempts" in outcome.error_message
    copies = stored(env)
    assert len(copies) == 3 and len(set(copies)) == 1  # one record id, three copies


def test_a_refused_connection_sent_nothing_and_is_retried_then_unavailable(
    env: AwsEnv, proxy: LossyProxy, clock: ManualClock
) -> None:
    producer = Producer(env.config.stream_name, proxied(env, proxy), max_attempts=3, clock=clock)
    proxy.refuse()

    (outcome,) = producer.try_put_records([("k", b"x")])

    assert isinstance(outcome, PutFailure)
    assert (outcome.error_code, outcome.kind) == ("EndpointConnectionError", "unavailable")
    assert "not put after 3 attempts" in outcome.error_message
    assert len(clock.slept) == 2 and producer.calls == 3
    assert read_stream(env) == []


def test_calls_other_than_puts_are_still_retried_by_botocore(
    env: AwsEnv, proxy: LossyProxy
) -> None:
    clients = proxied(env, proxy)
    proxy.lose_answers(1)
    shards = list_shards(clients.kinesis, env.config.stream_name)
    assert len(shards) == 2 and proxy.lost == 1


# --- the HTTP API -----------------------------------------------------------------------


@pytest.fixture
def api_behind_lossy_kinesis(
    env: AwsEnv, proxy: LossyProxy, clock: ManualClock
) -> Iterator[ApiUnderTest]:
    yield from serve(env, clock, clients=proxied(env, proxy))


def body(*records: dict[str, str]) -> dict[str, object]:
    return {"records": list(records)}


def entry(key: str, data: bytes, **extra: str) -> dict[str, str]:
    return {"partitionKey": key, "data": base64.b64encode(data).decode(), **extra}


def test_with_every_answer_lost_the_api_answers_502_outcome_unknown(
    env: AwsEnv, proxy: LossyProxy, api_behind_lossy_kinesis: ApiUnderTest
) -> None:
    proxy.lose_answers(None)
    answer = post_json(api_behind_lossy_kinesis.url, body(entry("k", b"x")))

    assert answer.status == 502, answer.json
    assert answer.json["field"] is None and answer.json["limit"] is None
    assert "outcome is unknown" in answer.json["error"]
    assert "nothing was put" not in answer.json["error"]
    assert answer.header("Retry-After") is None
    assert [r.data for r in read_stream(env)] == [b"x"]  # sent once, never resent


def test_a_record_with_a_record_id_is_sent_again_by_the_api_after_a_lost_answer(
    env: AwsEnv, proxy: LossyProxy, api_behind_lossy_kinesis: ApiUnderTest
) -> None:
    proxy.lose_answers(1)
    answer = post_json(api_behind_lossy_kinesis.url, body(entry("k", b"x", recordId="r-1")))

    assert answer.status == 200 and answer.json["failedRecordCount"] == 0
    assert stored(env) == [("r-1", b"x"), ("r-1", b"x")]


def test_api_client_never_resends_a_request_whose_outcome_is_unknown(
    env: AwsEnv, proxy: LossyProxy, api_behind_lossy_kinesis: ApiUnderTest, clock: ManualClock
) -> None:
    proxy.lose_answers(None)
    client = ApiClient(api_behind_lossy_kinesis.url, clock=clock)

    outcomes = client.put_records([("k", b"x"), ("k", b"y")])

    assert [o.error_code for o in outcomes if isinstance(o, PutFailure)] == [
        OUTCOME_UNKNOWN,
        NOT_SENT,
    ]
    assert client.requests == api_behind_lossy_kinesis.server.requests == 1
    assert [r.data for r in read_stream(env)] == [b"x"]
    assert clock.slept == []


def test_idempotent_api_client_resends_an_unknown_request_with_the_same_ids(
    env: AwsEnv, proxy: LossyProxy, api_behind_lossy_kinesis: ApiUnderTest
) -> None:
    proxy.lose_answers(None)
    client_clock = ManualClock()
    client = ApiClient(
        api_behind_lossy_kinesis.url, idempotent=True, max_attempts=2, clock=client_clock
    )

    (outcome,) = client.put_records([("k", b"x")])

    assert isinstance(outcome, PutFailure) and outcome.kind is FailureKind.UNKNOWN
    assert "(2 requests)" in outcome.error_message
    assert client.requests == 2 and client_clock.slept == [1.0]
    copies = stored(env)  # 2 requests, each tried max_attempts (5) times by the API
    assert len(copies) == 10 and len(set(copies)) == 1 and copies[0][0] is not None


def test_idempotent_api_client_resends_after_losing_the_apis_answer(
    env: AwsEnv, endpoint_url: str, clock: ManualClock
) -> None:
    for api in serve(env, clock):
        with LossyProxy(api.url) as in_front:
            in_front.lose_answers(1)
            plain = ApiClient(in_front.url, clock=clock)
            (unknown,) = plain.put_records([("k", b"plain")])
            in_front.lose_answers(1)
            idempotent = ApiClient(in_front.url, idempotent=True, clock=clock)
            (put,) = idempotent.put_records([("k", b"idempotent")])

    assert isinstance(unknown, PutFailure) and unknown.error_code == OUTCOME_UNKNOWN
    assert plain.requests == 1
    assert isinstance(put, PutResult) and idempotent.requests == 2
    counts = Counter(stored(env))
    assert counts[(None, b"plain")] == 1
    assert [n for (i, p), n in counts.items() if p == b"idempotent" and i] == [2]


def test_api_client_retries_a_refused_connection_then_answers_unavailable(
    env: AwsEnv, proxy: LossyProxy, clock: ManualClock
) -> None:
    proxy.refuse()
    client = ApiClient(proxy.url, max_attempts=3, clock=clock)

    outcomes = client.put_records([("k", b"x"), ("k", b"y")])

    assert all(isinstance(o, PutFailure) for o in outcomes)
    assert {(o.error_code, o.kind) for o in outcomes} == {  # type: ignore[union-attr]
        ("EndpointConnectionError", FailureKind.UNAVAILABLE)
    }
    assert "(3 requests)" in outcomes[0].error_message  # type: ignore[union-attr]
    assert client.requests == 3 and clock.slept == [1.0, 1.0]
