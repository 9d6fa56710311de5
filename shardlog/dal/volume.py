"""The compaction backlog counter: one consumers-table item, its requests and their refusals.

The item is ``$compaction`` / ``$volume`` (a ``$`` partition id: it describes the group,
it is no partition's watermark; docs/TABLES.md). It holds:

- ``countedRecords``, ``countedBytes``: every record and byte the partitions table's stream
  announced, summed, each commit counted once: per partition, ``h:<partition>`` and
  ``b:<partition>`` are the head and committed bytes counted so far, and a count is
  conditional on the head it starts from (``count``), so a stream batch delivered again
  adds nothing;
- ``claimedRecords``, ``claimedBytes``: the sums at the last claim, or at the start of the
  last scheduled run (``absorb``); the backlog is counted minus claimed;
- ``crossing``: the number of the last claim. ``claim`` is conditional on the crossing it
  read, so of all the invocations that see one threshold crossing exactly one claims it;
- ``startedCrossing``, ``lastRunId``: the last claim whose StartJobRun was answered
  (``confirm``). A claim not yet confirmed is resent by whoever sees it, with the same
  clientToken, so a lost answer or a crash between claim and start never loses the run and
  never starts a second one.

Every refusal leaves this module as an outcome, never as a ClientError.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from botocore.exceptions import ClientError

from shardlog import constants as C
from shardlog.aws import Clients
from shardlog.tables import consumer_key, from_ddb, is_conditional_failure, n

VOLUME_ITEM_ID: Final = "$volume"
COUNTED_RECORDS: Final = "countedRecords"
COUNTED_BYTES: Final = "countedBytes"
CLAIMED_RECORDS: Final = "claimedRecords"
CLAIMED_BYTES: Final = "claimedBytes"
CROSSING: Final = "crossing"
STARTED_CROSSING: Final = "startedCrossing"
LAST_RUN_ID: Final = "lastRunId"
HEAD_PREFIX, BYTES_PREFIX = "h:", "b:"
# A count refused because the item moved on is retried from what it holds, at most this often
# (only a redelivery racing its first delivery refuses twice).
COUNT_ATTEMPTS: Final = 3

_NAMES: Final = {
    "#cr": COUNTED_RECORDS,
    "#cb": COUNTED_BYTES,
    "#clr": CLAIMED_RECORDS,
    "#clb": CLAIMED_BYTES,
    "#x": CROSSING,
    "#sx": STARTED_CROSSING,
    "#run": LAST_RUN_ID,
}


@dataclass(frozen=True)
class PartitionProgress:
    """One partition's head and committed bytes, before and after a stream batch."""

    partition_id: str
    old_head: int
    new_head: int
    old_bytes: int
    new_bytes: int


@dataclass(frozen=True)
class Backlog:
    """The counter as one read or write left it."""

    counted_records: int = 0
    counted_bytes: int = 0
    claimed_records: int = 0
    claimed_bytes: int = 0
    crossing: int = 0
    started_crossing: int = 0
    last_run_id: str | None = None

    @property
    def records(self) -> int:
        return self.counted_records - self.claimed_records

    @property
    def bytes(self) -> int:
        return self.counted_bytes - self.claimed_bytes

    @property
    def unstarted_claim(self) -> bool:
        """A crossing was claimed and its StartJobRun has not been answered (yet)."""
        return self.crossing > self.started_crossing

    @classmethod
    def from_item(cls, raw: dict[str, Any] | None) -> Backlog:
        item = from_ddb(raw or {})
        run = item.get(LAST_RUN_ID)
        return cls(
            counted_records=int(item.get(COUNTED_RECORDS, 0)),
            counted_bytes=int(item.get(COUNTED_BYTES, 0)),
            claimed_records=int(item.get(CLAIMED_RECORDS, 0)),
            claimed_bytes=int(item.get(CLAIMED_BYTES, 0)),
            crossing=int(item.get(CROSSING, 0)),
            started_crossing=int(item.get(STARTED_CROSSING, 0)),
            last_run_id=str(run) if run is not None else None,
        )

    @staticmethod
    def counted_head(raw: dict[str, Any] | None, partition_id: str) -> tuple[int, int] | None:
        """The head and bytes counted so far for a partition (None: never counted)."""
        item = raw or {}
        head = item.get(f"{HEAD_PREFIX}{partition_id}")
        if head is None:
            return None
        size = item.get(f"{BYTES_PREFIX}{partition_id}", {"N": "0"})
        return int(head["N"]), int(size["N"])


