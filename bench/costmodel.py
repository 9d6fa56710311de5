"""Turn measured usage into dollars per million records, with the prices of bench.pricing.

The benchmarks measure what a workload sends (requests by operation, DynamoDB items and
sizes, Lambda invocations and their CPU time); this module only applies AWS's billing
rules to those measurements:

- DynamoDB on-demand: a write is one WRU per started KB of the item, a transactional
  write two; a strongly consistent read one RRU per started 4 KB, an eventually
  consistent read half that, a transactional read two; Scan and Query by the size read.
- S3: PUT, COPY, POST and LIST requests at one price, GET and HEAD at another.
- Lambda: each request, plus GB-seconds of billed duration (rounded up to 1 ms).
- SQS FIFO: each request (every 64 KB chunk).
- Kinesis provisioned: the shard-hour shared by the shard's records, plus one PUT payload
  unit per started 25 KB of each record; on-demand: GB in (and out, per consumer), each
  record rounded up to 1 KB, plus the stream-hour.
- Kinesis enhanced fan-out (the ingest mapping with ``shardlog:ingestFanOut``): the
  consumer-shard-hour shared by the shard's records, plus GB retrieved.
- Firehose Direct PUT: GB in, each record rounded up to 5 KB, plus the S3 PUT of each
  delivered object.
- EMR Serverless: vCPU-hours and GB-hours.

What is not a price or a measurement is a named parameter here with its reason. Pure and
stdlib-only: nothing here imports boto3 or calls AWS.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from bench.pricing import GB, KB, PriceTable
from shardlog.dal import TRANSACTIONAL_READ, TRANSACTIONAL_WRITE

MILLION = 1_000_000
# Lambda gives a function one full vCPU at 1,769 MB, proportionally less below: CPU time
# measured on a full core takes this many times longer at ``memory_mb``.
LAMBDA_FULL_VCPU_MB = 1_769
# A Lambda's wall time is its CPU time plus its waits on AWS: this much per request is
# the allowance for one in-region DynamoDB or S3 round trip (a parameter, not a price).
DEFAULT_AWS_REQUEST_MS = 10.0
# Lambda's synchronous invocation payload limit caps a Kinesis batch (the event carries
# each record's data in base64).
LAMBDA_PAYLOAD_BYTES = 6 * 1024 * 1024
KINESIS_EVENT_RECORD_OVERHEAD_BYTES = 400  # the event's per-record JSON around the data

S3_PUT_CLASS = frozenset(
    {
        "PutObject",
        "CopyObject",
        "PostObject",
        "ListObjects",
        "ListObjectsV2",
        "CreateMultipartUpload",
        "UploadPart",
        "CompleteMultipartUpload",
    }
)
S3_GET_CLASS = frozenset({"GetObject", "HeadObject"})


# --- DynamoDB units --------------------------------------------------------------------------
def write_units(item_bytes: int, *, transactional: bool = False) -> int:
    """WRUs of writing one item: one per started KB, doubled in a transaction."""
    units = max(1, math.ceil(item_bytes / KB))
    return 2 * units if transactional else units


def read_units(item_bytes: int, *, consistent: bool, transactional: bool = False) -> float:
    """RRUs of reading one item (or bytes of a Scan): per started 4 KB."""
    steps = max(1, math.ceil(item_bytes / (4 * KB)))
    if transactional:
        return 2.0 * steps
    return float(steps) if consistent else steps / 2


def _number_size(digits: str) -> int:
    significant = digits.lstrip("-").replace(".", "").strip("0") or "0"
    return math.ceil(len(significant) / 2) + 1


def item_size_bytes(item: Mapping[str, Any]) -> int:
    """DynamoDB's size of an item in its wire form ({"name": {"S": ...}}): names plus values."""
    return sum(len(name.encode()) + _value_size(value) for name, value in item.items())


