"""What one wake of a Lambda consumer runner did: its outcome and counts (the run's log
line, the local runtime's and the tests' view of it)."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class Outcome(StrEnum):
    CAUGHT_UP = "caught up"  # delivered to the head
    FINISHED = "finished"  # an ENDED partition, checkpointed SHARD_END
    STOPPED = "stopped"  # out of time (or waiting to retry): woke itself again
    BUSY = "busy"  # another runner holds the lease
    NOT_READY = "not ready"  # lineage unknown or parents not finished
    LOST = "lost"  # the lease was taken over mid-run
    DELIVERED = "delivered already"  # the wake's head was below the checkpoint: one read


@dataclass
class RunReport:
    group: str
    partition_id: str
    outcome: Outcome = Outcome.CAUGHT_UP
    delivered: int = 0  # records the function processed successfully
    invocations: int = 0
    failed_invocations: int = 0
    sent_to_destination: int = 0  # records given up on (uninvoked, or after retries)
    filtered_out: int = 0  # records no filter kept: never invoked, checkpointed past
    trimmed_unread: int = 0  # records retention expired below the checkpoint (skipped)
    checkpoint: str | None = None
    head: int = 0
    lag_records: int = 0
    lag_ms: int = 0  # age (by arrival) of the oldest undelivered record; 0 when caught up
    woke: list[str] = field(default_factory=list)  # partitions this run woke

    @property
    def event_count(self) -> int:
        """Records the checkpoint moved past: delivered, filtered out or given up on
        (MetricsConfig's EventCount; a record delivered twice counts twice)."""
        return self.delivered + self.filtered_out + self.sent_to_destination

    def as_dict(self) -> dict[str, Any]:
        return {
            "group": self.group,
            "partitionId": self.partition_id,
            "outcome": str(self.outcome),
            "delivered": self.delivered,
            "invocations": self.invocations,
            "failedInvocations": self.failed_invocations,
            "sentToOnFailure": self.sent_to_destination,
            "filteredOut": self.filtered_out,
            "trimmedUnread": self.trimmed_unread,
            "eventCount": self.event_count,
            "checkpoint": self.checkpoint,
            "head": self.head,
            "lagRecords": self.lag_records,
            "lagMs": self.lag_ms,
            "woke": self.woke,
        }