class BacklogCounter:
    """The requests on the ``$volume`` item of the consumers table."""

    def __init__(self, clients: Clients, table_name: str, group: str = C.COMPACTION_GROUP):
        self.clients = clients
        self.table_name = table_name
        self.key = consumer_key(group, VOLUME_ITEM_ID)

    def read(self) -> Backlog:
        response = self.clients.dynamodb.get_item(
            TableName=self.table_name, Key=self.key, ConsistentRead=True
        )
        return Backlog.from_item(response.get("Item"))

    def count(self, progress: PartitionProgress) -> Backlog:
        """Add what a partition committed since the head counted for it; a change counted
        already (a redelivery) adds nothing. Returns the counter after."""
        old_head, old_bytes = progress.old_head, progress.old_bytes
        for _ in range(COUNT_ATTEMPTS):
            written, raw = self._count(progress, old_head, old_bytes)
            if written:
                return Backlog.from_item(raw)
            counted = Backlog.counted_head(raw, progress.partition_id)
            if counted is None or counted[0] >= progress.new_head:
                return Backlog.from_item(raw)  # counted already: nothing to add
            old_head, old_bytes = counted  # counted part of it: add the rest
        raise RuntimeError(
            f"backlog count of {progress.partition_id} refused {COUNT_ATTEMPTS} times"
        )

    def _count(
        self, progress: PartitionProgress, old_head: int, old_bytes: int
    ) -> tuple[bool, dict[str, Any] | None]:
        added_records = max(0, progress.new_head - old_head)
        added_bytes = max(0, progress.new_bytes - old_bytes)
        names = {
            **{k: _NAMES[k] for k in ("#cr", "#cb", "#clr", "#clb", "#x", "#sx")},
            "#h": f"{HEAD_PREFIX}{progress.partition_id}",
            "#b": f"{BYTES_PREFIX}{progress.partition_id}",
        }
        request = {
            "TableName": self.table_name,
            "Key": self.key,
            "UpdateExpression": (
                "SET #h = :new, #b = :newBytes, #x = if_not_exists(#x, :zero), "
                "#sx = if_not_exists(#sx, :zero), #clr = if_not_exists(#clr, :zero), "
                "#clb = if_not_exists(#clb, :zero) ADD #cr :records, #cb :bytes"
            ),
            # The first count of a partition starts from the stream's old image; every later
            # one from the head counted last, so each commit is added once.
            "ConditionExpression": "attribute_not_exists(#h) OR #h = :old",
            "ExpressionAttributeNames": names,
            "ExpressionAttributeValues": {
                ":new": n(progress.new_head),
                ":newBytes": n(progress.new_bytes),
                ":old": n(old_head),
                ":zero": n(0),
                ":records": n(added_records),
                ":bytes": n(added_bytes),
            },
        }
        return self._update(request)

    def claim(self, seen: Backlog) -> bool:
        """Claim the next crossing for the backlog as ``seen`` read it: conditional on the
        crossing read, so one invocation claims it however many saw it."""
        request = {
            "TableName": self.table_name,
            "Key": self.key,
            "UpdateExpression": "SET #x = :next, #clr = :records, #clb = :bytes",
            "ConditionExpression": "#x = :seen",
            "ExpressionAttributeNames": {k: _NAMES[k] for k in ("#x", "#clr", "#clb")},
            "ExpressionAttributeValues": {
                ":next": n(seen.crossing + 1),
                ":seen": n(seen.crossing),
                ":records": n(seen.counted_records),
                ":bytes": n(seen.counted_bytes),
            },
        }
        written, _ = self._update(request)
        return written

    def absorb(self) -> bool:
        """A scheduled run started: the backlog counts from here (claimed = counted), so the
        schedule stays the maximum interval and a crossing's run never follows it for records
        it took. False: nothing counted yet."""
        request = {
            "TableName": self.table_name,
            "Key": self.key,
            "UpdateExpression": "SET #clr = #cr, #clb = #cb",
            "ConditionExpression": "attribute_exists(#cr)",
            "ExpressionAttributeNames": {k: _NAMES[k] for k in ("#clr", "#clb", "#cr", "#cb")},
        }
        written, _ = self._update(request)
        return written

    def confirm(self, crossing: int, job_run_id: str) -> bool:
        """Record that the run of ``crossing`` was started (never moves backwards)."""
        request = {
            "TableName": self.table_name,
            "Key": self.key,
            "UpdateExpression": "SET #sx = :crossing, #run = :run",
            "ConditionExpression": "#sx < :crossing",
            "ExpressionAttributeNames": {k: _NAMES[k] for k in ("#sx", "#run")},
            "ExpressionAttributeValues": {":crossing": n(crossing), ":run": {"S": job_run_id}},
        }
        written, _ = self._update(request)
        return written

    def _update(self, request: dict[str, Any]) -> tuple[bool, dict[str, Any] | None]:
        """(written, the item after it, or the item that refused it)."""
        try:
            response = self.clients.dynamodb.update_item(
                **request,
                ReturnValues="ALL_NEW",
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
        except ClientError as exc:
            if not is_conditional_failure(exc):
                raise
            item = getattr(exc, "response", {}).get("Item")
            return False, item
        return True, response.get("Attributes")
