"""Sessions share one loader of service models, and nothing else."""

from __future__ import annotations

import inspect
from typing import Any

import pytest

from shardlog.aws import AwsConfig, Clients, new_botocore_session, new_session, shared_loader


def test_sessions_share_the_loader_but_not_credentials_or_hooks() -> None:
    first = new_session("eu-west-1", "key-one", "secret-one")
    second = new_session("us-east-1", "key-two", "secret-two")
    assert first._session.get_component("data_loader") is shared_loader()
    assert second._session.get_component("data_loader") is shared_loader()
    assert first.get_credentials().access_key == "key-one"
    assert second.get_credentials().access_key == "key-two"
    assert (first.region_name, second.region_name) == ("eu-west-1", "us-east-1")
    calls: list[str] = []
    one = Clients(first, endpoint_url="http://127.0.0.1:9")
    one.add_hook("before-call", lambda **_: calls.append("one"))
    other = Clients(second, endpoint_url="http://127.0.0.1:9")
    assert one.s3.meta.events is not other.s3.meta.events
    assert one.s3.meta.region_name == "eu-west-1"


def test_the_shared_loader_search_path_does_not_grow_with_sessions() -> None:
    new_session("us-east-1")
    paths = list(shared_loader().search_paths)
    for _ in range(20):
        Clients(config=AwsConfig(region="us-east-1")).s3  # noqa: B018
    assert shared_loader().search_paths == paths
    assert len(paths) == len(set(paths))


def test_a_new_session_has_botocores_built_in_handlers_and_its_own_registrations() -> None:
    """Sessions start from a copy of one emitter of botocore's built-in handlers: the same
    handlers, in the same order, for every built-in event; what one registers, no other
    session sees."""
    from botocore import handlers
    from botocore.session import Session

    ours = new_botocore_session()._original_handler  # type: ignore[attr-defined]
    fresh = Session()._original_handler  # type: ignore[attr-defined]
    events = {spec[0] for spec in handlers.BUILTIN_HANDLERS}
    assert len(events) > 100
    for event in events:
        assert _named(ours, event) == _named(fresh, event), event
    first, second = new_botocore_session(), new_botocore_session()
    first.register("before-send.s3.GetObject", _hook)
    assert _hook in first._original_handler._handlers.prefix_search("before-send.s3.GetObject")  # type: ignore[attr-defined]
    assert _hook not in second._original_handler._handlers.prefix_search("before-send.s3.GetObject")  # type: ignore[attr-defined]
    assert _hook not in new_botocore_session()._original_handler._handlers.prefix_search(  # type: ignore[attr-defined]
        "before-send.s3.GetObject"
    )


def _hook(**_: object) -> None:
    return None


def _named(emitter: Any, event: str) -> list[object]:
    """The handlers of ``event``, in order: a function by its name (a session's initializers,
    such as Powertools' user agent, register a closure of their own on each), anything else
    by itself."""
    return [
        (h.__module__, h.__qualname__) if inspect.isfunction(h) else h
        for h in emitter._handlers.prefix_search(event)
    ]


def test_a_built_in_handler_added_later_is_in_every_later_session(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """moto adds its stubber to botocore's built-in handlers when it is imported: a session
    made afterwards has it, as botocore's own would."""
    from botocore import handlers

    new_botocore_session()
    monkeypatch.setattr(
        handlers, "BUILTIN_HANDLERS", [*handlers.BUILTIN_HANDLERS, ("before-send", _hook)]
    )
    later = new_botocore_session()._original_handler  # type: ignore[attr-defined]
    assert _hook in later._handlers.prefix_search("before-send.s3.GetObject")


def _without_get_item(class_attributes: dict[str, Any], **_: object) -> None:
    class_attributes.pop("get_item")


def test_clients_share_their_operations_methods_and_each_session_shapes_its_own_class() -> None:
    """A client's methods are made once per service model: two sessions' clients have the
    same functions. The class is still each client's: what one session's
    ``creating-client-class`` handler takes away, the next session's client has."""
    import boto3

    endpoint = "http://127.0.0.1:9"
    first = Clients(config=AwsConfig(region="us-east-1"), endpoint_url=endpoint).dynamodb
    shaped = new_session("us-east-1")
    shaped.events.register("creating-client-class.dynamodb", _without_get_item)
    trimmed = Clients(shaped, endpoint_url=endpoint).dynamodb
    later = Clients(config=AwsConfig(region="us-east-1"), endpoint_url=endpoint).dynamodb
    assert type(first) is not type(later)
    assert type(first).query is type(later).query
    assert not hasattr(trimmed, "get_item")
    assert type(later).get_item is type(first).get_item
    assert later.meta.method_to_api_mapping["get_item"] == "GetItem"
    # A session of another loader makes its clients' methods as botocore does: anew for
    # each client.
    plain = boto3.session.Session(region_name="us-east-1")
    one, two = (plain.client("dynamodb", endpoint_url=endpoint) for _ in range(2))
    assert type(one).query is not type(two).query
    assert type(one).query is not type(first).query
