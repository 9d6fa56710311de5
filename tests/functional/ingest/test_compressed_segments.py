"""Compressed segments on the embedded AWS: the writer stores version 3 when it pays (and
versions 1 and 2 otherwise, or with compression off) in the same requests, every reader
reads a log that mixes them, a leftover is adopted whatever its codec, and what a reader
refuses (too large, corrupt) raises the log's errors."""

from __future__ import annotations

import json
import random
import struct
import zlib
from collections import Counter
from collections.abc import Callable

import pytest

from lambdas.ingest.handler import create_handler
from shardlog import constants as C
from shardlog.clock import ManualClock
from shardlog.exceptions import SegmentFormatError
from shardlog.format import VERSION_COMPRESSED, IncomingRecord, encode_segment
from shardlog.function_settings import IngestSettings
from shardlog.local.lambda_context import LambdaContext
from shardlog.reader import LogReader
from shardlog.segments import SegmentStore, partition_prefix, segment_key
from shardlog.writer import LogWriter
from tests.functional.ingest.test_handler import kinesis_event
from tests.support.aws import AwsEnv
from tests.support.factories import incoming_records, kinesis_seqs, register_partition, writer_for
from tests.support.readback import log_kinesis_seqs
from tests.unit.test_format import doc_decoder

P = "shardId-000000000000"


def json_batch(count: int, start: int) -> list[IncomingRecord]:
    """The factory's records with the demo's kind of data: small JSON documents."""
    return [
        r._replace(data=json.dumps({"k": r.partition_key, "n": start + i, "i": i}).encode())
        for i, r in enumerate(incoming_records(count, start=start))
    ]


def random_batch(count: int, start: int) -> list[IncomingRecord]:
    rng = random.Random(start)
    return [r._replace(data=rng.randbytes(600)) for r in incoming_records(count, start=start)]


def stored_versions(aws: AwsEnv, partition_id: str = P) -> list[int]:
    """The version byte of each segment object of the partition, in log order."""
    s3 = aws.clients.s3
    listed = s3.list_objects_v2(Bucket=aws.config.bucket, Prefix=partition_prefix(partition_id))
    return [
        s3.get_object(Bucket=aws.config.bucket, Key=o["Key"], Range="bytes=4-4")["Body"].read()[0]
        for o in listed.get("Contents", [])
    ]


def stored(aws: AwsEnv, seq: int, partition_id: str = P) -> bytes:
    key = segment_key(partition_id, seq)
    return bytes(aws.clients.s3.get_object(Bucket=aws.config.bucket, Key=key)["Body"].read())


def test_the_writer_compresses_when_it_pays_in_the_same_requests(aws: AwsEnv) -> None:
    """JSON is stored as version 3, random bytes as version 1, with compression off as
    version 1: the same records committed and read back, the same requests per batch."""
    register_partition(aws, P)
    requests = {}
    batches = [
        ("zlib", json_batch(500, 0)),
        ("zlib", random_batch(50, 500)),
        ("none", json_batch(500, 550)),
    ]
    for compression, batch in batches:
        writer = writer_for(aws, segment_compression=compression)
        aws.requests.attach(writer.clients)
        aws.requests.reset()
        assert writer.append(P, batch).committed == len(batch)
        requests[(compression, batch[0].data[:1] == b"{")] = aws.requests.snapshot()
    assert stored_versions(aws) == [VERSION_COMPRESSED, 1, 1]
    budget = Counter(
        {
            "dynamodb.UpdateItem": 1,
            "dynamodb.TransactGetItems": 1,
            "s3.PutObject": 1,
            "dynamodb.TransactWriteItems": 1,
        }
    )
    assert set(map(frozenset, (c.items() for c in requests.values()))) == {
        frozenset(budget.items())
    }
    records = list(LogReader(aws.clients, aws.config.bucket, aws.config.tables).records(P))
    assert [r.data for r in records] == [r.data for _, batch in batches for r in batch]
    assert [r.seq for r in records] == list(range(1050))
    # What S3 holds is the documented format: the stdlib decoder in docs/FORMAT.md reads it.
    documented = doc_decoder()(stored(aws, 0))
    assert [r[2] for r in documented["records"]] == [r.data for r in batches[0][1]]
    assert len(stored(aws, 0)) < len(encode_segment(P, 0, batches[0][1], 0)) // 4


def test_a_log_of_every_version_reads_in_order(aws: AwsEnv) -> None:
    """A log written before compression (versions 1 and 2: records with ids), then
    compressed: every reader path (records, segments, from the middle) reads it whole."""
    register_partition(aws, P)
    with_ids = [
        r._replace(record_id=f"id-{i}") for i, r in enumerate(json_batch(40, 100), start=100)
    ]
    writer_for(aws, segment_compression="none").append(P, json_batch(100, 0))
    writer_for(aws, segment_compression="none").append(P, with_ids)
    writer_for(aws, segment_max_records=30).append(P, json_batch(60, 140))
    writer_for(aws).append(P, [r._replace(record_id="x") for r in json_batch(50, 200)])
    assert stored_versions(aws) == [1, 2, 3, 3, 3]
    reader = LogReader(aws.clients, aws.config.bucket, aws.config.tables)
    assert [s.first_seq for s in reader.segments(P)] == [0, 100, 140, 170, 200]
    assert [r.record_id for r in reader.records(P, 139, 141)] == ["id-139", None]
    assert [r.record_id for r in reader.records(P, 249)] == ["x"]
    assert log_kinesis_seqs(aws, P) == kinesis_seqs(incoming_records(250, start=0))


