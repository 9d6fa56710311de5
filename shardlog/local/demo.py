"""`shardlog demo`: the whole system on the embedded AWS, verified end to end."""

from __future__ import annotations

import base64
import itertools
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from shardlog import constants as C
from shardlog.api_client import ApiClient
from shardlog.config import ShardlogConfig
from shardlog.lambda_consumer.settings import LambdaConsumerSettings
from shardlog.local.lambda_consumers import LocalGroup
from shardlog.local.poller import EventSourceSettings
from shardlog.local.runtime import LocalRuntime
from shardlog.outcomes import PutFailure
from shardlog.producer import Producer
from shardlog.reader import LogReader
from shardlog.records import ProducerRecord
from shardlog.shardsync import list_shards
from shardlog.tables import Tables
from shardlog.verify import Verification, verify_log


@dataclass
class DemoReport:
    records: int
    keys: int
    segments: int
    partitions: int
    ingest_requests: int
    elapsed_s: float
    violations: list[str]
    via_api: int = 0  # records put through the producer HTTP API (the rest: the SDK)
    lambda_consumer_records: int = 0  # delivered to the demo's Lambda consumer group
    analytics: dict[str, Any] | None = None  # the Spark analytics summary (demo --spark)

    @property
    def ok(self) -> bool:
        return not self.violations

    @property
    def requests_per_1000(self) -> float:
        return 1000 * self.ingest_requests / max(self.records, 1)

    @property
    def records_per_s(self) -> float:
        return self.records / self.elapsed_s if self.elapsed_s else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "records": self.records,
            "keys": self.keys,
            "partitions": self.partitions,
            "segments": self.segments,
            "ingestRequests": self.ingest_requests,
            "awsRequestsPer1000Records": round(self.requests_per_1000, 2),
            "elapsedSeconds": round(self.elapsed_s, 2),
            "recordsPerSecond": round(self.records_per_s, 1),
            "violations": self.violations,
            "recordsViaApi": self.via_api,
            "lambdaConsumerRecords": self.lambda_consumer_records,
            "analytics": self.analytics,
        }


# The demo's typed lake table (docs/LAKE.md): its records' payloads, typed. A few records do
# not fit it on purpose (``malformed``): they land in its dead-letter table.
DEMO_TABLE = "demo_records"
DEMO_LAKE_TABLES = [
    {
        "name": DEMO_TABLE,
        "schema": {
            "type": "object",
            "required": ["k", "n", "i"],
            "properties": {
                "k": {"type": "string"},
                "n": {"type": "integer", "minimum": 0},
                "i": {"type": "integer", "minimum": 0},
            },
        },
    }
]
MALFORMED_EVERY = 997  # record i with i % MALFORMED_EVERY == MALFORMED_EVERY - 1


