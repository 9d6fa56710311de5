"""`shardlog smoke`: a deployed stack checked end to end, found by its CloudFormation outputs.

Run it after `cdk deploy` (docs/DEPLOY.md, "Smoke test"). In order, each step one line:

1. ``produce-api``: 10 records with record ids through the producer API (``ProducerApiUrl``;
   SigV4-signed on AWS), each answered with a shard and sequence number;
2. ``produce-sdk``: 10 more through the SDK (``Producer``, PutRecords on ``StreamName``);
3. ``committed``: waits until the ingest checkpoint of every shard they went to is at or
   past the highest sequence number put there (ingest commits records and checkpoint
   together, so then every smoke record is in the log);
4. ``read-back``: reads those partitions of the log (``BucketName``, ``PartitionsTableName``)
   from the heads seen before producing: every record id exactly once, with its data, each
   key's records in the order they were sent;
5. ``lambda-consumers``: for each Lambda consumer group (``LambdaConsumerGroups``), waits
   until its checkpoint on each of those partitions is past the smoke's last record;
6. ``compaction``: starts a compaction run on ``EmrApplicationId`` as the stack's trigger does
   (a run already active is waited for first: it may predate the smoke's records) and
   waits for SUCCESS;
7. ``athena``: counts the smoke's rows in ``LakeTableName`` through the ``AthenaWorkGroupName``
   workgroup: as many rows as records, as many distinct record ids.

The records are real records of the log: every consumer group and the lake get them. Their
partition keys start with ``shardlog-smoke-<run id>-`` and their data is JSON with a
``shardlogSmoke`` field, so a consumer can skip them. Modules: ``steps`` (the run),
``counts`` (the row count through Athena, or pyiceberg on the embedded AWS).
"""

from shardlog.smoke.counts import AthenaCount, LakeCount, RowCount, RowCounter
from shardlog.smoke.steps import STEPS, SmokeReport, SmokeTest, StepFailed, StepResult

__all__ = [
    "STEPS",
    "AthenaCount",
    "LakeCount",
    "RowCount",
    "RowCounter",
    "SmokeReport",
    "SmokeTest",
    "StepFailed",
    "StepResult",
]
