"""Retirement: the live set, so the hot paths cost what is live, not what is history.

The hot paths (the Lambda consumers' sweep, shard sync, worker balancing, `shardlog
status`) read the partitions of the **live set** only: one Query of the partitions table's
sparse index ``live`` (docs/TABLES.md), which holds the items that carry the attribute
``live``. A partition enters the live set when its item is created (shard sync or the
ingest commit) and leaves it when it is **retired**: ENDED, and done for everyone who reads
it. History stays readable on request (`shardlog status --all`, a Scan).

Protocol of one retirement pass (``Retirement.run``, a step of shard sync):

1. **Candidates**: the ENDED partitions of the live set, each with the ``liveRevision`` it
   was read at (the revision is read *before* step 2).
2. **Groups**: every consumer group, from the consumers table's sparse index ``groups``
   (only ``$group`` items carry ``groupKind``; worker and Lambda groups both have one).
3. **Done?** For each group, its lease items on the candidates (BatchGetItem, consistent):
   a candidate stays unless every group's checkpoint is ``SHARD_END``; a missing lease item
   is *not* done (a group being created writes its leases after its ``$group`` item). With
   a lake, the raw table's watermark mirror (``$compaction``) must be at the head (or
   ``SHARD_END``) too.
4. **Retire**: one conditional write per done candidate: still ENDED, still live, still at
   the revision of step 1.

Invariant: a partition some group still needs is in the live set. A group created later
may need history (``TRIM_HORIZON``): its creation reads the whole table (it is rare), then,
*after* writing its ``$group`` item, revives every ENDED partition it does not start at
``SHARD_END`` (``revive``: ``live`` back, revision bumped). Either a retirement pass saw the
new group in step 2 (its lease is missing or not at the end: no retirement), or the pass
read the revision before the revival bumped it (its write is refused, or lands first and
the revival undoes it). A group seek that moves a group back does the same.

**Lake tables are readers too.** Each lake table (the raw one and every declared one)
reads the log under a group of its own (``$compaction``, ``$compaction:<table>``: its
watermark mirror, shardlog/dal/consumers.py), registered by a ``$group`` item of kind
``lake``, so step 2 finds it and step 3 waits for its watermark to reach the head. A lake
table's run plans over the live set too (``LakeReader``), once it is **caught up**: on its
runs before that (a new table, or one from before the registration), it registers first,
reads every partition (one Scan) and is caught up once every ENDED partition of such a read
is in the table; the ``$group`` item then says so (its positions, empty). A partition
retired by a pass that had not seen the registration was ENDED before it, so that read
found it, and it was in the table before the reader said it was caught up: a caught-up
reader has every retired partition, and every other one is live.

Retired means done for everyone, so a child whose parent is retired is not held back by
it: the hot paths read parents missing from the index by key, and a retired parent passes
(``shardlog.partitions.parents_done``).

Every step is idempotent and bounded by the live set and the number of groups, never by
the history: requests per pass = 1 Scan of the groups index + ceil(candidates / 100)
BatchGetItem per group (and for the lake) + one UpdateItem per retirement.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from shardlog import constants as C
from shardlog.aws import Clients
from shardlog.clock import Clock, SystemClock
from shardlog.dal.consumers import (
    GroupRecord,
    is_lake_reader,
    mark_lake_reader_caught_up,
    register_lake_reader,
)
from shardlog.dal.partitions import retire, revive
from shardlog.partitions import PartitionState
from shardlog.tables import Lease, PartitionInfo, TableNames, Tables

logger = logging.getLogger("shardlog.retirement")


@dataclass
class RetirementResult:
    candidates: list[str] = field(default_factory=list)
    retired: list[str] = field(default_factory=list)
    held: dict[str, str] = field(default_factory=dict)  # partition -> who still needs it


def group_names(clients: Clients, consumers_table: str) -> list[str]:
    """Every consumer group (its ``$group`` item), from the sparse ``groups`` index."""
    pages = clients.dynamodb.get_paginator("scan").paginate(
        TableName=consumers_table,
        IndexName=C.GROUPS_INDEX,
        ProjectionExpression="#g",
        ExpressionAttributeNames={"#g": C.ATTR_CONSUMER_GROUP},
    )
    return sorted({i[C.ATTR_CONSUMER_GROUP]["S"] for page in pages for i in page["Items"]})


def done_for(reader: str, lease: Lease | None, head: int) -> bool:
    """The reader is done with an ENDED partition of this head: a group checkpointed
    ``SHARD_END`` (what its children wait for); a lake table's watermark reached the head."""
    checkpoint = lease.checkpoint if lease is not None else None
    if checkpoint == C.SHARD_END:
        return True
    lake_at_head = checkpoint is not None and checkpoint.isdigit() and int(checkpoint) >= head
    return is_lake_reader(reader) and lake_at_head


