"""shardlog: an exactly-once event log on S3 + DynamoDB, fed by Kinesis.

The public names below are imported lazily (PEP 562), so ``import shardlog.format`` (the
stdlib-only segment codec) loads no boto3, and a Lambda cold start pays only for what
its handler uses.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_EXPORTS = {
    "ApiClient": "shardlog.api_client",
    "ShardlogConfig": "shardlog.config",
    "CorruptLogError": "shardlog.exceptions",
    "LeaseHeldError": "shardlog.exceptions",
    "LeaseLostError": "shardlog.exceptions",
    "ProducerError": "shardlog.exceptions",
    "SegmentFormatError": "shardlog.exceptions",
    "ShardlogError": "shardlog.exceptions",
    "TrimmedError": "shardlog.exceptions",
    "ValidationError": "shardlog.exceptions",
    "LogRecord": "shardlog.format",
    "Segment": "shardlog.format",
    "FailureKind": "shardlog.outcomes",
    "Producer": "shardlog.producer",
    "PutFailure": "shardlog.outcomes",
    "ProducerRecord": "shardlog.records",
    "PutResult": "shardlog.outcomes",
    "LogReader": "shardlog.reader",
}

__all__ = [
    "ApiClient",
    "CorruptLogError",
    "FailureKind",
    "LeaseHeldError",
    "LeaseLostError",
    "LogReader",
    "LogRecord",
    "Producer",
    "ProducerError",
    "ProducerRecord",
    "PutFailure",
    "PutResult",
    "Segment",
    "SegmentFormatError",
    "ShardlogConfig",
    "ShardlogError",
    "TrimmedError",
    "ValidationError",
    "__version__",
]

if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs only
    from shardlog.api_client import ApiClient
    from shardlog.config import ShardlogConfig
    from shardlog.exceptions import (
        CorruptLogError,
        LeaseHeldError,
        LeaseLostError,
        ProducerError,
        SegmentFormatError,
        ShardlogError,
        TrimmedError,
        ValidationError,
    )
    from shardlog.format import LogRecord, Segment
    from shardlog.outcomes import FailureKind, PutFailure, PutResult
    from shardlog.producer import Producer
    from shardlog.reader import LogReader
    from shardlog.records import ProducerRecord


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'shardlog' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])
