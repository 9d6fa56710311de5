"""The AWS list prices the cost model uses: us-east-1, on-demand, in one dated table.

Every price shardlog turns requests into money with lives here and nowhere else, so a
price change is one edit. Figures are the public list prices (no free tier, no savings
plans, no volume tiers beyond the first), as listed on these pages on ``PRICES_AS_OF``:

- "Amazon Kinesis Data Streams pricing" (aws.amazon.com/kinesis/data-streams/pricing):
  provisioned shard-hour and PUT payload units (25 KB each), on-demand stream-hour and
  data in / data retrieved per GB (each record rounded up to 1 KB), enhanced fan-out
  (provisioned) consumer-shard-hour and data retrieved per GB;
- "AWS Lambda pricing" (aws.amazon.com/lambda/pricing): requests and GB-seconds, x86;
- "Amazon DynamoDB pricing for on-demand capacity" (aws.amazon.com/dynamodb/pricing/
  on-demand): read and write request units (a transactional request costs 2 units per
  item and size step), storage; DynamoDB Streams reads by Lambda triggers are free;
- "Amazon S3 pricing" (aws.amazon.com/s3/pricing): S3 Standard PUT/COPY/POST/LIST, GET,
  storage;
- "Amazon SQS pricing" (aws.amazon.com/sqs/pricing): FIFO requests (64 KB chunks);
- "Amazon EMR Serverless pricing" (aws.amazon.com/emr/pricing, EMR Serverless tab):
  vCPU-hour and GB-hour;
- "Amazon Data Firehose pricing" (aws.amazon.com/firehose/pricing): Direct PUT ingestion
  per GB, each record rounded up to 5 KB.

Stdlib only; nothing here calls AWS.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

PRICES_AS_OF: Final = "2026-11-24"
REGION: Final = "us-east-1"

KB: Final = 1024
GB: Final = 1024**3


@dataclass(frozen=True)
class PriceTable:
    # Kinesis Data Streams, provisioned
    kinesis_shard_hour: float
    kinesis_put_payload_unit_per_million: float  # one unit per started 25 KB of a record
    kinesis_put_payload_unit_bytes: int
    # Kinesis Data Streams, on-demand
    kinesis_on_demand_stream_hour: float
    kinesis_on_demand_ingest_per_gb: float  # each record rounded up to 1 KB
    kinesis_on_demand_retrieval_per_gb: float  # standard (shared-throughput) consumers
    kinesis_on_demand_rounding_bytes: int
    # Kinesis Data Streams, enhanced fan-out (provisioned mode): per consumer and shard
    kinesis_fan_out_consumer_shard_hour: float
    kinesis_fan_out_retrieval_per_gb: float
    # Lambda (x86)
    lambda_request_per_million: float
    lambda_gb_second: float
    # DynamoDB on-demand
    dynamodb_write_request_unit_per_million: float  # 1 KB per unit; 2 units in a transaction
    dynamodb_read_request_unit_per_million: float  # 4 KB strongly consistent; 2 transactional
    dynamodb_storage_gb_month: float
    # S3 Standard
    s3_put_copy_post_list_per_thousand: float
    s3_get_per_thousand: float
    s3_storage_gb_month: float
    # SQS FIFO
    sqs_fifo_request_per_million: float
    # EMR Serverless
    emr_serverless_vcpu_hour: float
    emr_serverless_gb_hour: float
    # Data Firehose, Direct PUT to S3
    firehose_ingest_per_gb: float
    firehose_rounding_bytes: int


US_EAST_1: Final = PriceTable(
    kinesis_shard_hour=0.015,
    kinesis_put_payload_unit_per_million=0.014,
    kinesis_put_payload_unit_bytes=25 * KB,
    kinesis_on_demand_stream_hour=0.04,
    kinesis_on_demand_ingest_per_gb=0.08,
    kinesis_on_demand_retrieval_per_gb=0.04,
    kinesis_on_demand_rounding_bytes=KB,
    kinesis_fan_out_consumer_shard_hour=0.015,
    kinesis_fan_out_retrieval_per_gb=0.013,
    lambda_request_per_million=0.20,
    lambda_gb_second=0.0000166667,
    dynamodb_write_request_unit_per_million=0.625,
    dynamodb_read_request_unit_per_million=0.125,
    dynamodb_storage_gb_month=0.25,
    s3_put_copy_post_list_per_thousand=0.005,
    s3_get_per_thousand=0.0004,
    s3_storage_gb_month=0.023,
    sqs_fifo_request_per_million=0.50,
    emr_serverless_vcpu_hour=0.052624,
    emr_serverless_gb_hour=0.0057785,
    firehose_ingest_per_gb=0.029,
    firehose_rounding_bytes=5 * KB,
)
