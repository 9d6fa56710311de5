"""Record retention with a trim horizon: old segments expire, and the log says so.

Default: keep forever. With a retention of N days (``shardlog:recordRetentionDays``,
``SHARDLOG_RECORD_RETENTION_DAYS``), a segment ``[start, end)`` of a partition is
**eligible** when all of these hold (``eligible``):

1. it is at least N days old: ``now - created >= N days``, ``created`` being the time S3
   created the object (its LastModified). Not the header's ``written at``: the listing
   returns LastModified for free (the header needs a GetObject per segment), and it is the
   very clock the bucket's lifecycle rule counts its days on;
2. the lake holds it: ``end <= watermark``, the next seq the lake table does not hold, for
   every lake table: the raw one and each declared typed table. Each watermark is read from
   the table's mirror in the consumers table (``$compaction``, ``$compaction:<table>``):
   compaction writes it after its Iceberg commit and it only moves up, so it is never ahead
   of the table (a lagging mirror only trims later). ``SHARD_END`` there: all of it. A
   declared table with no mirror item on the partition yet (registered by its first run, a
   ``$group`` item) holds the whole partition;
3. (``hold_for_groups``, on by default) every consumer group has read it: ``end <=
   checkpoint`` for every group with an item in the consumers table, worker and Lambda
   groups alike. ``SHARD_END``: all of it. A group with no lease item on the partition yet,
   or a lease without a checkpoint, holds the whole partition (it may start at seq 0).

The **trim horizon** of a partition (``trimHorizonSeq`` on its item, 0 when absent) is the
end of the longest run of eligible segments from the current horizon: always a segment
boundary, never past the head. An ENDED partition all of whose segments are eligible gets
horizon = head. Below the horizon the log answers TrimmedError naming it (the reader, the
workers' cursor, the Lambda runner's feed, ``shardlog read``); density is checked from the
horizon up, so a missing segment *above* it is still CorruptLogError.

**The order of one trim** (``Trimmer.trim``), so nothing readable disappears before the
horizon says so:

1. **plan**: list the segments from the horizon with their ages, read the watermark and the
   checkpoints, compute the new horizon;
2. **advance** ``trimHorizonSeq`` (a conditional write on the partition item: it only moves
   up and never past ``nextSequenceNumber``) FIRST;
3. **tag** every segment between ``trimTaggedSeq`` and the horizon with the expiry tag
   (``shardlog-expire=trimmed``, PutObjectTagging: neither a put nor a delete of the object);
4. **mark** ``trimTaggedSeq`` = the horizon (conditional: up only, never past the horizon).

A trim that stops anywhere is finished by the next one: a horizon written but not tagged is
tagged then (step 3 lists from ``trimTaggedSeq``), and a tag is only ever put below a
horizon already written. The bucket's lifecycle rule on ``events/``, filtered by the tag
and present only when retention is set, expires the tagged objects (after N days from
their creation, which they already are); nobody is given delete rights on ``events/``: the
bucket policy's denies of DeleteObject and of an unconditional PutObject stay as they are.
Locally the embedded AWS runs no lifecycle: ``shardlog.local.lifecycle`` applies the
bucket's rules on the runtime's clock.

A group whose checkpoint is below the horizon (possible only with ``hold_for_groups`` off)
restarts at the horizon: the records between are counted (``RecordsTrimmedUnread``) and
logged, never read as corruption.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from shardlog import constants as C
from shardlog.aws import Clients
from shardlog.clock import Clock, SystemClock
from shardlog.dal.consumers import Checkpoints, all_checkpoints, is_lake_reader
from shardlog.dal.partitions import PartitionsTable
from shardlog.exceptions import CorruptLogError, ValidationError
from shardlog.segments import AgedStart, SegmentStore, log_prefix
from shardlog.tables import PartitionInfo, TableNames, Tables

DAY_MS = 24 * 3600 * 1000
# The group whose checkpoints are not log positions (Kinesis sequence numbers); the lake
# tables' (``is_lake_reader``) are their watermarks, read on their own.
NOT_READERS = frozenset({C.INGEST_GROUP})
ALL = 2**64  # a checkpoint of SHARD_END: past every seq


@dataclass(frozen=True)
class RetentionPolicy:
    """``days`` None: keep forever (nothing is ever eligible)."""

    days: int | None = None
    hold_for_groups: bool = True

    def __post_init__(self) -> None:
        low, high = C.MIN_RECORD_RETENTION_DAYS, C.MAX_RECORD_RETENTION_DAYS
        if self.days is not None and not low <= self.days <= high:
            raise ValidationError(
                "recordRetentionDays",
                f"{self.days} is outside {low}..{high} days (leave it unset to keep forever)",
                limit=(low, high),
            )

    @property
    def retention_ms(self) -> int | None:
        return None if self.days is None else self.days * DAY_MS

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> RetentionPolicy:
        env = os.environ if env is None else env
        raw = env.get(C.ENV_RECORD_RETENTION_DAYS, "").strip()
        hold = env.get(C.ENV_RETENTION_HOLD_FOR_GROUPS, "true").strip().lower()
        if raw and not raw.isdigit():
            raise ValidationError(C.ENV_RECORD_RETENTION_DAYS, f"{raw!r} is not whole days")
        if hold not in ("true", "false"):
            raise ValidationError(C.ENV_RETENTION_HOLD_FOR_GROUPS, f"{hold!r} is not true/false")
        return cls(int(raw) if raw else None, hold == "true")


@dataclass(frozen=True)
class Holds:
    """What holds a partition's segments: the lake's watermark (the lowest of its tables',
    ``lake_table`` the one) and each group's next seq."""

    watermark: int
    groups: Mapping[str, int] = field(default_factory=dict)
    lake_table: str = "the lake"

    def reason(self, end: int, hold_for_groups: bool) -> str | None:
        """Why a segment ending at ``end`` is held (None: neither lake nor group holds it)."""
        if end > self.watermark:
            return f"{self.lake_table} holds records below {self.watermark} only"
        if hold_for_groups:
            for group, position in sorted(self.groups.items()):
                if end > position:
                    return f"group {group} has read up to {position}"
        return None


