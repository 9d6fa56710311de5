"""The data-access layer: every DynamoDB request shape, condition and refusal test.

Protocol modules (the writer, shard sync, consumer workers and group creation, the Lambda
consumer runner, the compaction mirror, status, the group seek) say what is read and
written, fenced by what, in which order; they call the layer's named requests and get
domain values back (``PartitionInfo``, ``Lease``, ``GroupRecord``, ``Watermark``, an
outcome or a domain error). They never build a request, and a
``ConditionalCheckFailedException`` or a cancelled transaction never leaves the layer. The
layer is:

- ``shardlog/tables.py``: item shapes (``PartitionInfo``, ``Lease``), keys, the plain
  reads of both tables (``Tables``), ``Update`` (a conditional UpdateItem from readable
  parts) and ``update_item``, the one way to send it;
- ``shardlog/lease.py``: the lease requests on the consumers table (acquire, take, renew,
  release, checkpoint, graceful transfer, lease item creation);
- ``shardlog/dal/partitions.py``: the partitions table's requests (the ingest state read
  and commit transaction, lineage, the state transitions);
- ``shardlog/dal/consumers.py``: the consumers table's other items (``$group`` items, a
  Lambda group's retry state and pending give-up, the compaction mirror).
- ``shardlog/dal/seek.py``: a group seek's requests (the seek lock and record on the
  ``$group`` item, the hold and placement of each lease item).

The embedded AWS (shardlog/local/) and the tests build requests of their own on purpose.
"""

from shardlog.dal.partitions import TRANSACTIONAL_READ, TRANSACTIONAL_WRITE

__all__ = ["TRANSACTIONAL_READ", "TRANSACTIONAL_WRITE"]
