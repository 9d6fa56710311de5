"""The compaction mirror: one ``$compaction`` item per partition in the consumers table.

The lake table is the truth (``shardlog.lake.commit``: watermarks in the snapshot that
appended the records). These items only mirror it for status displays and the consumers
table's vocabulary: ``checkpoint`` is the next seq the table does not hold, or
``SHARD_END`` once an ENDED partition is all in the table. Compaction writes them after
its commit and never reads them back to decide anything. ``pendingCheckpoint`` (the redo
record of the Parquet-directory compaction) is read for old items and removed on write.

Every write is conditional on ``leaseCounter`` as it was read and increments it (the
fencing token of docs/TABLES.md), so two runs mirroring at once cannot interleave. The
reads and that one write are the data-access layer's (``WatermarkItems`` in
shardlog/dal/consumers.py); a refused condition leaves it only as
``WatermarkConflictError``.
"""

from __future__ import annotations

from shardlog import constants as C
from shardlog.dal.consumers import Watermark, WatermarkItems

__all__ = ["Watermark", "WatermarkStore"]


class WatermarkStore(WatermarkItems):
    def mirror(self, mark: Watermark, next_seq: int, *, ended: bool = False) -> Watermark:
        """Set the item to the table's watermark (``SHARD_END`` when the partition is done)."""
        return self.write_checkpoint(mark, C.SHARD_END if ended else str(next_seq))