def malformed(i: int) -> tuple[str, str] | None:
    """How record i is malformed for the typed table on purpose, if it is: (the field
    refused, the extra payload): a wrong type, a required field missing, out of range."""
    if i % MALFORMED_EVERY != MALFORMED_EVERY - 1:
        return None
    return [("i", "wrong type"), ("i", "missing"), ("i", "below minimum")][
        (i // MALFORMED_EVERY) % 3
    ]


def demo_records(records: int, keys: int) -> list[ProducerRecord]:
    """Record i goes to key i % keys; its data names the key and its per-key counter (and
    its index i, except in the few ``malformed`` records)."""
    counters = [0] * keys
    out = []
    for i in range(records):
        k = i % keys
        body: dict[str, Any] = {"k": f"key-{k:05d}", "n": counters[k], "i": i}
        kind = malformed(i)
        if kind is not None:
            body = {**body, "i": {"wrong type": f"i-{i}", "below minimum": -i}.get(kind[1])}
            if kind[1] == "missing":
                del body["i"]
        out.append(ProducerRecord(f"key-{k:05d}", json.dumps(body).encode()))
        counters[k] += 1
    return out


def reshard(kinesis: Any, stream: str, step: str) -> str:
    """Split the first open shard of ``stream``, or merge the last two adjacent open shards
    (``kinesis``: a boto3 Kinesis client)."""
    shards = [
        s
        for s in list_shards(kinesis, stream)
        if "EndingSequenceNumber" not in s["SequenceNumberRange"]
    ]
    shards.sort(key=lambda s: int(s["HashKeyRange"]["StartingHashKey"]))
    if step == "split":
        target = shards[0]
        low = int(target["HashKeyRange"]["StartingHashKey"])
        high = int(target["HashKeyRange"]["EndingHashKey"])
        kinesis.split_shard(
            StreamName=stream,
            ShardToSplit=target["ShardId"],
            NewStartingHashKey=str((low + high) // 2 + 1),
        )
        return f"split {target['ShardId']}"
    # Merge the last adjacent pair, so the merge does not just undo the split.
    for left, right in reversed(list(itertools.pairwise(shards))):
        if int(left["HashKeyRange"]["EndingHashKey"]) + 1 == int(
            right["HashKeyRange"]["StartingHashKey"]
        ):
            kinesis.merge_shards(
                StreamName=stream,
                ShardToMerge=left["ShardId"],
                AdjacentShardToMerge=right["ShardId"],
            )
            return f"merged {left['ShardId']} + {right['ShardId']}"
    raise RuntimeError("no adjacent open shards to merge")


def run_demo(
    *,
    records: int = 20_000,
    keys: int = 1_000,
    shards: int = 4,
    segment_max_records: int = C.DEFAULT_SEGMENT_MAX_RECORDS,
    timeout_s: float = 300.0,
    progress: Callable[[int], None] | None = None,
    log: Callable[[str], None] = lambda _msg: None,
    spark: bool = False,
) -> DemoReport:
    started = time.monotonic()
    plan = demo_records(records, keys)
    expected = {r.partition_key: 0 for r in plan}
    for r in plan:
        expected[r.partition_key] += 1
    consumer = DemoLambdaConsumer()
    runtime = LocalRuntime(
        ShardlogConfig(extra={C.LOCAL_STATE_LAKE_TABLES: DEMO_LAKE_TABLES}),
        shard_count=shards,
        segment_max_records=segment_max_records,
        event_source=EventSourceSettings(batching_window_ms=250),
        lambda_consumers=[consumer.group()],
    )
    with runtime:
        log(f"embedded AWS at {runtime.config.endpoint_url}, {shards} shards")
        runtime.run_in_background()
        producer = Producer(runtime.config.stream_name, runtime.clients)
        api = ApiClient(runtime.config.extra["apiUrl"])
        api_failures: list[str] = []
        chunk = max(1, records // 20)
        reshard_at = {records // 3: "split", (2 * records) // 3: "merge"}
        for start in range(0, records, chunk):
            for point, step in reshard_at.items():
                if start <= point < start + chunk:
                    log(
                        reshard(runtime.clients.kinesis, runtime.config.stream_name, step)
                        + " while producing"
                    )
            # A key goes through one path only, so its order holds across both.
            part = plan[start : start + chunk]
            via_api = [r for r in part if _via_api(r.partition_key)]
            producer.put_records(
                [r for r in part if not _via_api(r.partition_key)], on_progress=progress
            )
            results = api.put_records(via_api)
            api_failures += [str(r) for r in results if isinstance(r, PutFailure)]
            if progress:
                progress(len(via_api))
        caught_up = runtime.wait_until(lambda: runtime.committed_records() >= records, timeout_s)
        ended = runtime.wait_until(lambda: _closed_all_ended(runtime), 30)
        report = _verify(runtime, records, expected)
        if not caught_up:
            report.violations.append(
                f"ingest did not catch up in {timeout_s}s: "
                f"{runtime.committed_records()} of {records} committed"
            )
        if not ended:
            report.violations.append("closed partitions did not reach ENDED")
        report.violations += [f"the API did not put a record: {f}" for f in api_failures[:20]]
        delivered = runtime.wait_until(lambda: consumer.records >= records, timeout_s)
        log(f"Lambda consumer group {DEMO_GROUP!r} got {consumer.records} records")
        if not delivered:
            report.violations.append(
                f"the Lambda consumer group got {consumer.records} of {records} records"
            )
        report.violations += consumer.violations(expected)
        analytics = None
        elapsed_s = time.monotonic() - started  # the Spark jobs are timed apart (log)
        if spark:  # compaction, then analytics: StartJobRun on the embedded EMR Serverless
            from shardlog.local.spark import run_jobs_and_verify

            analytics, spark_violations = run_jobs_and_verify(
                runtime.clients, runtime.config, log=log
            )
            report.violations += spark_violations
            report.violations += _typed_violations(analytics, records)
        return DemoReport(
            records=records,
            keys=keys,
            segments=report.segments,
            partitions=report.partitions,
            ingest_requests=runtime.ingest_requests.total,
            elapsed_s=elapsed_s,
            violations=report.violations,
            via_api=sum(_via_api(r.partition_key) for r in plan),
            lambda_consumer_records=consumer.records,
            analytics=analytics,
        )


DEMO_GROUP = "demo-lambda"


class DemoLambdaConsumer:
    """The demo's Lambda consumer group: a function that notes each record's key and per-key
    counter, so the demo checks it got every record once, each key in produce order."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.seen: dict[str, list[int]] = {}
        self.records = 0

    def group(self) -> LocalGroup:
        settings = LambdaConsumerSettings(group=DEMO_GROUP, function_name="demo", batch_size=500)
        return LocalGroup(settings, self.handle, "shardlog.local.demo:DemoLambdaConsumer.handle")

    def handle(self, event: dict[str, Any], _context: Any) -> dict[str, Any]:
        with self.lock:
            for record in event["Records"]:
                body = json.loads(base64.b64decode(record["kinesis"]["data"]))
                self.seen.setdefault(body["k"], []).append(body["n"])
                self.records += 1
        return {"batchItemFailures": []}

    def violations(self, expected: dict[str, int]) -> list[str]:
        wrong = [
            f"Lambda consumer: key {key} got {self.seen.get(key, [])[:5]}..., "
            f"expected 0..{count - 1} in order"
            for key, count in expected.items()
            if self.seen.get(key, []) != list(range(count))
        ]
        return wrong[:20]


def _typed_violations(analytics: dict[str, Any], records: int) -> list[str]:
    """The demo's typed table refused exactly the records malformed on purpose, each for
    its field (the rest of the check, every record once, is ``verify_typed``'s)."""
    typed = {t["table"].rsplit(".", 1)[1]: t for t in analytics.get("lake", {}).get("typed", [])}
    table = typed.get(DEMO_TABLE)
    if table is None:
        return [f"no typed table {DEMO_TABLE} after compaction"]
    expected = sum(malformed(i) is not None for i in range(records))
    problems = []
    if (table["rows"], table["rejected"]) != (records - expected, expected):
        problems.append(
            f"{DEMO_TABLE}: {table['rows']} typed and {table['rejected']} rejected, expected "
            f"{records - expected} and the {expected} malformed on purpose"
        )
    problems += [
        f"{DEMO_TABLE}: unexpected refusal {r}" for r in table["refusals"] if r[:3] != "i: "
    ]
    return problems


def _via_api(partition_key: str) -> bool:
    """Keys key-00000, key-00004, ...: a quarter of the keys go through the HTTP API."""
    return int(partition_key.rsplit("-", 1)[1]) % 4 == 0


def _closed_all_ended(runtime: LocalRuntime) -> bool:
    runtime.shard_sync.sync()
    partitions = Tables(runtime.clients, runtime.config.tables).list_partitions()
    return all(p.state != C.STATE_CLOSED for p in partitions)


def _verify(runtime: LocalRuntime, records: int, expected: dict[str, int]) -> Verification:
    runtime.shard_sync.sync()
    partitions = Tables(runtime.clients, runtime.config.tables).list_partitions()
    reader = LogReader(runtime.clients, runtime.config.bucket, runtime.config.tables)
    return verify_log(reader, partitions, expected)
