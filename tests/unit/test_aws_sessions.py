"""Sessions share one loader of service models, and nothing else."""

from __future__ import annotations

from shardlog.aws import AwsConfig, Clients, new_session, shared_loader


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