def _value_size(value: Mapping[str, Any]) -> int:
    kind, content = next(iter(value.items()))
    if kind == "S":
        return len(str(content).encode())
    if kind == "N":
        return _number_size(str(content))
    if kind == "B":
        return len(content)
    if kind in ("BOOL", "NULL"):
        return 1
    if kind == "L":
        return 3 + sum(1 + _value_size(v) for v in content)
    if kind == "M":
        return 3 + sum(len(k.encode()) + 1 + _value_size(v) for k, v in content.items())
    if kind == "SS":
        return sum(len(str(v).encode()) for v in content)
    if kind == "NS":
        return sum(_number_size(str(v)) for v in content)
    return sum(len(v) for v in content)  # BS


@dataclass(frozen=True)
class DynamoCall:
    """One DynamoDB request as the meter saw it."""

    operation: str
    table: str
    items: int = 1  # items written or read (a transaction's items; a Scan's scanned count)
    consistent: bool = False


def dynamodb_units(calls: list[DynamoCall], item_bytes: Mapping[str, int]) -> tuple[float, float]:
    """(WRU, RRU) of these calls, each item of a table taken at ``item_bytes[table]``."""
    wru = rru = 0.0
    for call in calls:
        size = item_bytes.get(call.table, 0)
        op = call.operation
        if op in ("PutItem", "UpdateItem", "DeleteItem"):
            wru += write_units(size)
        elif op == TRANSACTIONAL_WRITE:
            wru += call.items * write_units(size, transactional=True)
        elif op == "BatchWriteItem":
            wru += call.items * write_units(size)
        elif op == "GetItem":
            rru += read_units(size, consistent=call.consistent)
        elif op == TRANSACTIONAL_READ:
            rru += call.items * read_units(size, consistent=True, transactional=True)
        elif op == "BatchGetItem":
            rru += call.items * read_units(size, consistent=call.consistent)
        elif op in ("Scan", "Query"):
            rru += read_units(call.items * size, consistent=call.consistent)
    return wru, rru


# --- a measured workload -----------------------------------------------------------------------
@dataclass
class Usage:
    """What ``records`` records cost in billable units, as measured (or derived from a
    measurement by a stated rule)."""

    records: int
    requests: Mapping[str, int] = field(default_factory=dict)  # "service.Operation" -> count
    dynamodb_wru: float = 0.0
    dynamodb_rru: float = 0.0
    lambda_invocations: int = 0
    lambda_gb_seconds: float = 0.0
    sqs_requests: int = 0
    emr_vcpu_hours: float = 0.0
    emr_gb_hours: float = 0.0

    def count(self, service: str, operations: frozenset[str] | None = None) -> int:
        return sum(
            n
            for key, n in self.requests.items()
            if key.split(".")[0] == service
            and (operations is None or key.split(".", 1)[-1] in operations)
        )


def lambda_gb_seconds(cpu_ms: float, requests: int, memory_mb: int,
                      aws_request_ms: float = DEFAULT_AWS_REQUEST_MS) -> float:  # fmt: skip
    """Billed GB-s of one invocation: CPU time scaled to the function's share of a vCPU,
    plus a round trip per AWS request, rounded up to the millisecond."""
    scale = max(1.0, LAMBDA_FULL_VCPU_MB / memory_mb)
    duration_ms = math.ceil(cpu_ms * scale + requests * aws_request_ms)
    return duration_ms / 1000 * memory_mb / 1024


def cost_per_million(usage: Usage, prices: PriceTable) -> dict[str, float]:
    """Dollars per million records by service (Kinesis apart: see the functions below)."""
    per = MILLION / usage.records
    s3_put = usage.count("s3", S3_PUT_CLASS)
    s3_get = usage.count("s3", S3_GET_CLASS)
    return {
        "lambda": per
        * (
            usage.lambda_invocations * prices.lambda_request_per_million / MILLION
            + usage.lambda_gb_seconds * prices.lambda_gb_second
        ),
        "dynamodb": per
        * (
            usage.dynamodb_wru * prices.dynamodb_write_request_unit_per_million
            + usage.dynamodb_rru * prices.dynamodb_read_request_unit_per_million
        )
        / MILLION,
        "s3": per
        * (s3_put * prices.s3_put_copy_post_list_per_thousand + s3_get * prices.s3_get_per_thousand)
        / 1000,
        "sqs": per * usage.sqs_requests * prices.sqs_fifo_request_per_million / MILLION,
        "emr": per
        * (
            usage.emr_vcpu_hours * prices.emr_serverless_vcpu_hour
            + usage.emr_gb_hours * prices.emr_serverless_gb_hour
        ),
    }


