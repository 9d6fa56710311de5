"""The system run on the stack deployed into the embedded AWS (tests/infra/conftest.py), every
resource found by the stack's outputs and every function built from its deployed
environment (shardlog.local.deployed): what AWS would run, run here.

- The demo's verification (shardlog/verify.py) against the deployed bucket and tables:
  records produced through the deployed stream and producer API, across a split of the
  deployed stream, each exactly once and each key in order.
- `shardlog smoke`'s steps (shardlog/smoke), every one of them passing.
"""

from __future__ import annotations

import base64
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from shardlog.api_client import ApiClient
from shardlog.local.demo import demo_records, reshard
from shardlog.local.deployed import DeployedRuntime
from shardlog.outcomes import PutResult
from shardlog.producer import Producer
from shardlog.reader import LogReader
from shardlog.smoke import STEPS, SmokeTest
from shardlog.smoke.counts import row_counter
from shardlog.stack import DeployedStack
from shardlog.tables import Tables
from shardlog.verify import verify_log
from tests.infra.shipped import put_foreign_records

RECORDS = 400
KEYS = 40


class GroupFunction:
    """A Lambda consumer group's function (the user's, not the stack's): notes each record."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.received: list[tuple[str, bytes]] = []

    def __call__(self, event: dict[str, Any], _context: Any) -> dict[str, Any]:
        with self.lock:
            for record in event["Records"]:
                data = base64.b64decode(record["kinesis"]["data"])
                self.received.append((record["kinesis"]["partitionKey"], data))
        return {"batchItemFailures": []}


@pytest.fixture(scope="module")
def functions(stack: DeployedStack) -> dict[str, GroupFunction]:
    return {group: GroupFunction() for group in stack.lambda_consumer_groups}


@pytest.fixture(scope="module")
def runtime(stack: DeployedStack, functions: dict[str, GroupFunction]) -> Iterator[DeployedRuntime]:
    with DeployedRuntime(stack, group_functions=functions) as running:
        # Whatever other tests put into the deployed stream is ingested first, and another
        # producer's records besides: the checks must look past them.
        put_foreign_records(stack)
        assert running.settle(timeout_s=30)
        yield running


def heads(stack: DeployedStack) -> dict[str, int]:
    config = stack.config()
    return {
        p.partition_id: p.next_seq
        for p in Tables(config.clients(), config.tables).list_partitions()
    }


def test_the_demos_verification_holds_on_the_deployed_resources(
    stack: DeployedStack, runtime: DeployedRuntime
) -> None:
    config = stack.config()
    clients = config.clients()
    start = heads(stack)
    plan = demo_records(RECORDS, KEYS)
    expected = {r.partition_key: 0 for r in plan}
    for r in plan:
        expected[r.partition_key] += 1
    producer = Producer(config.stream_name, clients)
    api = ApiClient(runtime.api_url)
    for round_, part in enumerate((plan[: RECORDS // 2], plan[RECORDS // 2 :])):
        # A key goes through one path only, so its order holds across both.
        via_api = [r for r in part if int(r.partition_key.rsplit("-", 1)[1]) % 4 == 0]
        producer.put_records([r for r in part if r not in via_api])
        assert all(isinstance(o, PutResult) for o in api.put_records(via_api))
        if round_ == 0:
            reshard(clients.kinesis, config.stream_name, "split")

    def committed() -> int:
        return sum(heads(stack).values()) - sum(start.values())

    assert runtime.run_until(lambda: committed() >= RECORDS, timeout_s=30), committed()
    runtime.sync_shards()
    partitions = Tables(clients, config.tables).list_partitions()
    result = verify_log(
        LogReader(clients, config.bucket, config.tables), partitions, expected, start
    )
    assert result.ok, result.violations
    assert result.records == RECORDS
    assert len(partitions) >= 3  # the parent and its two children


def test_the_smoke_test_passes_against_the_deployed_stack(
    stack: DeployedStack, runtime: DeployedRuntime, functions: dict[str, GroupFunction]
) -> None:
    """`shardlog smoke`'s steps against the deployed stack, with the runtime standing for AWS
    (the smoke's waits step it) and one real compaction run (local spark-submit); the row
    count through pyiceberg, as the CLI counts on the embedded AWS."""
    clients = stack.config().clients()
    smoke = SmokeTest(
        stack,
        clients,
        row_counter(stack, clients),
        api_url=runtime.api_url,
        wait=runtime.wait,
        timeout_s=120,
        poll_s=1.0,  # the runtime's pause grows to it while nothing happens
    )
    report = smoke.run()
    assert report.ok, [(r.step, r.line) for r in report.steps]
    assert [r.step for r in report.steps] == list(STEPS)
    lines = {r.step: r.line for r in report.steps}
    assert "20 rows, 20 record ids in shardlog.events (pyiceberg" in lines["athena"]
    assert "audit, invoices" in lines["lambda-consumers"]
    # What the groups' functions got: each smoke record once.
    sent = sorted(r.record.data for r in smoke.produced)
    for group, function in functions.items():
        got = [data for key, data in function.received if smoke.run_id in key]
        assert sorted(got) == sent, group
