"""Processors the process-based tests load with `shardlog consume --processor`."""

from __future__ import annotations

import json
import os

from shardlog.consumer import Checkpointer, RecordProcessor
from shardlog.format import LogRecord


class FileRecorder(RecordProcessor):
    """Appends one JSON line per record to $SHARDLOG_CONSUMER_OUT, then checkpoints the batch."""

    def __init__(self) -> None:
        self.path = os.environ["SHARDLOG_CONSUMER_OUT"]
        self.worker = os.environ.get("SHARDLOG_CONSUMER_NAME", str(os.getpid()))

    def process_records(self, records: list[LogRecord], checkpointer: Checkpointer) -> None:
        with open(self.path, "a") as out:
            for record in records:
                line = {"worker": self.worker, "partition": record.partition_id, "seq": record.seq}
                out.write(json.dumps(line) + "\n")
        checkpointer.checkpoint()
