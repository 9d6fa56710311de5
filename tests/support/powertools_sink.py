"""What tests/support/powertools_consumer.py's environments processed (one list for all of
them), and the record they refuse (``poison``)."""

from __future__ import annotations

import threading

lock = threading.Lock()
processed: list[bytes] = []
poison: bytes | None = None


def reset(poisoned: bytes | None = None) -> None:
    global poison
    with lock:
        processed.clear()
        poison = poisoned


def process(partition_key: str, data: bytes) -> None:
    if data == poison:
        raise ValueError(f"poison record of key {partition_key}")
    with lock:
        processed.append(data)
