"""The segment store: the one owner of the log's layout in S3.

Every reader and writer of the log goes through it, so the layout lives in one place:

- **keys**: ``events/<partition id>/<seq>``, ``<seq>`` zero-padded to 20 digits, so keys
  sort in log order and ``ListObjectsV2(StartAfter=...)`` resumes anywhere;
- **listing**: the first seqs of a partition's segment objects, in log order, from any seq;
- **fetch**: GetObject + ``decode_segment`` (any version, compressed or not) + the check
  that the object is the segment its key names (partition and first seq). An object larger
  than a segment may be (``SEGMENT_MAX_READ_BYTES``) is refused before its body is read,
  and a compressed one is never decompressed past that either;
- **density**: from the trim horizon (``trimHorizonSeq``) up to the committed head
  (``nextSequenceNumber``), both read by the caller from the partitions table, the segments
  must follow each other without a gap; a missing or misplaced segment raises
  CorruptLogError, it is never skipped. Objects at or past the head are uncommitted
  leftovers and stay invisible; a read from below the horizon raises TrimmedError (retention
  expired those records, shardlog/retention.py): never a corruption, never a skip;
- **create**: the conditional create (``If-None-Match: *``) the write path relies on.

The store never reads DynamoDB: which head to trust is the caller's decision
(``LogReader`` reads it; the Spark executors get it from the driver's plan).
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import ClientError

from shardlog import constants as C
from shardlog.aws import Clients
from shardlog.exceptions import (
    CorruptLogError,
    SegmentFormatError,
    TrimmedError,
    aws_error_code,
)
from shardlog.format import LogRecord, Segment, decode_segment

SEGMENT_CONTENT_TYPE = "application/vnd.shardlog.segment"
# S3's answers to a conditional create whose key exists: 412, or 409 while a concurrent
# conditional write on the same key is in flight (the other writer's object is, or is
# about to be, there).
_KEY_EXISTS = frozenset({"PreconditionFailed", "412", "ConditionalRequestConflict"})
_FIRST_LOOKBACK = 1024
_LIST_PAGE = 1000  # the most keys S3 answers a ListObjectsV2 with
# The backward listing (BackwardListing): a first round of at most a page's worth of seqs (a
# seq starts at most one segment, so it always fits one page), then rounds sized to hold
# about half a page, growing at most 64-fold a round.
_BACK_FIRST_SEQS = _LIST_PAGE
_BACK_TARGET_KEYS = _LIST_PAGE // 2
_BACK_MAX_GROWTH = 64


def segment_key(partition_id: str, seq: int) -> str:
    """The key of the segment whose first record is ``seq``."""
    if not 0 <= seq < 10**C.SEQ_DIGITS:
        raise ValueError(f"seq {seq} does not fit {C.SEQ_DIGITS} digits")
    return f"{partition_prefix(partition_id)}{seq:0{C.SEQ_DIGITS}d}"


def log_prefix() -> str:
    """Where every partition's segments live in the bucket (a lifecycle rule's prefix)."""
    return C.EVENTS_PREFIX


def partition_prefix(partition_id: str) -> str:
    """The prefix under which every segment of a partition sits."""
    if not partition_id or "/" in partition_id:
        raise ValueError(f"not a partition id: {partition_id!r}")
    return f"{C.EVENTS_PREFIX}{partition_id}/"


def seq_of_key(key: str) -> int:
    """The first seq a segment key names."""
    tail = key.rsplit("/", 1)[-1]
    if len(tail) != C.SEQ_DIGITS or not (tail.isascii() and tail.isdigit()):
        raise SegmentFormatError(f"not a segment key: {key!r}")
    return int(tail)


def check_segment(segment: Segment, partition_id: str, first_seq: int, next_seq: int) -> None:
    """The density check of one segment: it is exactly [first_seq, next_seq) of the partition."""
    key = segment_key(partition_id, first_seq)
    if segment.partition_id != partition_id:
        raise CorruptLogError(f"{key} belongs to partition {segment.partition_id}")
    if (segment.first_seq, segment.next_seq) != (first_seq, next_seq):
        raise CorruptLogError(
            f"{key}: expected seqs [{first_seq}, {next_seq}), the object holds "
            f"[{segment.first_seq}, {segment.next_seq}): a committed segment is missing "
            "or misplaced"
        )


@dataclass(frozen=True)
class AgedStart:
    """A segment object's first seq and when S3 created it (epoch ms)."""

    start: int
    created_ms: int