@pytest.mark.parametrize(("crashed", "adopter"), [("zlib", "none"), ("none", "zlib")])
def test_a_leftover_is_adopted_whatever_its_codec(
    aws: AwsEnv, clock: ManualClock, new_writer: Callable[..., LogWriter], crashed: str,
    adopter: str,
) -> None:  # fmt: skip
    """A writer crashed after its S3 write; the next one, with the other setting, adopts
    the leftover as it is: the protocol compares records, never bytes."""
    register_partition(aws, P)
    batch = json_batch(200, 0)
    new_writer(segment_compression=crashed).prepare(P, batch, owner="crashed")
    before = stored(aws, 0)
    assert before[4] == (VERSION_COMPRESSED if crashed == "zlib" else 1)
    clock.advance(C.DEFAULT_LEASE_DURATION_MS)  # the crashed writer's lease expires
    result = new_writer(segment_compression=adopter).append(P, batch, owner="retry")
    assert (result.segments_adopted, result.segments_written, result.committed) == (1, 0, 200)
    assert stored(aws, 0) == before
    assert log_kinesis_seqs(aws, P) == kinesis_seqs(batch)


def test_the_ingest_handler_takes_the_setting_from_its_environment(aws: AwsEnv) -> None:
    """SHARDLOG_SEGMENT_COMPRESSION reaches the writer: none, then zlib (the default)."""
    env = {
        C.ENV_BUCKET_NAME: aws.config.bucket,
        C.ENV_PARTITIONS_TABLE: aws.config.partitions_table,
        C.ENV_CONSUMERS_TABLE: aws.config.consumers_table,
    }
    for extra, version in (({C.ENV_SEGMENT_COMPRESSION: "none"}, 1), ({}, VERSION_COMPRESSED)):
        clock = ManualClock()
        settings = IngestSettings.from_env({**env, **extra})
        handler = create_handler(settings, aws.fresh_clients(), clock)
        event = kinesis_event(0 if version == 1 else 300, 300)
        response = handler(event, LambdaContext("ingest", clock=clock))
        assert response == {"batchItemFailures": []}
        assert stored_versions(aws, "shardId-000000000003")[-1] == version


def test_the_store_refuses_a_segment_past_its_size_limit(aws: AwsEnv) -> None:
    """Stored size: at the limit read, one byte past refused before the body is read.
    Decompressed size: a compressed object small enough to store, too large inflated."""
    register_partition(aws, P)
    writer_for(aws).append(P, json_batch(300, 0))
    blob = stored(aws, 0)
    raw = struct.unpack_from(">I", blob, 8 + len(P) + 22)[0]
    assert len(blob) < raw
    for limit in (len(blob) + raw, raw):
        assert (
            len(
                SegmentStore(aws.clients, aws.config.bucket, max_segment_bytes=limit)
                .fetch(P, 0)
                .records
            )
            == 300
        )
    with pytest.raises(SegmentFormatError, match=f"declare {raw} bytes decompressed, past"):
        SegmentStore(aws.clients, aws.config.bucket, max_segment_bytes=raw - 1).fetch(P, 0)
    small = SegmentStore(aws.clients, aws.config.bucket, max_segment_bytes=len(blob) - 1)
    with pytest.raises(SegmentFormatError, match=f"{segment_key(P, 0)} is {len(blob)} bytes, past"):
        small.fetch(P, 0)


def test_a_corrupt_compressed_segment_raises_the_logs_error(aws: AwsEnv) -> None:
    """A committed segment whose zlib stream is damaged (its CRC recomputed, as if written
    that way): the reader raises SegmentFormatError, never zlib.error, and returns nothing."""
    register_partition(aws, P)
    writer_for(aws).append(P, json_batch(100, 0))
    blob = stored(aws, 0)
    header_end = 8 + len(P) + 20 + 6
    body = blob[:header_end] + b"\x78\x9c" + b"\xff" * 64
    aws.clients.s3.put_object(
        Bucket=aws.config.bucket,
        Key=segment_key(P, 0),
        Body=body + struct.pack(">I", zlib.crc32(body)),
    )
    reader = LogReader(aws.clients, aws.config.bucket, aws.config.tables)
    with pytest.raises(SegmentFormatError, match="segment records do not decompress") as caught:
        list(reader.records(P))
    assert isinstance(caught.value.__cause__, zlib.error)
