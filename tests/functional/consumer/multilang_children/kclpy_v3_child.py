"""An amazon_kclpy v3 record processor, written as KCL's Python samples are: it runs unchanged
under KCL's MultiLangDaemon and under `shardlog consume -- python kclpy_v3_child.py`.

Appends one JSON line per record to $SHARDLOG_CHILD_OUT; checkpoints after every batch.
"""

import json
import os
import sys

from amazon_kclpy import kcl
from amazon_kclpy.v3 import processor


class RecordProcessor(processor.RecordProcessorBase):
    def __init__(self):
        self.shard_id = None
        self.out = os.environ["SHARDLOG_CHILD_OUT"]

    def initialize(self, initialize_input):
        self.shard_id = initialize_input.shard_id
        sys.stderr.write(
            f"initialize {self.shard_id} at {initialize_input.sequence_number} "
            f"/ {initialize_input.sub_sequence_number}\n"
        )

    def process_records(self, process_records_input):
        last = None
        with open(self.out, "a") as out:
            for record in process_records_input.records:
                out.write(
                    json.dumps(
                        {
                            "shard": self.shard_id,
                            "seq": int(record.sequence_number),
                            "key": record.partition_key,
                            "data": record.binary_data.decode(),
                            "arrival": record.timestamp_millis,
                            "subSequenceNumber": record.sub_sequence_number,
                            "pid": os.getpid(),
                        }
                    )
                    + "\n"
                )
                last = record
        if last is not None:
            self.checkpoint(
                process_records_input.checkpointer, last.sequence_number, last.sub_sequence_number
            )

    def checkpoint(self, checkpointer, sequence_number=None, sub_sequence_number=None):
        try:
            checkpointer.checkpoint(sequence_number, sub_sequence_number)
        except kcl.CheckpointError as e:
            sys.stderr.write(f"checkpoint failed: {e.value}\n")

    def lease_lost(self, lease_lost_input):
        sys.stderr.write(f"lease lost {self.shard_id}\n")

    def shard_ended(self, shard_ended_input):
        self.checkpoint(shard_ended_input.checkpointer)

    def shutdown_requested(self, shutdown_requested_input):
        self.checkpoint(shutdown_requested_input.checkpointer)


if __name__ == "__main__":
    kcl.KCLProcess(RecordProcessor()).run()