@dataclass(frozen=True)
class ListedSegment:
    """A segment object as the listing shows it: its first seq and its size in bytes."""

    start: int
    size: int


class BackwardListing:
    """The segment objects of a partition below ``head``, newest first, listed lazily.

    S3 lists forward only, so the listing goes back in rounds, each one ListObjectsV2 page
    (at most 1,000 keys) of a range of seqs ``[low, high)``, the next round the range below
    it. A range of at most 1,000 seqs always fits one page (a seq starts at most one
    segment): the first round spans 1,000 seqs; each later one is sized from the density of
    segments the last one found, to hold about 500 keys (half a page: room for a denser
    range), at least 1,000 seqs and at most 64 times the last span. A page that fills
    before reaching ``high`` (the range is denser than that) is listed again over the upper
    half of what it covered, and no later round reaches more than about half a page of keys
    below that page's last key: one request lost, never a walk through keys older than the
    caller needs. Objects at or past ``head`` are uncommitted leftovers, never listed.

    At most ``max_lists`` requests: past them the iteration stops and ``truncated`` says
    that segments below were left unlisted. ``lists`` counts the requests made.
    """

    def __init__(self, store: SegmentStore, partition_id: str, head: int, max_lists: int) -> None:
        self.store = store
        self.partition_id = partition_id
        self.head = head
        self.max_lists = max_lists
        self.lists = 0
        self.truncated = False

    def __iter__(self) -> Iterator[ListedSegment]:
        high, span = self.head, _BACK_FIRST_SEQS
        # Where a page filled: segments are dense below ``dense_at``, about half a page of
        # them in the ``dense_span`` seqs under it. No later round reaches further down.
        dense_at, dense_span = 0, 0
        while high > 0:
            if self.lists >= self.max_lists:
                self.truncated = True
                return
            low = max(0, high - span)
            if high > dense_at:
                low = max(low, dense_at - dense_span)
            listed, complete = self._page(low, high)
            if not complete:  # more than a page in [low, high): the upper half of this page
                dense_at = listed[-1].start
                dense_span = max(1, (dense_at - low + 1) * _BACK_TARGET_KEYS // len(listed))
                span = max(_BACK_FIRST_SEQS, dense_span)
                continue
            yield from reversed(listed)
            high, span = low, _next_span(high - low, len(listed))

    def _page(self, low: int, high: int) -> tuple[list[ListedSegment], bool]:
        """The segments starting in ``[low, high)`` from one request, and whether the page
        held all of them (it reached ``high`` or the end of the partition)."""
        prefix = partition_prefix(self.partition_id)
        kwargs: dict[str, Any] = {
            "Bucket": self.store.bucket,
            "Prefix": prefix,
            "MaxKeys": _LIST_PAGE,
        }
        if low > 0:
            kwargs["StartAfter"] = segment_key(self.partition_id, low - 1)
        self.lists += 1
        page = self.store.clients.s3.list_objects_v2(**kwargs)
        contents = page.get("Contents", [])
        objects = [ListedSegment(seq_of_key(o["Key"]), int(o["Size"])) for o in contents]
        listed = [o for o in objects if o.start < high]
        # Complete: the page went past high, or to the partition's end, or it holds every
        # seq of the range (a seq starts at most one segment).
        complete = (
            len(listed) < len(objects) or not page.get("IsTruncated") or len(listed) >= high - low
        )
        return listed, complete


def _next_span(span: int, found: int) -> int:
    """The next round's span: about half a page of keys at the density just found (and
    never under a page's worth of seqs, which always fits a page)."""
    wanted = span * _BACK_TARGET_KEYS // found if found else span * _BACK_MAX_GROWTH
    return max(_BACK_FIRST_SEQS, min(wanted, span * _BACK_MAX_GROWTH))


class SegmentStore:
    """The segments of one bucket. Thread-safe: boto3 clients may be shared by threads."""

    def __init__(
        self,
        clients: Clients,
        bucket: str = C.DEFAULT_BUCKET_NAME,
        *,
        max_segment_bytes: int = C.SEGMENT_MAX_READ_BYTES,
    ) -> None:
        self.clients = clients
        self.bucket = bucket
        self.max_segment_bytes = max_segment_bytes  # stored or decompressed

    # --- single objects ---------------------------------------------------------------
    def create(self, partition_id: str, seq: int, body: bytes) -> bool:
        """Conditional create of the segment at ``seq``. False when an object is already there."""
        try:
            self.clients.s3.put_object(
                Bucket=self.bucket,
                Key=segment_key(partition_id, seq),
                Body=body,
                IfNoneMatch="*",
                ContentType=SEGMENT_CONTENT_TYPE,
            )
        except ClientError as exc:
            if aws_error_code(exc) in _KEY_EXISTS:
                return False
            raise
        return True

    def fetch(self, partition_id: str, seq: int) -> Segment:
        """The segment whose key names ``seq``, decoded and checked to be that segment."""
        key = segment_key(partition_id, seq)
        try:
            response = self.clients.s3.get_object(Bucket=self.bucket, Key=key)
        except ClientError as exc:
            if aws_error_code(exc) != "NoSuchKey":
                raise
            # Listed, then gone: the caller decides whether retention expired it meanwhile.
            raise CorruptLogError(f"{key}: the segment is missing") from exc
        size = int(response["ContentLength"])
        if size > self.max_segment_bytes:
            response["Body"].close()
            raise SegmentFormatError(
                f"{key} is {size} bytes, past the {self.max_segment_bytes} bytes a segment may "
                "take (docs/FORMAT.md, section 3.4): refused unread"
            )
        segment = decode_segment(response["Body"].read(), max_bytes=self.max_segment_bytes)
        if segment.partition_id != partition_id or segment.first_seq != seq:
            raise CorruptLogError(
                f"{key} holds {segment.partition_id}/{segment.first_seq}, not {partition_id}/{seq}"
            )
        return segment

    # --- listing ----------------------------------------------------------------------
    def starts(self, partition_id: str, from_seq: int = 0) -> Iterator[int]:
        """First seqs of the partition's segment objects at or after ``from_seq``, in order.

        Committed or not: the caller bounds them by the head it trusts.
        """
        for obj in self._objects(partition_id, from_seq):
            yield seq_of_key(obj["Key"])

    def _objects(self, partition_id: str, from_seq: int) -> Iterator[dict[str, Any]]:
        """ListObjectsV2's entries of the partition's objects at or after ``from_seq``."""
        prefix = partition_prefix(partition_id)
        kwargs: dict[str, Any] = {"Bucket": self.bucket, "Prefix": prefix}
        if from_seq > 0:
            kwargs["StartAfter"] = segment_key(partition_id, from_seq - 1)
        for page in self.clients.s3.get_paginator("list_objects_v2").paginate(**kwargs):
            yield from page.get("Contents", [])

    def aged_starts(self, partition_id: str, from_seq: int, head: int) -> Iterator[AgedStart]:
        """The segment objects starting in [from_seq, head), in order, with the time S3
        created each (LastModified, epoch ms): what retention ages a segment by."""
        for obj in self._objects(partition_id, from_seq):
            start = seq_of_key(obj["Key"])
            if start >= head:
                return
            yield AgedStart(start, int(obj["LastModified"].timestamp() * 1000))

    def tag_for_expiry(self, partition_id: str, seq: int) -> None:
        """Put the expiry tag on the segment at ``seq`` (PutObjectTagging: neither a write of
        the object nor a delete; the bucket's lifecycle rule expires it later)."""
        self.clients.s3.put_object_tagging(
            Bucket=self.bucket,
            Key=segment_key(partition_id, seq),
            Tagging={"TagSet": [{"Key": C.EXPIRY_TAG_KEY, "Value": C.EXPIRY_TAG_VALUE}]},
        )

    def listing_back(self, partition_id: str, head: int, *, max_lists: int) -> BackwardListing:
        """The segment objects below ``head``, newest first, listed lazily (see
        ``BackwardListing``); at most ``max_lists`` ListObjectsV2 requests."""
        return BackwardListing(self, partition_id, head, max_lists)

    def segment_start(self, partition_id: str, seq: int) -> int:
        """The first seq of the segment holding committed ``seq``: the greatest start <= seq.

        S3 lists forward only, so look back in doubling windows: O(log distance) requests.
        """
        if seq == 0:
            return 0
        prefix = partition_prefix(partition_id)
        window = _FIRST_LOOKBACK
        while True:
            low = max(seq - window, 0)
            kwargs: dict[str, Any] = {"Bucket": self.bucket, "Prefix": prefix, "MaxKeys": 1000}
            if low > 0:
                kwargs["StartAfter"] = segment_key(partition_id, low - 1)
            page = self.clients.s3.list_objects_v2(**kwargs)
            starts = [seq_of_key(o["Key"]) for o in page.get("Contents", [])]
            below = [s for s in starts if s <= seq]
            if below and (len(below) < len(starts) or not page.get("IsTruncated")):
                return max(below)
            if below:  # the page was full of starts below seq: continue from its end
                window = seq - max(below)
                if window <= 0:
                    return seq
                continue
            if low == 0:
                raise CorruptLogError(f"{partition_id}: no segment holds committed seq {seq}")
            window *= 2

    # --- the committed log ------------------------------------------------------------
    def segments(
        self,
        partition_id: str,
        from_seq: int,
        head: int,
        *,
        prefetch: int = 8,
        horizon: int = 0,
    ) -> Iterator[Segment]:
        """Committed segments overlapping [from_seq, head), in order, verified dense.

        ``head`` is the committed ``nextSequenceNumber`` the caller read: objects at or
        past it are never returned. ``horizon`` is the ``trimHorizonSeq`` read with it:
        ``from_seq`` below it raises TrimmedError (checked before any request). Up to
        ``prefetch`` segments are fetched ahead.
        """
        if from_seq < 0:
            raise ValueError("from_seq must be >= 0")
        if from_seq < horizon:
            raise TrimmedError(partition_id, horizon, from_seq)
        if from_seq >= head:
            return
        expected = self.segment_start(partition_id, from_seq)
        with ThreadPoolExecutor(max(1, prefetch)) as pool:
            window: list[tuple[int, Future[Segment]]] = []
            starts = self.starts(partition_id, expected)
            while True:
                while len(window) < max(1, prefetch):
                    start = next(starts, None)
                    if start is None or start >= head:
                        break
                    window.append((start, pool.submit(self.fetch, partition_id, start)))
                if not window:
                    break
                start, future = window.pop(0)
                if start != expected:
                    raise CorruptLogError(
                        f"{partition_id}: expected the segment at seq {expected}, found "
                        f"{segment_key(partition_id, start)}: a committed segment is missing"
                    )
                segment = future.result()
                expected = segment.next_seq
                yield segment
                if expected >= head:
                    break
        if expected < head:
            raise CorruptLogError(
                f"{partition_id}: committed head is {head} but the log ends at seq {expected}"
            )

    def records(
        self, partition_id: str, from_seq: int, head: int, *, prefetch: int = 8, horizon: int = 0
    ) -> Iterator[LogRecord]:
        """Committed records with from_seq <= seq < head, in order (TrimmedError below
        ``horizon``)."""
        segments = self.segments(partition_id, from_seq, head, prefetch=prefetch, horizon=horizon)
        for segment in segments:
            for record in segment.records:
                if from_seq <= record.seq < head:
                    yield record