class Retirement:
    """One pass: retire the ENDED partitions of the live set that nobody needs any more.

    ``lake``: the deployment compacts the log into the lake (the raw table's watermark must
    reach each head first). A worker or Lambda group must reach ``SHARD_END``."""

    def __init__(
        self,
        clients: Clients,
        names: TableNames | None = None,
        *,
        lake: bool = True,
        clock: Clock | None = None,
    ) -> None:
        self.clients = clients
        self.tables = Tables(clients, names)
        self.lake = lake
        self.clock = clock or SystemClock()

    def run(self, live: Iterable[PartitionInfo] | None = None) -> RetirementResult:
        """Step 1 to 4 over ``live`` (the live set as the caller read it), else a fresh read."""
        partitions = self.tables.live_partitions() if live is None else list(live)
        candidates = [p for p in partitions if p.state == PartitionState.ENDED]
        result = RetirementResult(candidates=[p.partition_id for p in candidates])
        if not candidates:
            return result
        held = self._holders(candidates)
        result.held = held
        now_ms = self.clock.now_ms()
        for partition in candidates:
            if partition.partition_id in held:
                continue
            if retire(self.clients, self.tables.names.partitions, partition, now_ms):
                result.retired.append(partition.partition_id)
        if result.retired:
            logger.info("retired %d partitions: %s", len(result.retired), result.retired)
        return result

    def _holders(self, candidates: Sequence[PartitionInfo]) -> dict[str, str]:
        """Per candidate still needed, the first group (or the lake) that needs it."""
        ids = [p.partition_id for p in candidates]
        readers = group_names(self.clients, self.tables.names.consumers)
        if self.lake and C.COMPACTION_GROUP not in readers:  # registered by its first run
            readers.append(C.COMPACTION_GROUP)
        held: dict[str, str] = {}
        for group in readers:
            leases = self.tables.leases_on(group, ids)
            for partition in candidates:
                pid = partition.partition_id
                if pid not in held and not done_for(group, leases.get(pid), partition.next_seq):
                    held[pid] = group
        return held


def revive_for(clients: Clients, names: TableNames, partition_ids: Iterable[str]) -> list[str]:
    """Bring these partitions back into the live set (a group created or moved back that
    reads them); the ids revived."""
    return [pid for pid in partition_ids if revive(clients, names.partitions, pid)]


def index_history(clients: Clients, names: TableNames) -> list[str]:
    """Once, after upgrading to the live set: every partition item written before the index
    (neither ``live`` nor ``retiredAt``: shard sync indexes only the shards Kinesis still
    lists) brought into the live set, by one Scan and one revival each; the next retirement
    pass retires those done for everyone. The ids indexed (none the second time)."""
    partitions = Tables(clients, names).list_partitions()
    return revive_for(
        clients, names, [p.partition_id for p in partitions if not p.indexed and not p.retired]
    )


def needs_history(partitions: Iterable[PartitionInfo], positions: Mapping[str, str]) -> list[str]:
    """The ENDED partitions a group starting at ``positions`` (partition -> first seq or
    SHARD_END) still reads: every one it does not start at ``SHARD_END``."""
    return [
        p.partition_id
        for p in partitions
        if p.state == PartitionState.ENDED and positions.get(p.partition_id) != C.SHARD_END
    ]


@dataclass
class LakeReader:
    """What a lake table's run plans over (see the module docstring): ``open`` registers the
    reader and reads the partitions; ``finish`` records it caught up when it is."""

    clients: Clients
    names: TableNames
    group: str  # shardlog.dal.consumers.lake_reader(table)
    record: GroupRecord
    partitions: list[PartitionInfo]

    @classmethod
    def open(
        cls, clients: Clients, names: TableNames, group: str, clock: Clock | None = None
    ) -> LakeReader:
        """Caught up: the live set (one Query). Else registered first, then every partition."""
        now_ms = (clock or SystemClock()).now_ms()
        record = register_lake_reader(clients, names.consumers, group, now_ms)
        tables = Tables(clients, names)
        partitions = tables.live_partitions() if record.positioned else tables.list_partitions()
        return cls(clients, names, group, record, partitions)

    @property
    def caught_up(self) -> bool:
        return self.record.positioned

    def finish(self, watermarks: Mapping[str, int]) -> bool:
        """After the run: caught up once every ENDED partition read is in the table at
        ``watermarks`` (recorded once). Whether the reader is caught up."""
        if self.record.positioned:
            return True
        behind = [
            p.partition_id
            for p in self.partitions
            if p.state == PartitionState.ENDED and watermarks.get(p.partition_id, 0) < p.next_seq
        ]
        if behind:
            logger.info("%s is not caught up yet: %d ENDED partitions", self.group, len(behind))
            return False
        mark_lake_reader_caught_up(self.clients, self.names.consumers, self.record)
        return True
