"""Log consumers: KCL-grade consumer groups over the S3 log (docs/CONSUMERS.md).

from shardlog.consumer import Worker, ConsumerSettings

def handle(records, checkpointer):
    for record in records:
        print(record.partition_id, record.seq, record.data)
    checkpointer.checkpoint()

Worker("billing", handle, ShardlogConfig.resolve()).run(stop_event)
"""

from shardlog.consumer.checkpointer import Checkpointer
from shardlog.consumer.exceptions import (
    CheckpointError,
    CheckpointLeaseLostError,
    CheckpointRangeError,
    CheckpointStateError,
    ConsumerError,
    ProcessorFailedError,
)
from shardlog.consumer.multilang import MultiLangSettings, multilang_factory
from shardlog.consumer.positions import InitialPosition, StartPosition, replay, seq_at_timestamp
from shardlog.consumer.processor import RecordProcessor
from shardlog.consumer.settings import ConsumerSettings, validate_group
from shardlog.consumer.status import PartitionProgress, group_progress
from shardlog.consumer.worker import Worker

__all__ = [
    "CheckpointError",
    "CheckpointLeaseLostError",
    "CheckpointRangeError",
    "CheckpointStateError",
    "Checkpointer",
    "ConsumerError",
    "ConsumerSettings",
    "InitialPosition",
    "MultiLangSettings",
    "PartitionProgress",
    "ProcessorFailedError",
    "RecordProcessor",
    "StartPosition",
    "Worker",
    "group_progress",
    "multilang_factory",
    "replay",
    "seq_at_timestamp",
    "validate_group",
]
