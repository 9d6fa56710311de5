"""A Lambda consumer written for a Kinesis event source, as docs/CONSUMERS.md shows it:
Powertools' ``BatchProcessor`` at module level, a partial batch response. Module state is
per execution environment (the local runtime loads this module again for each concurrent
call); what it processed goes to ``tests.support.powertools_sink``, shared by all."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.batch import (
    BatchProcessor,
    EventType,
    process_partial_response,
)
from aws_lambda_powertools.utilities.data_classes.kinesis_stream_event import (
    KinesisStreamRecord,
)

from tests.support import powertools_sink

processor = BatchProcessor(event_type=EventType.KinesisDataStreams)


def record_handler(record: KinesisStreamRecord) -> None:
    powertools_sink.process(record.kinesis.partition_key, record.kinesis.data_as_bytes())


def handler(event: dict[str, Any], context: Any) -> Any:
    return process_partial_response(
        event=event, record_handler=record_handler, processor=processor, context=context
    )
