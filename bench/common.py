"""What every benchmark shares: the import path, a quiet Powertools, and a measurement row.

Import it first in a benchmark script (``import common``): it makes the repository
importable when the script runs as ``python bench/<name>.py``.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from shardlog.local.quiet import quiet_powertools

# Handlers run in this process: no EMF lines on stdout, no X-Ray, warnings only.
quiet_powertools()


@dataclass
class Measurement:
    """One timed path of a benchmark: ``records`` handled in ``seconds``."""

    name: str
    records: int
    seconds: float

    @property
    def records_per_s(self) -> float:
        return self.records / self.seconds

    def per_1000_records(self, count: int) -> float:
        return 1000 * count / self.records
