"""Injectable clocks. Expiry decides liveness only, never safety, so tests drive time."""

from __future__ import annotations

import threading
import time
from typing import Protocol


class Clock(Protocol):
    def now_ms(self) -> int:
        """Milliseconds since the epoch."""
        ...

    def sleep(self, seconds: float) -> None: ...


class SystemClock:
    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)


class ManualClock:
    """A clock that moves only when told to. ``sleep`` advances it instantly."""

    def __init__(self, start_ms: int = 1_700_000_000_000) -> None:
        self._now_ms = start_ms
        self._lock = threading.Lock()
        self.slept: list[float] = []

    def now_ms(self) -> int:
        with self._lock:
            return self._now_ms

    def advance(self, ms: int) -> None:
        with self._lock:
            self._now_ms += ms

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.advance(int(seconds * 1000))
