"""Lambda consumers: a consumer group that is a Lambda function (docs/CONSUMERS.md).

New commits wake the group's runner for a partition (``wake``); the runner holds the
group's lease on that partition, reads the committed log from the checkpoint through the
segment store, invokes the function with the Kinesis event shape, checkpoints fenced
after each success, retries, bisects and sends exhausted batches to an on-failure
destination (``runner``). The same code runs on AWS and in the local runtime.
"""

from shardlog.lambda_consumer.settings import LambdaConsumerSettings, StartingPosition

__all__ = ["LambdaConsumerSettings", "StartingPosition"]
