"""The embedded AWS's Glue is an optimistic lock on each table, as Glue is: GetTable's
VersionId changes on each UpdateTable, and an UpdateTable naming a version that is no
longer current is refused (ConcurrentModificationException), over HTTP through boto3."""

from __future__ import annotations

import contextlib
import threading
import uuid
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from shardlog.local.glue_fidelity import REFUSED_MESSAGE
from tests.support.faults import LostAnswer

DATABASE = f"fidelity_{uuid.uuid4().hex[:8]}"


@pytest.fixture
def glue(endpoint_url: str) -> Any:
    client = boto3.client("glue", region_name="us-east-1", endpoint_url=endpoint_url)
    with contextlib.suppress(client.exceptions.AlreadyExistsException):
        client.create_database(DatabaseInput={"Name": DATABASE})
    return client


def table_input(name: str, location: str) -> dict[str, Any]:
    return {"Name": name, "Parameters": {"metadata_location": location}}


@pytest.fixture
def table(glue: Any) -> str:
    name = f"t_{uuid.uuid4().hex[:8]}"
    glue.create_table(DatabaseName=DATABASE, TableInput=table_input(name, "m0"))
    return name


def read(glue: Any, name: str) -> tuple[str, str]:
    """(VersionId, the table's metadata location)."""
    found = glue.get_table(DatabaseName=DATABASE, Name=name)["Table"]
    return found["VersionId"], found["Parameters"]["metadata_location"]


def update(glue: Any, name: str, location: str, version: str | None) -> None:
    extra = {} if version is None else {"VersionId": version}
    glue.update_table(DatabaseName=DATABASE, TableInput=table_input(name, location), **extra)


def test_the_version_id_changes_on_each_update(glue: Any, table: str) -> None:
    seen = [read(glue, table)[0]]
    for step in range(1, 4):
        update(glue, table, f"m{step}", seen[-1])
        version, location = read(glue, table)
        assert location == f"m{step}" and version not in seen
        seen.append(version)


def test_an_update_from_a_stale_version_is_refused_and_changes_nothing(
    glue: Any, table: str
) -> None:
    stale, _ = read(glue, table)
    update(glue, table, "m1", stale)  # another writer, from the same version, first
    current = read(glue, table)
    with pytest.raises(ClientError) as refused:
        update(glue, table, "m2", stale)
    error = refused.value.response["Error"]
    assert error["Code"] == "ConcurrentModificationException"
    assert REFUSED_MESSAGE in error["Message"] and f"not {stale}" in error["Message"]
    assert isinstance(refused.value, glue.exceptions.ConcurrentModificationException)
    assert read(glue, table) == current  # nothing changed


def test_an_update_without_a_version_is_applied(glue: Any, table: str) -> None:
    before, _ = read(glue, table)
    update(glue, table, "m9", None)
    version, location = read(glue, table)
    assert location == "m9" and version != before


def test_a_resend_of_an_applied_update_is_refused(glue: Any, table: str) -> None:
    """Glue applies an UpdateTable, its answer is lost, botocore resends the very same
    request: the resend names a version that is no longer current, so it is refused. The
    caller sees a refusal for an update that landed."""
    version, _ = read(glue, table)
    lost = LostAnswer(glue, "UpdateTable")
    lost.arm(1)
    with pytest.raises(glue.exceptions.ConcurrentModificationException):
        update(glue, table, "m1", version)
    assert (lost.lost, lost.resent) == (1, 1)
    assert read(glue, table)[1] == "m1"  # it landed all the same


def test_concurrent_updates_from_one_version_have_exactly_one_winner(
    glue: Any, table: str, endpoint_url: str
) -> None:
    for round_number in range(10):
        version, _ = read(glue, table)
        winners: list[str] = []
        barrier = threading.Barrier(4)

        threads = [
            threading.Thread(
                target=commit_from,
                args=(endpoint_url, table, f"r{round_number}w{w}", version, barrier, winners),
            )
            for w in range(4)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        assert len(winners) == 1, f"round {round_number}: {winners}"
        assert read(glue, table)[1] == winners[0]


def commit_from(
    endpoint_url: str,
    table: str,
    location: str,
    version: str,
    barrier: threading.Barrier,
    winners: list[str],
) -> None:
    """One writer (a client of its own): update from ``version`` once all are ready."""
    client = boto3.client("glue", region_name="us-east-1", endpoint_url=endpoint_url)
    barrier.wait(timeout=30)
    with contextlib.suppress(client.exceptions.ConcurrentModificationException):
        update(client, table, location, version)
        winners.append(location)
