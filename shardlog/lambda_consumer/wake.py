"""Waking a Lambda consumer group's runner for a partition, without ever losing a wake-up.

Mechanism (docs/CONSUMERS.md explains the choice):

- each group has an SQS FIFO **wake queue**; a wake is a message whose MessageGroupId is
  the partition id, so at most one runner per (group, partition) is in flight at any
  time (FIFO delivers a message group's next message only after the previous one was
  deleted), and whose MessageDeduplicationId names what woke it, so one commit wakes a
  partition once however often the wake is sent;
- **commits** wake: the partitions table's stream (DynamoDB Streams, new and old images)
  feeds ``wakes_from_changes``: every head that moved, and every partition that became
  ENDED, wakes each group (deduplicated by partition and head);
- the **runner** wakes: after releasing its lease it re-reads the head and wakes itself
  if the group is behind (it stopped before its timeout, or a commit raced the release),
  and it wakes a finished partition's children;
- a **sweep** (scheduled) wakes every (group, partition) that has lag and no live lease,
  deduplicated per sweep, so a wake lost anywhere is found within one sweep interval; and
  every one whose open tumbling window the clock has closed (its final invocation is due).

A wake is only a hint: the runner reads the head, the lease and the checkpoint itself, so
a duplicate, late or spurious wake is harmless. A commit's wake (and a runner's own) names
the head it was sent for: a runner woken for a head the group's checkpoint already reached
has nothing to do for it and stops after that one read (a later commit sends a wake of its
own). An ENDED partition's wakes name no head (its SHARD_END must be written), nor do the
sweep's.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from shardlog import constants as C
from shardlog.aws import Clients
from shardlog.lambda_consumer.windows import closed_by_clock
from shardlog.partitions import PartitionState, lineage_known, parents_done
from shardlog.tables import Lease, Tables

SEND_BATCH = 10  # SendMessageBatch's limit
COMMIT, SWEEP, REWAKE, PARENT_ENDED = "commit", "sweep", "rewake", "parent-ended"


@dataclass(frozen=True)
class Wake:
    """Wake ``group``'s runner for ``partition_id``; ``dedup`` names the cause."""

    group: str
    partition_id: str
    reason: str
    dedup: str
    head: int | None = None  # the committed head it announces (None: run whatever it is)

    def body(self) -> str:
        data: dict[str, object] = {
            "group": self.group,
            "partitionId": self.partition_id,
            "reason": self.reason,
        }
        if self.head is not None:
            data["head"] = self.head
        return json.dumps(data, sort_keys=True)

    @classmethod
    def parse(cls, body: str) -> Wake:
        data = json.loads(body)
        head = data.get("head")
        return cls(
            str(data["group"]),
            str(data["partitionId"]),
            str(data.get("reason", "")),
            "",
            int(head) if isinstance(head, int) and head >= 0 else None,
        )


def commit_wake(group: str, partition_id: str, head: int, state: str) -> Wake:
    """The wake of a commit (or of a partition that became ENDED: no head, so it runs)."""
    announced = None if state == PartitionState.ENDED else head
    return Wake(group, partition_id, COMMIT, f"{partition_id}:{head}:{state}", announced)


def wake_queue_name(group: str, scope: str = "") -> str:
    """The FIFO queue of a group (80 characters at most, [A-Za-z0-9_-] and .fifo).

    ``scope`` (a deployment's stream name) adds a short digest of it, so two deployments
    sharing one account and region (two local runtimes on one embedded AWS) never share a
    queue: a shared queue would hand one deployment's wakes to the other's runner, and FIFO
    deduplication would drop a wake whose id the other sent within five minutes."""
    tag = f"-{scope_tag(scope)}" if scope else ""
    safe = "".join(c if c.isalnum() or c in "-_" else "-" for c in group)[: 60 - len(tag)]
    return f"shardlog-wake-{safe}{tag}.fifo"


def scope_tag(scope: str) -> str:
    """Eight hex digits naming a deployment in its resources' names."""
    return hashlib.sha256(scope.encode()).hexdigest()[:8]