def eligible(
    end: int,
    age_ms: int,
    policy: RetentionPolicy,
    holds: Holds,
) -> bool:
    """The rule: a segment ending at ``end`` (exclusive) and ``age_ms`` old may expire."""
    return _why_kept(end, age_ms, policy, holds) is None


def _why_kept(end: int, age_ms: int, policy: RetentionPolicy, holds: Holds) -> str | None:
    retention = policy.retention_ms
    if retention is None:
        return "retention is not set (keep forever)"
    if age_ms < retention:
        return f"younger than {policy.days} days"
    return holds.reason(end, policy.hold_for_groups)


def plan_horizon(
    segments: Iterable[AgedStart],
    horizon: int,
    head: int,
    now_ms: int,
    policy: RetentionPolicy,
    holds: Holds,
) -> tuple[int, str]:
    """The new horizon: the end of the longest run of eligible segments from ``horizon``
    (``segments``: those starting in [horizon, head), in order), and why it stops there.
    ``segments`` is read lazily, one past the first segment kept (its end is the next
    one's start): a trim lists what it may trim, not the whole log above it."""
    listed = iter(segments)
    segment = next(listed, None)
    if segment is not None and segment.start != horizon:
        raise CorruptLogError(
            f"the segment at the trim horizon {horizon} is missing (the first one found "
            f"starts at {segment.start})"
        )
    while segment is not None:
        following = next(listed, None)
        end = following.start if following is not None else head
        kept = _why_kept(end, now_ms - segment.created_ms, policy, holds)
        if kept is not None:
            return horizon, f"segment {segment.start}: {kept}"
        horizon, segment = end, following
    return horizon, "every committed segment is trimmed" if head else "no records"


def holds_of(partition: PartitionInfo, checkpoints: Checkpoints) -> Holds:
    """The lake watermark and every reading group's position on one partition."""
    on_partition = checkpoints.by_partition.get(partition.partition_id, {})

    def position(group: str) -> int:
        checkpoint = on_partition.get(group)
        if checkpoint == C.SHARD_END:
            return ALL
        return int(checkpoint) if checkpoint is not None and checkpoint.isdigit() else 0

    groups = {g: position(g) for g in checkpoints.groups - NOT_READERS if not is_lake_reader(g)}
    # The raw table always holds (no mirror yet: nothing is in the lake); each declared one
    # from its registration on.
    lake = {g for g in checkpoints.groups if is_lake_reader(g)} | {C.COMPACTION_GROUP}
    lowest = min(sorted(lake), key=position)
    name = "the lake" if lowest == C.COMPACTION_GROUP else f"lake table {lowest.split(':', 1)[1]}"
    return Holds(position(lowest), groups, name)


