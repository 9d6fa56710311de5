"""shardlog: an exactly-once event log on S3 + DynamoDB, fed by Kinesis."""

from shardlog.api_client import ApiClient
from shardlog.config import ShardlogConfig
from shardlog.exceptions import (
    CorruptLogError,
    LeaseHeldError,
    LeaseLostError,
    ProducerError,
    SegmentFormatError,
    ShardlogError,
    ValidationError,
)
from shardlog.format import LogRecord, Segment
from shardlog.producer import Producer, ProducerRecord, PutResult
from shardlog.reader import LogReader

__version__ = "0.1.0"

__all__ = [
    "ApiClient",
    "CorruptLogError",
    "LeaseHeldError",
    "LeaseLostError",
    "LogReader",
    "LogRecord",
    "Producer",
    "ProducerError",
    "ProducerRecord",
    "PutResult",
    "Segment",
    "SegmentFormatError",
    "ShardlogConfig",
    "ShardlogError",
    "ValidationError",
    "__version__",
]
