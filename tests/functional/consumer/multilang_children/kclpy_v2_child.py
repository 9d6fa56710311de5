"""An amazon_kclpy v2 record processor (shutdown with a reason, the pre-KCL-2 interface),
run unchanged: kclpy maps leaseLost and shardEnded to shutdown(ZOMBIE / TERMINATE).

Appends one JSON line per record to $SHARDLOG_CHILD_OUT; checkpoints after every batch.
"""

import json
import os
import sys

from amazon_kclpy import kcl
from amazon_kclpy.v2 import processor


class RecordProcessor(processor.RecordProcessorBase):
    def __init__(self):
        self.shard_id = None
        self.out = os.environ["SHARDLOG_CHILD_OUT"]

    def initialize(self, initialize_input):
        self.shard_id = initialize_input.shard_id

    def process_records(self, process_records_input):
        with open(self.out, "a") as out:
            for record in process_records_input.records:
                line = {
                    "shard": self.shard_id,
                    "seq": int(record.sequence_number),
                    "key": record.partition_key,
                    "data": record.binary_data.decode(),
                    "pid": os.getpid(),
                }
                out.write(json.dumps(line) + "\n")
        process_records_input.checkpointer.checkpoint()

    def shutdown(self, shutdown_input):
        if shutdown_input.reason == "TERMINATE":
            shutdown_input.checkpointer.checkpoint()  # the end of the shard: SHARD_END
        else:
            sys.stderr.write(f"shutdown {shutdown_input.reason} {self.shard_id}\n")

    def shutdown_requested(self, shutdown_requested_input):
        shutdown_requested_input.checkpointer.checkpoint()


if __name__ == "__main__":
    kcl.KCLProcess(RecordProcessor()).run()