@dataclass
class PartitionTrim:
    """One partition's trim: the horizon before and after, why it stops, what was tagged."""

    partition_id: str
    horizon_before: int
    horizon: int
    reason: str
    tagged: list[int] = field(default_factory=list)

    def describe(self) -> str:
        moved = (
            f"{self.horizon_before} -> {self.horizon}"
            if self.horizon != self.horizon_before
            else f"stays {self.horizon}"
        )
        tagged = f"; tagged {len(self.tagged)} segments" if self.tagged else ""
        return f"{self.partition_id}: horizon {moved} ({self.reason}){tagged}"


class Trimmer:
    """Runs the trim of every partition (see the module docstring for the order)."""

    def __init__(
        self,
        clients: Clients,
        bucket: str,
        tables: TableNames,
        policy: RetentionPolicy,
        clock: Clock | None = None,
    ) -> None:
        self.clients = clients
        self.tables = Tables(clients, tables)
        self.partitions = PartitionsTable(clients, tables)
        self.store = SegmentStore(clients, bucket)
        self.policy = policy
        self.clock = clock or SystemClock()

    def run(self, *, dry_run: bool = False) -> list[PartitionTrim]:
        """Trim every partition; ``dry_run``: plan only, write and tag nothing."""
        if self.policy.days is None:
            return []
        checkpoints = all_checkpoints(self.clients, self.tables.names.consumers)
        return [
            self.trim(partition, checkpoints, dry_run=dry_run)
            for partition in self.tables.list_partitions()
        ]

    def trim(
        self, partition: PartitionInfo, checkpoints: Checkpoints, *, dry_run: bool = False
    ) -> PartitionTrim:
        # 1. plan
        pid, head = partition.partition_id, partition.next_seq
        horizon, reason = plan_horizon(
            self.store.aged_starts(pid, partition.trim_horizon, head),
            partition.trim_horizon,
            head,
            self.clock.now_ms(),
            self.policy,
            holds_of(partition, checkpoints),
        )
        trim = PartitionTrim(pid, partition.trim_horizon, horizon, reason)
        if dry_run:
            return trim
        # 2. advance the horizon first: from here on nothing below it is read
        if horizon > partition.trim_horizon:
            self.partitions.advance_horizon(pid, horizon)
        # 3. tag what lies below the horizon written, from where the last trim stopped
        current = self.tables.get_partition(pid) or partition
        trim.horizon = current.trim_horizon
        trim.tagged = self._tag(pid, current.trim_tagged, current.trim_horizon)
        # 4. remember how far the tags reach
        if current.trim_horizon > current.trim_tagged:
            self.partitions.mark_tagged(pid, current.trim_horizon)
        return trim

    def _tag(self, partition_id: str, tagged: int, horizon: int) -> list[int]:
        """Tag the segments starting in [tagged, horizon) (an expired one is not listed)."""
        if horizon <= tagged:
            return []
        starts: Iterable[AgedStart] = self.store.aged_starts(partition_id, tagged, horizon)
        done = []
        for segment in starts:
            self.store.tag_for_expiry(partition_id, segment.start)
            done.append(segment.start)
        return done


EXPIRY_RULE_ID = "expire-trimmed-segments"
# A trimmed segment's data, once expired, stays a noncurrent version this long (the bucket
# is versioned): a day to notice a mistake, not the 30 of other noncurrent versions.
TRIMMED_NONCURRENT_DAYS = 1


def expiry_rule(days: int) -> dict[str, object]:
    """The bucket's lifecycle rule for trimmed segments, in the S3 API's shape (the CDK
    stack declares the same rule, tests/infra holds them together): objects under
    ``events/`` carrying the expiry tag expire ``days`` after their creation."""
    return {
        "ID": EXPIRY_RULE_ID,
        "Status": "Enabled",
        "Filter": {
            "And": {
                "Prefix": log_prefix(),
                "Tags": [{"Key": C.EXPIRY_TAG_KEY, "Value": C.EXPIRY_TAG_VALUE}],
            }
        },
        "Expiration": {"Days": days},
        "NoncurrentVersionExpiration": {"NoncurrentDays": TRIMMED_NONCURRENT_DAYS},
    }
