"""The capacity model (scripts/capacity.py) against a local run: the requests the embedded AWS
recorded per commit agree with the model's per-commit budgets within 10%.

`make test` runs 12 shards (8 s of CPU): the model's counts are per commit, so a count one
request off per commit is off by far more than 10% at any shard count, and 12 shards make
the waker send two SendMessageBatch calls of a round. `make capacity-check` runs the 64
shards of docs/SCALE.md's table (``SHARDLOG_CAPACITY_SHARDS=64``, about 40 s of CPU).

One Lambda consumer group; a warm-up round (leases created, containers warm, the first
sweep), then rounds of a few records per shard, each committed by ingest and delivered
by the group before the next. Every request the deployed functions sign (ingest, the waker,
the group's runner, the function's Invoke) is recorded with its principal
(shardlog.local.request_log) and read back as its API call (tests/support/iam/calls.py).
Left out, as the model leaves them out of its request rates: Lambda's own pollers (Kinesis
GetRecords and GetShardIterator of the ingest mapping, the DynamoDB stream's reads of the
waker's, and ReceiveMessage of the wake queues, which the local sources poll where Lambda
long-polls); their limits are the quotas' (Kinesis reads per shard, the FIFO queue's calls).
"""

from __future__ import annotations

import math
import os
from collections import Counter
from typing import Any

from scripts import capacity as K
from shardlog.clock import ManualClock
from shardlog.lambda_consumer.settings import LambdaConsumerSettings
from shardlog.local import request_log
from shardlog.local.lambda_consumers import LocalGroup
from shardlog.local.runtime import LocalRuntime
from shardlog.shardsync import list_shards
from tests.support.iam.calls import read_call
from tests.support.runtime import e2e_runtime

SHARDS = int(os.environ.get("SHARDLOG_CAPACITY_SHARDS", "12"))
ROUNDS = 2
RECORDS_PER_SHARD = 3
POLLERS = ("kinesis:", "dynamodbstreams:", "sqs:ReceiveMessage")  # Lambda's, not the code's
TOLERANCE = 0.10


class Counted:
    """The group's function: counts the records it gets."""

    def __init__(self) -> None:
        self.records = 0

    def __call__(self, event: dict[str, Any], _context: Any) -> dict[str, Any]:
        self.records += len(event["Records"])
        return {"batchItemFailures": []}


def _produce_round(runtime: LocalRuntime, starts: list[str], round_no: int) -> None:
    kinesis = runtime.clients.kinesis
    records = [
        {"PartitionKey": f"k{i}", "Data": f"{round_no}:{i}".encode(), "ExplicitHashKey": start}
        for start in starts
        for i in range(RECORDS_PER_SHARD)
    ]
    for first in range(0, len(records), 500):
        kinesis.put_records(StreamName=runtime.config.stream_name, Records=records[first:][:500])


def _drive(runtime: LocalRuntime, function: Counted, expected: int) -> None:
    """Ingest everything, then poll the group until the function got ``expected`` records
    and nothing is left to do (bounded). Ingest first: each poll of it reads every shard."""
    assert runtime.lambda_consumers is not None
    for _ in range(20):
        if runtime.poller.poll_once() == 0 and runtime.committed_records() >= expected:
            break
    for _ in range(20 * SHARDS):
        work = runtime.lambda_consumers.poll_once()
        if function.records >= expected and work == 0:
            return
    raise AssertionError(f"the group got {function.records} of {expected} records")


def _calls(records: list[dict[str, Any]], endpoint: str) -> Counter[str]:
    host = endpoint.split("//", 1)[1]
    calls: Counter[str] = Counter()
    for record in records:
        if record.get("host") != host:
            continue
        call = read_call(record)
        name = f"{call.service}:{call.operation}"
        if not name.startswith(POLLERS):
            calls[name] += 1
    return calls


def test_requests_per_commit_agree_with_the_model_within_10_percent() -> None:
    function = Counted()
    group = LocalGroup(
        LambdaConsumerSettings(group="capacity", function_name="capacity"), function, "t:c"
    )
    runtime = e2e_runtime(
        "capacity",
        shard_count=SHARDS,
        api_port=None,
        lambda_consumers=[group],
        clock=ManualClock(),
        segment_max_records=1000,
    )
    with request_log.recording() as recording, runtime:
        starts = [
            s["HashKeyRange"]["StartingHashKey"]
            for s in list_shards(runtime.clients.kinesis, runtime.config.stream_name)
        ]
        assert len(starts) == SHARDS
        _produce_round(runtime, starts, 0)  # warm-up: leases created, containers warm
        _drive(runtime, function, SHARDS * RECORDS_PER_SHARD)
        before = len(recording.records)
        for round_no in range(1, ROUNDS + 1):
            _produce_round(runtime, starts, round_no)
            _drive(runtime, function, (round_no + 1) * SHARDS * RECORDS_PER_SHARD)
        measured = _calls(recording.records[before:], runtime.config.endpoint_url or "")
    commits = SHARDS * ROUNDS
    workload = K.Workload(SHARDS, lambda_groups=1, rate=RECORDS_PER_SHARD)
    expected = {k: v * commits for k, v in K.requests_per_commit(workload).items()}
    expected = {k: v for k, v in expected.items() if v and not k.startswith(POLLERS)}
    # The waker's sends: the stream's records of a round come in batches of up to 100, each
    # sent in SendMessageBatch calls of 10.
    expected["sqs:SendMessageBatch"] = ROUNDS * math.ceil(SHARDS / K.SEND_BATCH)
    report = "\n".join(
        f"  {name:<32} model {expected.get(name, 0):>6} measured {measured.get(name, 0):>6}"
        for name in sorted(set(expected) | set(measured))
    )
    for name, count in expected.items():
        assert abs(measured[name] - count) <= TOLERANCE * count, f"{name} off:\n{report}"
    unexpected = {name: n for name, n in measured.items() if name not in expected}
    assert sum(unexpected.values()) <= TOLERANCE * sum(expected.values()), (
        f"requests the model does not count:\n{report}"
    )
    total_model, total_measured = sum(expected.values()), sum(measured.values())
    assert abs(total_measured - total_model) <= TOLERANCE * total_model, report
    print(f"{SHARDS}-shard run, {commits} commits:\n{report}")