class WakeSender:
    """Sends wakes to the groups' FIFO queues (``queues``: group -> queue URL)."""

    def __init__(self, clients: Clients, queues: Mapping[str, str]) -> None:
        self.clients = clients
        self.queues = dict(queues)

    def send(self, wakes: Iterable[Wake]) -> int:
        by_group: dict[str, list[Wake]] = {}
        for wake in wakes:
            by_group.setdefault(wake.group, []).append(wake)
        sent = 0
        sqs = self.clients.client("sqs")
        for group, group_wakes in by_group.items():
            url = self.queues.get(group)
            if url is None:
                raise KeyError(f"no wake queue for Lambda consumer group {group!r}")
            for start in range(0, len(group_wakes), SEND_BATCH):
                chunk = group_wakes[start : start + SEND_BATCH]
                response = sqs.send_message_batch(
                    QueueUrl=url,
                    Entries=[
                        {
                            "Id": str(i),
                            "MessageBody": w.body(),
                            "MessageGroupId": w.partition_id,
                            "MessageDeduplicationId": w.dedup[:128],
                        }
                        for i, w in enumerate(chunk)
                    ],
                )
                if response.get("Failed"):
                    raise RuntimeError(f"wakes not sent to {group!r}: {response['Failed']}")
                sent += len(chunk)
        return sent


def _head_and_state(image: Mapping[str, Any] | None) -> tuple[int, str] | None:
    if not image:
        return None
    head = image.get(C.ATTR_NEXT_SEQUENCE_NUMBER)
    state = image.get(C.ATTR_STATE, PartitionState.OPEN)
    return (int(head) if head is not None else 0), str(state)


def wakes_from_changes(
    changes: Iterable[tuple[Mapping[str, Any] | None, Mapping[str, Any] | None]],
    groups: Sequence[str],
) -> list[Wake]:
    """Wakes for the partitions-table changes (old image, new image, deserialised): a head
    that moved forward, or a state that became ENDED, wakes every group."""
    wakes: list[Wake] = []
    for old_image, new_image in changes:
        new = _head_and_state(new_image)
        if new is None or new_image is None:
            continue
        old = _head_and_state(old_image) or (0, PartitionState.OPEN)
        moved = new[0] > old[0]
        ended = new[1] == PartitionState.ENDED and old[1] != PartitionState.ENDED
        if not (moved or ended):  # a no-op update, lineage, a CLOSED mark: nothing to read
            continue
        partition_id = str(new_image[C.ATTR_PARTITION_ID])
        wakes += [commit_wake(g, partition_id, new[0], new[1]) for g in groups]
    return wakes


def sweep(tables: Tables, groups: Sequence[str], now_ms: int, sweep_id: str) -> list[Wake]:
    """Wakes for every (group, partition) of the live set that has something to do and no
    live lease. Its reads are bounded by the live set, never by retired history: one Query
    of the live index, the parents it does not show by key, the groups' leases on them."""
    lineage = tables.live_lineage()
    partitions = lineage.known
    wakes: list[Wake] = []
    for group in groups:
        leases = tables.leases_on(group, partitions)
        for partition in lineage.live:
            partition_id = partition.partition_id
            lease = leases.get(partition_id)
            if lease is not None and lease.is_live(now_ms):
                continue  # its runner is at work (or a zombie whose lease will expire)
            if not lineage_known(partition) or not parents_done(
                partition.parents, partitions, leases
            ):
                continue
            checkpoint = lease.checkpoint if lease else None
            if checkpoint == C.SHARD_END:
                continue
            done = int(checkpoint) if checkpoint and checkpoint.isdigit() else 0
            behind = partition.next_seq > done or (checkpoint is None and partition.next_seq > 0)
            if behind or partition.state == PartitionState.ENDED or _window_due(lease, now_ms):
                wakes.append(Wake(group, partition_id, SWEEP, f"{partition_id}:sweep:{sweep_id}"))
    return wakes


def _window_due(lease: Lease | None, now_ms: int) -> bool:
    """An open tumbling window the clock has closed: its final invocation is due, though
    no record may come to wake the partition (shardlog/lambda_consumer/windows.py)."""
    if lease is None or lease.window_end_ms is None:
        return False
    return closed_by_clock(lease.window_end_ms, now_ms)