# --- per-record rules of the services around shardlog ------------------------------------------
def kinesis_provisioned_per_million(
    records_per_s_per_shard: float, record_bytes: int, prices: PriceTable
) -> float:
    """A provisioned shard carrying this rate: its shard-hour over its records, plus PUT
    payload units (one per started 25 KB of a record)."""
    shard_hour = prices.kinesis_shard_hour / (records_per_s_per_shard * 3600) * MILLION
    units = math.ceil(record_bytes / prices.kinesis_put_payload_unit_bytes)
    return shard_hour + units * prices.kinesis_put_payload_unit_per_million


def kinesis_on_demand_per_million(
    records_per_s: float, record_bytes: int, prices: PriceTable, consumers: int = 1
) -> float:
    """An on-demand stream carrying this rate, read by ``consumers`` standard consumers
    (the ingest Lambda): GB in and out (records rounded up to 1 KB), plus the stream-hour."""
    rounded = math.ceil(record_bytes / prices.kinesis_on_demand_rounding_bytes)
    gb = rounded * prices.kinesis_on_demand_rounding_bytes * MILLION / GB
    data = gb * (
        prices.kinesis_on_demand_ingest_per_gb
        + consumers * prices.kinesis_on_demand_retrieval_per_gb
    )
    return data + prices.kinesis_on_demand_stream_hour / (records_per_s * 3600) * MILLION


def kinesis_fan_out_per_million(
    records_per_s_per_shard: float, record_bytes: int, prices: PriceTable
) -> float:
    """What reading a shard through an enhanced fan-out consumer adds: its consumer-shard-hour
    over the shard's records, plus the GB pushed."""
    shard_hour = prices.kinesis_fan_out_consumer_shard_hour / (records_per_s_per_shard * 3600)
    retrieval = record_bytes / GB * prices.kinesis_fan_out_retrieval_per_gb
    return (shard_hour + retrieval) * MILLION


def firehose_per_million(
    records_per_s: float,
    record_bytes: int,
    prices: PriceTable,
    buffer_bytes: int = 5 * 1024 * 1024,
    buffer_s: int = 300,
) -> dict[str, float]:
    """Firehose Direct PUT to S3 (its default buffer: 5 MiB or 300 s): ingestion with each
    record rounded up to 5 KB, and one S3 PUT per delivered object."""
    rounded = math.ceil(record_bytes / prices.firehose_rounding_bytes)
    ingest = rounded * prices.firehose_rounding_bytes * MILLION / GB * prices.firehose_ingest_per_gb
    objects_per_s = max(records_per_s * record_bytes / buffer_bytes, 1 / buffer_s)
    puts = objects_per_s / records_per_s * MILLION
    return {"firehose": ingest, "s3": puts * prices.s3_put_copy_post_list_per_thousand / 1000}


def lambda_batch_records(records_per_s: float, record_bytes: int, batch_size: int,
                         window_s: float) -> int:  # fmt: skip
    """Records in one Kinesis-triggered invocation at a steady rate: what the batching window
    gathers, capped by the batch size and by Lambda's 6 MB payload (data in base64)."""
    per_record = 4 * math.ceil(record_bytes / 3) + KINESIS_EVENT_RECORD_OVERHEAD_BYTES
    by_payload = LAMBDA_PAYLOAD_BYTES // per_record
    return max(1, min(batch_size, by_payload, math.ceil(records_per_s * max(window_s, 1e-3))))


def storage_per_million_month(bytes_per_record: float, prices: PriceTable) -> float:
    """S3 Standard storage of a million records for one month."""
    return bytes_per_record * MILLION / GB * prices.s3_storage_gb_month
