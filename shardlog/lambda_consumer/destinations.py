"""The on-failure destination: where a batch goes when the group gives up on it.

Like Lambda's Kinesis event source mapping, the destination gets a record describing the
batch, not its data: the log keeps every record, so the batch can be replayed with
``shardlog read --partition P --from-seq A --to-seq B``. The record names the group, the
partition, the first and last seq, the arrival times, the attempts and why it was given
up (``RetryAttemptsExhausted`` or ``RecordAgeExceeded``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from shardlog.aws import Clients
from shardlog.format import LogRecord

RETRIES_EXHAUSTED = "RetryAttemptsExhausted"
RECORD_AGE_EXCEEDED = "RecordAgeExceeded"
S3_PREFIX = "shardlog-on-failure/"


def _iso(ms: int) -> str:
    return (
        datetime.fromtimestamp(ms / 1000, UTC)
        .isoformat(timespec="milliseconds")
        .replace("+00:00", "Z")
    )


@dataclass(frozen=True)
class FailedBatch:
    group: str
    partition_id: str
    records: Sequence[LogRecord]
    condition: str  # RETRIES_EXHAUSTED or RECORD_AGE_EXCEEDED
    attempts: int
    function_error: str | None
    function_arn: str

    @property
    def first_seq(self) -> int:
        return self.records[0].seq

    @property
    def last_seq(self) -> int:
        return self.records[-1].seq

    def document(self, now_ms: int) -> dict[str, Any]:
        """The destination record (Lambda's on-failure shape, with shardlog's batch info)."""
        return {
            "version": "1.0",
            "timestamp": _iso(now_ms),
            "requestContext": {
                "functionArn": self.function_arn,
                "condition": self.condition,
                "approximateInvokeCount": self.attempts,
            },
            "responseContext": {"functionError": self.function_error},
            "shardlogBatchInfo": {
                "consumerGroup": self.group,
                "partitionId": self.partition_id,
                "startSequenceNumber": self.first_seq,
                "endSequenceNumber": self.last_seq,
                "batchSize": len(self.records),
                "approximateArrivalOfFirstRecord": _iso(self.records[0].arrival_ms),
                "approximateArrivalOfLastRecord": _iso(self.records[-1].arrival_ms),
                "replay": (
                    f"shardlog read --partition {self.partition_id} "
                    f"--from-seq {self.first_seq} --to-seq {self.last_seq + 1}"
                ),
            },
        }


class OnFailureDestination:
    """Sends failed-batch records to an SQS queue, an SNS topic or an S3 bucket (by ARN)."""

    def __init__(self, clients: Clients, arn: str) -> None:
        self.clients = clients
        self.arn = arn
        self.kind = arn.split(":")[2]

    def send(self, batch: FailedBatch, now_ms: int) -> None:
        body = json.dumps(batch.document(now_ms), sort_keys=True)
        if self.kind == "sqs":
            self.clients.client("sqs").send_message(QueueUrl=self._queue_url(), MessageBody=body)
        elif self.kind == "sns":
            self.clients.client("sns").publish(TopicArn=self.arn, Message=body)
        elif self.kind == "s3":
            bucket = self.arn.split(":")[-1]
            key = (
                f"{S3_PREFIX}{batch.group}/{batch.partition_id}/"
                f"{batch.first_seq}-{batch.last_seq}-{now_ms}.json"
            )
            self.clients.s3.put_object(Bucket=bucket, Key=key, Body=body.encode())
        else:  # pragma: no cover - the settings validate the ARN
            raise ValueError(f"not an on-failure destination: {self.arn}")

    def _queue_url(self) -> str:
        account, name = self.arn.split(":", 5)[4:]
        sqs = self.clients.client("sqs")
        return str(sqs.get_queue_url(QueueName=name, QueueOwnerAWSAccountId=account)["QueueUrl"])
