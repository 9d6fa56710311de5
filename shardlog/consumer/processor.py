"""Record processors: a callable ``f(records, checkpointer)`` or a KCL-shaped class.

A class processor gets one instance per partition, and these calls, in this order:

- ``initialize(partition_id, start_seq)`` once;
- ``process_records(records, checkpointer)`` zero or more times, records in log order;
- then exactly one of:
  ``shard_ended(checkpointer)``: the partition is finished; the processor must call
  ``checkpointer.checkpoint()`` (SHARD_END) or the call is retried;
  ``lease_lost()``: another worker took the partition; checkpointing is refused;
  ``shutdown_requested(checkpointer)``: the worker stops; checkpoint now, then the
  lease is released for immediate takeover, then ``lease_lost()`` follows (as KCL).

``RecordProcessor`` gives defaults: shard_ended and shutdown_requested checkpoint
everything delivered (process_records returned for it). A plain callable gets the
same defaults. A processor instance (not a class) is shared by every partition the
worker holds and is called from several threads, one partition per thread.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, Protocol

from shardlog.consumer.checkpointer import Checkpointer
from shardlog.format import LogRecord


class RecordProcessor:
    """Base class with KCL's lifecycle. Override process_records; the rest is optional."""

    def initialize(self, partition_id: str, start_seq: int) -> None:
        """Called once before any records; start_seq is the first seq that will be delivered."""

    def process_records(self, records: list[LogRecord], checkpointer: Checkpointer) -> None:
        raise NotImplementedError

    def lease_lost(self) -> None:
        """Another worker owns the partition now; checkpointing is no longer possible."""

    def shard_ended(self, checkpointer: Checkpointer) -> None:
        """Every record of the ENDED partition was delivered: checkpoint SHARD_END."""
        checkpointer.checkpoint()

    def shutdown_requested(self, checkpointer: Checkpointer) -> None:
        """The worker is stopping: last chance to checkpoint before the lease is released."""
        checkpointer.checkpoint()


class PartitionProcessor(Protocol):
    """What the worker drives per partition (the multi-language daemon implements it too)."""

    def initialize(self, partition_id: str, start_seq: int) -> None: ...

    def process_records(self, records: list[LogRecord], checkpointer: Checkpointer) -> None: ...

    def lease_lost(self) -> None: ...

    def shard_ended(self, checkpointer: Checkpointer) -> None: ...

    def shutdown_requested(self, checkpointer: Checkpointer) -> None: ...

    def close(self) -> None: ...


ProcessorFactory = Callable[[str], PartitionProcessor]


class _Adapter:
    """Fills in the lifecycle methods a user processor leaves out."""

    def __init__(self, target: Any) -> None:
        self.target = target
        self._process = target if _is_plain_callable(target) else target.process_records

    def initialize(self, partition_id: str, start_seq: int) -> None:
        method = getattr(self.target, "initialize", None)
        if method is not None and not _is_plain_callable(self.target):
            method(partition_id, start_seq)

    def process_records(self, records: list[LogRecord], checkpointer: Checkpointer) -> None:
        self._process(records, checkpointer)

    def lease_lost(self) -> None:
        self._call("lease_lost")

    def shard_ended(self, checkpointer: Checkpointer) -> None:
        if not self._call("shard_ended", checkpointer):
            checkpointer.checkpoint()

    def shutdown_requested(self, checkpointer: Checkpointer) -> None:
        if not self._call("shutdown_requested", checkpointer):
            checkpointer.checkpoint()

    def close(self) -> None:
        self._call("close")

    def _call(self, name: str, *args: Any) -> bool:
        method = None if _is_plain_callable(self.target) else getattr(self.target, name, None)
        if method is None:
            return False
        method(*args)
        return True


def _is_plain_callable(target: Any) -> bool:
    return callable(target) and not hasattr(target, "process_records")


def processor_factory(processor: Any) -> ProcessorFactory:
    """A per-partition factory for a callable, a processor class or a processor instance."""
    if inspect.isclass(processor):
        if not hasattr(processor, "process_records"):
            raise TypeError(f"{processor.__name__} has no process_records method")
        return lambda _partition_id: _Adapter(processor())
    if hasattr(processor, "process_records") or callable(processor):
        adapter = _Adapter(processor)
        return lambda _partition_id: adapter
    raise TypeError(
        "a processor is a callable f(records, checkpointer), a class with process_records, "
        f"or an instance of one; got {processor!r}"
    )
