"""A consumer group worker's settings: every duration is in milliseconds, named with its unit."""

from __future__ import annotations

from dataclasses import dataclass, field, fields

from shardlog.consumer.positions import StartPosition
from shardlog.exceptions import ValidationError

RESERVED_GROUP_PREFIX = "$"
_MAY_BE_ZERO = {"idle_poll_interval_ms", "active_poll_interval_ms", "active_period_ms"}
MAX_GROUP_CHARS = 256


@dataclass(frozen=True)
class ConsumerSettings:
    # A lease not renewed for this long may be taken by another worker (KCL's failoverTimeMillis).
    lease_duration_ms: int = 10_000
    # Leases are renewed when this long has passed since their last write (a checkpoint renews too).
    renew_interval_ms: int = 3_000
    # How often the worker lists the group's leases, creates missing ones and balances.
    take_interval_ms: int = 3_000
    # At most this many partitions per worker (KCL's maxLeasesForWorker).
    max_leases: int = 10_000
    # At most this many records per process_records call (KCL's maxRecords).
    records_per_call: int = 10_000
    # A caught-up partition is polled again after this long (KCL's idleTimeBetweenReadsInMillis).
    idle_poll_interval_ms: int = 1_000
    # A caught-up partition that delivered records within the last active_period_ms is polled
    # again after this shorter interval instead (never longer than idle_poll_interval_ms):
    # records committed to a busy partition wait at most this long for the worker, while a
    # quiet partition costs one head read per idle_poll_interval_ms. No KCL equivalent.
    active_poll_interval_ms: int = 200
    active_period_ms: int = 10_000
    # Where a partition with no checkpoint starts, when the group is created.
    start_position: StartPosition = field(default_factory=StartPosition.trim_horizon)
    # After a processor failure (a child process that crashed or hung), the worker waits this
    # long before taking that partition again; doubled per consecutive failure, up to the max.
    failure_backoff_ms: int = 1_000
    max_failure_backoff_ms: int = 60_000
    # Rebalancing asks the owner to hand a lease over (it checkpoints first: nothing is
    # delivered twice) instead of stealing it. False: steal at once, as KCL 2 does.
    graceful_handoff: bool = True
    # A handoff request not honoured within this long (the owner hung, or is inside a long
    # batch) falls back to a steal; the owner ignores requests older than this. Must lie
    # between renew_interval_ms (the owner sees a request at its next renewal at the
    # latest) and lease_duration_ms. None: lease_duration_ms // 2, within those bounds.
    handoff_timeout_ms: int | None = None

    def __post_init__(self) -> None:
        for spec in fields(self):
            value = getattr(self, spec.name)
            if isinstance(value, int) and not isinstance(value, bool):
                minimum = 0 if spec.name in _MAY_BE_ZERO else 1
                if value < minimum:
                    raise ValidationError(spec.name, f"must be >= {minimum}", limit=minimum)
        if self.renew_interval_ms >= self.lease_duration_ms:
            raise ValidationError(
                "renew_interval_ms",
                f"must be shorter than lease_duration_ms ({self.lease_duration_ms})",
                limit=self.lease_duration_ms,
            )
        handoff_ms = self.handoff_timeout_ms
        if handoff_ms is not None and handoff_ms >= self.lease_duration_ms:
            raise ValidationError(
                "handoff_timeout_ms",
                f"must be shorter than lease_duration_ms ({self.lease_duration_ms}): a handoff "
                "slower than expiry gains nothing",
                limit=self.lease_duration_ms,
            )
        if handoff_ms is not None and handoff_ms <= self.renew_interval_ms:
            raise ValidationError(
                "handoff_timeout_ms",
                f"must be longer than renew_interval_ms ({self.renew_interval_ms}): an owner "
                "learns of a request at its next renewal at the latest",
                limit=self.renew_interval_ms,
            )
        if self.max_failure_backoff_ms < self.failure_backoff_ms:
            raise ValidationError(
                "max_failure_backoff_ms",
                f"must be >= failure_backoff_ms ({self.failure_backoff_ms})",
                limit=self.failure_backoff_ms,
            )

    def poll_interval_ms(self, since_delivery_ms: int | None) -> int:
        """How long a caught-up partition waits before its next head read, given how long
        ago it last delivered records (None: never)."""
        if since_delivery_ms is not None and since_delivery_ms < self.active_period_ms:
            return min(self.active_poll_interval_ms, self.idle_poll_interval_ms)
        return self.idle_poll_interval_ms

    @property
    def effective_handoff_timeout_ms(self) -> int:
        if self.handoff_timeout_ms is not None:
            return self.handoff_timeout_ms
        default = max(self.lease_duration_ms // 2, self.renew_interval_ms + 1)
        return min(default, self.lease_duration_ms - 1)


def validate_group(group: str) -> str:
    """Group names are 1 to 256 characters; a leading "$" is reserved for shardlog ($ingest)."""
    if not isinstance(group, str) or not group:
        raise ValidationError("group", "must be a non-empty string", limit=1)
    if len(group) > MAX_GROUP_CHARS:
        raise ValidationError(
            "group", f"must be at most {MAX_GROUP_CHARS} characters", limit=MAX_GROUP_CHARS
        )
    if group.startswith(RESERVED_GROUP_PREFIX):
        raise ValidationError(
            "group",
            f"names starting with {RESERVED_GROUP_PREFIX!r} are reserved for shardlog "
            f"(e.g. $ingest, the ingest Lambda's group): {group!r}",
        )
    return group
