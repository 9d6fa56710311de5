"""Mutation check: break each safety mechanism in turn, in a scratch copy, and show which
tests catch it.

Each mutation below is a small, realistic bug in one mechanism (a fence dropped, a check
made a no-op, an error swallowed). For each, the repository's files are copied to a
scratch directory, the one edit is applied there (the original text must occur exactly
once, so a moved mechanism fails loudly instead of silently mutating nothing), and the
tests that guard the area run against the copy with this venv's Python (``PYTHONPATH``
points at the copy; the script checks that the copy is what gets imported). A mutation is
*caught* when at least one test fails. The tests run are part of ``make test``, so caught
here means caught by ``make test``. For the fencing mutations the model-based tests also
run alone, to show that the models catch them on their own.

    python scripts/mutants.py                    # every mutation (about 20 minutes)
    python scripts/mutants.py --only take-fence  # one
    python scripts/mutants.py --list
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import click

ROOT = Path(__file__).resolve().parent.parent
PYTHON = ROOT / ".venv" / "bin" / "python"
COPY_IGNORE = shutil.ignore_patterns(
    ".git", ".venv", "node_modules", "cdk.out", "build", ".shardlog", "__pycache__",
    ".pytest_cache", ".mypy_cache", ".ruff_cache", "*.egg-info",
)  # fmt: skip
TIMEOUT_S = 15 * 60

INGEST = ("tests/functional/ingest", "tests/functional/local", "tests/unit")
CONSUMER = ("tests/functional/consumer", "tests/unit")
LAMBDA_CONSUMER = ("tests/functional/lambda_consumer",)
SPARK = ("tests/spark",)
WRITER_MODEL = ("tests/functional/ingest/test_writer_model.py",)
START_POSITIONS = (
    "tests/functional/consumer/test_positions.py",
    "tests/functional/lambda_consumer/test_start_positions.py",
    "tests/functional/lambda_consumer/test_registration.py",
)
START_MODEL = ("tests/functional/consumer/test_start_model.py",)
# The IAM replay: the synthesized policies against every recorded call of the workload.
IAM_REPLAY = ("tests/infra/test_iam_replay.py",)
LAKE_MODEL = ("tests/functional/lake/test_model.py",)
LAKE_COMMIT = ("tests/spark/test_lake_commit.py", *LAKE_MODEL)
LAKE_MAINTENANCE = ("tests/spark/test_lake_maintenance.py", *LAKE_MODEL)
CONSOLE = ("tests/functional/console",)
FILTERS = (
    "tests/functional/lambda_consumer/test_filters.py",
    "tests/unit/test_lambda_consumer_filters.py",
)
CONSUMER_MODELS = (
    "tests/functional/consumer/test_model.py",
    "tests/functional/lambda_consumer/test_model.py",
)
SEEK = (
    "tests/functional/consumer/test_seek.py",
    "tests/functional/lambda_consumer/test_seek.py",
    "tests/unit/test_seek_plan.py",
)
# Typed lake tables and their dead-letter tables (shardlog/spark/typed.py).
TYPED_COMPACTION = ("tests/spark/test_typed_compaction.py",)
# Schema evolution and backfill of typed tables (shardlog/lake/evolution.py, replace.py,
# shardlog/spark/backfill.py).
BACKFILL = ("tests/spark/test_typed_backfill.py",)
# Right-sized files: maintenance's rewrite (shardlog/lake/rewrite.py).
REWRITE = ("tests/spark/test_lake_rewrite.py",)
# Latest by key: upsert tables (shardlog/lake/upsert.py).
UPSERT = (
    "tests/unit/test_lake_upsert_order.py",
    "tests/spark/test_lake_upsert.py",
    "tests/spark/test_typed_upsert.py",
)
IDEMPOTENCE_MODEL = ("tests/functional/ingest/test_idempotence_model.py",)
IDEMPOTENCE = (
    "tests/functional/ingest/test_idempotent_ingest.py",
    "tests/functional/ingest/test_idempotent_resharding.py",
    *IDEMPOTENCE_MODEL,
)
# Compressed segments: the format's own tests and the log's on the embedded AWS.
CODEC = (
    "tests/unit/test_compression.py",
    "tests/unit/test_format.py",
    "tests/functional/ingest/test_compressed_segments.py",
)
# Record retention (shardlog/retention.py): the rule, the trim's order, reads below the horizon.
RETENTION = (
    "tests/unit/test_retention_rule.py",
    "tests/functional/retention/test_trim.py",
    "tests/functional/retention/test_consumers.py",
    "tests/functional/retention/test_cli.py",
)


@dataclass(frozen=True)
class Mutation:
    name: str
    breaks: str  # the mechanism, in words
    path: str
    old: str
    new: str
    tests: tuple[str, ...]
    models: tuple[str, ...] = ()  # the model tests that must catch it on their own

    def apply(self, root: Path) -> None:
        file = root / self.path
        text = file.read_text()
        found = text.count(self.old)
        if found != 1:
            raise click.ClickException(
                f"mutation {self.name}: the text to replace occurs {found} times in "
                f"{self.path} (expected once): the mechanism moved, update scripts/mutants.py"
            )
        file.write_text(text.replace(self.old, self.new))


MUTATIONS = (
    Mutation(
        "commit-head-fence",
        "the commit's condition on the head read (nextSequenceNumber)",
        "shardlog/dal/partitions.py",
        'condition = "#next = :old"\n            values[":old"] = n(commit.head)',
        'condition = "attribute_exists(#next)"',
        INGEST,
        WRITER_MODEL,
    ),
    Mutation(
        "commit-lease-fence",
        "the leaseCounter fence of checkpoints: the ingest commit, consumer and runner checkpoints",
        "shardlog/lease.py",
        "return self._update(lease, tuple(sets), tuple(removes), values).fenced(lease)",
        "return self._update(lease, tuple(sets), tuple(removes), values)",
        INGEST + CONSUMER + LAMBDA_CONSUMER,
        WRITER_MODEL + CONSUMER_MODELS,
    ),
    Mutation(
        "remembered-state-check",
        "trusting a writer's remembered head only if nobody wrote the lease since its commit",
        "shardlog/writer.py",
        "return (acquired.counter, acquired.checkpoint) == (self.counter + 1, self.checkpoint)",
        "return True",
        INGEST,
        WRITER_MODEL,
    ),
    Mutation(
        "remembered-partition-open",
        "a commit from remembered state holding only while the partition is still OPEN",
        "shardlog/dal/partitions.py",
        "        if commit.only_while_open:",
        "        if False:",
        INGEST,
    ),
    Mutation(
        "redelivery-filter",
        "dropping redelivered records (at or below the checkpoint)",
        "shardlog/writer.py",
        "after_checkpoint = _after(records, checkpoint)",
        "after_checkpoint = list(records)",
        INGEST,
        WRITER_MODEL,
    ),
    Mutation(
        "conditional-create",
        "If-None-Match on segment creates (never overwrite an object)",
        "shardlog/segments.py",
        'IfNoneMatch="*",\n',
        "",
        INGEST,
    ),
    Mutation(
        "key-exists-handling",
        "412 handling: an existing object is not ours (adopt or refuse, never count it)",
        "shardlog/segments.py",
        "if aws_error_code(exc) in _KEY_EXISTS:\n                return False",
        "if aws_error_code(exc) in _KEY_EXISTS:\n                return True",
        INGEST,
    ),
    Mutation(
        "adoption-check",
        "verifying a leftover segment holds exactly our next records before adopting it",
        "shardlog/writer.py",
        "if ours.kinesis_sequence_number != theirs.kinesis_sequence_number:",
        "if ours.kinesis_sequence_number is None:",
        # Not the models' to catch: with head and checkpoint read as one state, every leftover
        # a writer of the model meets holds the shard's next records; a foreign one (another
        # stream writing the same partition ids, a hand-made object) needs an example test.
        INGEST,
    ),
    Mutation(
        "reader-density",
        "the reader's density check (no missing segment between two it reads)",
        "shardlog/segments.py",
        "if start != expected:",
        "if start < expected:",
        INGEST + CONSUMER,
    ),
    Mutation(
        "renew-fence",
        "the leaseCounter fence of lease renewals",
        "shardlog/lease.py",
        'values={":expires": n(expires)})\n        return update.fenced(lease)',
        'values={":expires": n(expires)})\n        return update',
        CONSUMER,
        CONSUMER_MODELS[:1],
    ),
    Mutation(
        "take-fence",
        "taking a lease only as it was seen (leaseCounter unchanged)",
        "shardlog/lease.py",
        'condition="#counter = :seen",',
        'condition="attribute_exists(#counter) OR #counter = :seen",',
        CONSUMER + LAMBDA_CONSUMER,
        CONSUMER_MODELS,
    ),
    Mutation(
        "transfer-fence",
        "handing a lease only to the worker whose request stands",
        "shardlog/lease.py",
        ').and_condition("#transferBy = :to")',
        ")",
        CONSUMER,
    ),
    Mutation(
        "parents-before-children",
        "a child partition waits until every parent is consumed to SHARD_END",
        "shardlog/partitions.py",
        "    for parent in parents:\n        info = partitions.get(parent)",
        "    for parent in ():\n        info = partitions.get(parent)",
        CONSUMER + LAMBDA_CONSUMER,
    ),
    Mutation(
        "ingest-error-path",
        "the ingest handler fails the batch on an error (Lambda retries it)",
        "lambdas/ingest/handler.py",
        "metrics.add_metric(C.METRIC_BATCH_FAILED, MetricUnit.Count, 1)\n            raise",
        'metrics.add_metric(C.METRIC_BATCH_FAILED, MetricUnit.Count, 1)\n            return {"batchItemFailures": []}',  # noqa: E501
        INGEST,
    ),
    Mutation(
        "lineage-independent-dedupe",
        "the look-up's parents from ListShards when shard sync has not recorded them yet",
        "shardlog/dedupe.py",
        "            self._list(partition_id, stream)\n",
        "            return item.parents if item is not None else ()  # never lists\n",
        IDEMPOTENCE,
        IDEMPOTENCE_MODEL,
    ),
    Mutation(
        "dedupe-walk-itemless",
        "the look-up walking on through an ancestor with no partition item (split twice)",
        "shardlog/dedupe.py",
        "item = self.tables.get_partition(partition_id)  # None: never ingested",
        "item = self.tables.get_partition(partition_id)\n"
        "                if item is None:\n                    continue",
        IDEMPOTENCE,
        IDEMPOTENCE_MODEL,
    ),
    Mutation(
        "dedupe-latest-arrival",
        "a resend's window measured from the latest copy of its id that reached the log",
        "shardlog/dedupe.py",
        "if arrival_ms > self.arrivals.get(record_id, -1):",
        "if True:",
        IDEMPOTENCE,
    ),
    Mutation(
        "dedupe-batch-window",
        "an earlier record of the batch counting only within the resend's window",
        "shardlog/writer.py",
        "found.add(record.record_id, record.arrival_ms)",
        "found.add(record.record_id, record.arrival_ms + 2**62)",
        IDEMPOTENCE,
        IDEMPOTENCE_MODEL,
    ),
    Mutation(
        "closed-end-nothing-new",
        "a batch that reaches a CLOSED shard's end with nothing new ends the partition",
        "shardlog/writer.py",
        "            and not reaches_end(batch.partition, batch.checkpoint)\n",
        "",
        IDEMPOTENCE,
        IDEMPOTENCE_MODEL,
    ),
    Mutation(
        "dedupe-density",
        "the look-up's check that no committed segment is missing below the head",
        "shardlog/dedupe.py",
        "if segment.next_seq != expected_end:",
        "if segment.next_seq < 0:",
        IDEMPOTENCE,
    ),
    Mutation(
        "dedupe-window-stop",
        "the look-up stopping at the window's start (its cost)",
        "shardlog/dedupe.py",
        "if segment.records[0].arrival_ms < found.since_ms:",
        "if segment.records[0].arrival_ms < 0:",
        IDEMPOTENCE,
    ),
    Mutation(
        "dedupe-limits",
        "the look-up's limits on GETs and bytes (the ingest timeout out of reach)",
        "shardlog/dedupe.py",
        "            or found.segments_read + 1 > self.limits.max_segments\n"
        "            or found.bytes_read + segment.size > self.limits.max_bytes\n",
        "",
        IDEMPOTENCE,
    ),
    Mutation(
        "ingest-list-grant",
        "the ingest role's s3:ListBucket on events/ (the look-up lists segments)",
        "infra/ingest.py",
        "        role.add_to_principal_policy(\n            iam.PolicyStatement(\n"
        "                actions=INGEST_S3_LIST_ACTIONS,",
        "        (lambda _: None)(\n            iam.PolicyStatement(\n"
        "                actions=INGEST_S3_LIST_ACTIONS,",
        ("tests/infra/test_cdk_iam.py",),
    ),
    Mutation(
        "lake-watermark-check",
        "the lake append's check that a batch starts at the table's watermark",
        "shardlog/lake/commit.py",
        "if marks.get(p, 0) != start)",
        "if marks.get(p, 0) < 0)",
        SPARK,
    ),
    Mutation(
        "watermark-condition",
        "the watermark mirror's conditional, counter-fenced write",
        "shardlog/dal/consumers.py",
        ").counter_fenced(mark.counter if mark.exists else None)",
        ")",
        SPARK,
    ),
    Mutation(
        "analytics-totals-check",
        "analytics merging only onto totals that all cover the snapshot the summary names",
        "spark_jobs/analytics.py",
        "!= str(snapshot_id).encode():",
        "is None:",
        ("tests/spark/test_analytics_incremental.py",),
    ),
    Mutation(
        "lake-own-commit-recognition",
        "the lake append recognising its own landed commit (run id, or its files) after a "
        "failed commit, before it calls its batch stale",
        "shardlog/lake/commit.py",
        "landed = _landed(table, batch, marks, stale, sent)",
        "landed = None",
        LAKE_COMMIT,
        LAKE_MODEL,
    ),
    Mutation(
        "lake-commit-deletes-nothing",
        "the lake commit's FileIO that cannot delete (pyiceberg deletes a refused commit's "
        "manifests, also after a refused resend of an applied commit)",
        "shardlog/lake/commit.py",
        "view = keeping_view(table)",
        "view = table",
        LAKE_COMMIT,
        LAKE_MODEL,
    ),
    Mutation(
        "compaction-removes-only-unreferenced",
        "a stale run deleting only the files no snapshot of the table, read afresh, references",
        "shardlog/spark/compaction.py",
        "doomed = [k for k in keys if s3_uri(settings.bucket, k) not in referenced]",
        "doomed = keys",
        ("tests/spark/test_compaction.py",),
    ),
    Mutation(
        "orphan-reference-check",
        "orphan removal keeping every file the table references",
        "shardlog/lake/maintenance.py",
        "if f\"s3://{settings.bucket}/{obj['Key']}\" in referenced:",
        "if False:",
        LAKE_MAINTENANCE,
        LAKE_MODEL,
    ),
    Mutation(
        "orphan-statistics-referenced",
        "statistics files the table's metadata names counting as referenced",
        "shardlog/lake/references.py",
        "files |= {stats.statistics_path for stats in metadata.statistics}",
        "files |= set()",
        ("tests/spark/test_lake_maintenance.py",),
    ),
    Mutation(
        "expiry-keeps-watermark-chain",
        "expiry keeping the snapshots compaction reads its watermarks through",
        "shardlog/lake/maintenance.py",
        "return protected | {s.snapshot_id for s in watermark_chain(table)}",
        "return protected | {s.snapshot_id for s in watermark_chain(table)[:1]}",
        LAKE_MAINTENANCE,
        LAKE_MODEL,
    ),
    Mutation(
        "glue-version-check",
        "the embedded AWS's Glue refusing an UpdateTable from a stale VersionId (without it "
        "a racing commit silently replaces another)",
        "shardlog/local/glue_fidelity.py",
        "if str(wanted) != current:",
        "if False:",
        ("tests/functional/local/test_glue_fidelity.py", *LAKE_MODEL),
        LAKE_MODEL,
    ),
    Mutation(
        "compaction-file-check",
        "advancing nothing unless a batch's files hold exactly its records",
        "shardlog/spark/compaction.py",
        "if (count, low, high) != (plan.records, plan.start, plan.end - 1):",
        "if count < 0:",
        ("tests/unit/test_compaction_file_check.py", *SPARK),
    ),
    Mutation(
        "lake-schema-check",
        "opening the lake table only when its columns are the declared ones (type, required)",
        "shardlog/lake/schema.py",
        "elif not holds(have.field_type, want.kind) or have.required != want.required:",
        "elif False:",
        ("tests/unit/test_lake_schema.py", "tests/spark/test_compaction.py"),
    ),
    Mutation(
        "lake-mapper-per-column",
        "refusing a lake column declared without the mapper that fills it from a segment",
        "shardlog/lake/files.py",
        'problems = [f"column {n} has no mapper" for n in sorted(declared - mapped)]',
        "problems: list[str] = []",
        ("tests/unit/test_lake_schema.py",),
    ),
    Mutation(
        "group-position-at-creation",
        "a group's lease items created at the start positions fixed when it was created",
        "shardlog/consumer/creation.py",
        "checkpoint=record.position(partition.partition_id),",
        "checkpoint=None,",
        START_POSITIONS,
        START_MODEL,
    ),
    Mutation(
        "latest-closed-at-creation",
        "LATEST: a partition closed when the group is created has nothing for it",
        "shardlog/consumer/creation.py",
        "if start.kind is InitialPosition.LATEST and partition.state != PartitionState.OPEN:",
        "if False:",
        START_POSITIONS,
        START_MODEL,
    ),
    Mutation(
        "done-at-creation-after-parents",
        "a partition done at creation is SHARD_END only once its parents are too",
        "shardlog/consumer/creation.py",
        "return C.SHARD_END if done and parents_done else str(seq)",
        "return C.SHARD_END if done else str(seq)",
        START_POSITIONS,
    ),
    Mutation(
        "give-up-fenced-first",
        "a Lambda group's give-up written (fenced) before its on-failure record is sent",
        "shardlog/lambda_consumer/delivery.py",
        "        self._record_give_up(pending)\n",
        "",
        ("tests/functional/lambda_consumer/test_runner_faults.py",),
    ),
    Mutation(
        "multilang-line-cap",
        "the multi-language daemon reading a child's STDOUT at most max_line_bytes a line",
        "shardlog/consumer/multilang.py",
        "for raw in bounded_lines(stream, self.max_line_bytes):\n            if isinstance(raw, "
        "OverlongLine):\n                self._lines.put(raw)",
        "for raw in stream:\n            if isinstance(raw, OverlongLine):\n"
        "                self._lines.put(raw)",
        ("tests/functional/consumer/test_multilang.py",),
    ),
    Mutation(
        "mapping-detach",
        "the embedded AWS's event source mappings leaving a stream's records and a queue's "
        "messages to the local event sources",
        "shardlog/local/event_source_mappings.py",
        "            detach(mapping)\n",
        "",
        ("tests/functional/local/test_event_source_mappings.py",),
    ),
    Mutation(
        "smoke-read-back-once",
        "the smoke test's read-back refusing a record id read more than once",
        "shardlog/smoke/steps.py",
        "if len(copies) > 1)",
        "if len(copies) > 2)",
        ("tests/unit/test_smoke.py",),
    ),
    Mutation(
        "smoke-committed-check",
        "the smoke test waiting until the ingest checkpoint is past its own records",
        "shardlog/smoke/steps.py",
        "if checkpoint is None or not checkpoint.isdigit() or int(checkpoint) < seq:",
        "if checkpoint is None:",
        ("tests/infra/test_smoke.py",),
    ),
    # The IAM replay: one action taken from one role, per function (a statement keeps another
    # action where removing its only one would leave it empty, which synth refuses).
    Mutation(
        "iam-ingest-commit",
        "ingest's UpdateItem of the partitions table (its commit transaction's head update)",
        "infra/ingest.py",
        'INGEST_PARTITIONS_ACTIONS = ["dynamodb:GetItem", "dynamodb:UpdateItem"]',
        'INGEST_PARTITIONS_ACTIONS = ["dynamodb:GetItem"]',
        IAM_REPLAY,
    ),
    Mutation(
        "iam-shard-sync-groups-scan",
        "shard sync's Scan of the groups index (retirement lists every group)",
        "infra/ingest.py",
        '            (["dynamodb:Scan"], [storage.groups_index_arn]),\n',
        "",
        IAM_REPLAY,
    ),
    Mutation(
        "iam-producer-put-records",
        "the producer function's kinesis:PutRecords",
        "infra/producer_api.py",
        'PRODUCER_KINESIS_ACTIONS = ["kinesis:PutRecords"]',
        'PRODUCER_KINESIS_ACTIONS = ["kinesis:DescribeStreamSummary"]',
        IAM_REPLAY,
    ),
    Mutation(
        "iam-waker-stream-read",
        "the waker's dynamodb:GetRecords of the partitions stream (its event source)",
        "infra/lambda_consumers.py",
        '    "dynamodb:GetRecords",\n',
        "",
        IAM_REPLAY,
    ),
    Mutation(
        "iam-runner-lease-create",
        "a Lambda consumer runner's PutItem of its group's lease items",
        "infra/lambda_consumers.py",
        '= ["dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem"]',
        '= ["dynamodb:GetItem", "dynamodb:UpdateItem"]',
        IAM_REPLAY,
    ),
    Mutation(
        "iam-trigger-pass-role",
        "the Spark trigger's iam:PassRole of the execution role (StartJobRun passes it)",
        "infra/spark_runtime.py",
        'actions=["iam:PassRole"],',
        'actions=["iam:GetRole"],',
        IAM_REPLAY,
    ),
    Mutation(
        "iam-spark-lake-commit",
        "the Spark jobs' glue:UpdateTable (the lake table's commit)",
        "infra/lake_catalog.py",
        '"glue:CreateTable", "glue:UpdateTable"]',
        '"glue:CreateTable"]',
        IAM_REPLAY,
    ),
    Mutation(
        "settings-both-tables",
        "a function's settings requiring both table names (TableNames' local defaults never "
        "fill in a deployment's)",
        "shardlog/settings.py",
        "            if not value.get(field):",
        "            if False:",
        ("tests/unit/test_function_settings.py",),
    ),
    Mutation(
        "local-up-needs-checkout",
        "`shardlog local up` refusing, before anything starts, when the handlers cannot be "
        "imported (the wheel alone)",
        "shardlog/local/runtime.py",
        "        require_checkout()\n",
        "",
        ("tests/functional/cli/test_local_up_checkout.py",),
    ),
    Mutation(
        "busy-api-port-named",
        "the producer API's bind turning a port in use into the error naming --api-port",
        "shardlog/local/http_api.py",
        "with listening(PRODUCER_API, self.host, self.port):",
        "if True:",
        ("tests/functional/cli/test_busy_port.py",),
    ),
    Mutation(
        "local-up-stops-on-failure",
        "`shardlog local up` stopping what already started when a later part cannot start",
        "shardlog/local/runtime.py",
        "        except BaseException:\n            self.stop()\n            raise",
        "        except BaseException:\n            raise",
        ("tests/functional/cli/test_busy_port.py",),
    ),
    Mutation(
        "iam-worker-lease-batch-read",
        "a consumer group's managed policy: BatchGetItem of the group's leases (the live set's)",
        "infra/consumers.py",
        '    "dynamodb:BatchGetItem",\n    "dynamodb:GetItem",\n    "dynamodb:PutItem",\n',
        '    "dynamodb:GetItem",\n    "dynamodb:PutItem",\n',
        IAM_REPLAY,
    ),
    Mutation(
        "iam-trimmer-tag",
        "the retention trimmer's s3:PutObjectTagging of the segments below a horizon",
        "infra/retention.py",
        'TRIMMER_OBJECT_ACTIONS = ["s3:PutObjectTagging"]',
        'TRIMMER_OBJECT_ACTIONS = ["s3:GetObjectTagging"]',
        ("tests/infra/test_iam_replay_retention.py",),
    ),
    Mutation(
        "console-escape",
        "the console's HTML escaping of every value (a record's key or data as markup)",
        "shardlog/console/render.py",
        'return html.escape("" if value is None else str(value), quote=True)',
        'return "" if value is None else str(value)',
        CONSOLE,
    ),
    Mutation(
        "console-token",
        "the token every state-changing request of the console must carry",
        "shardlog/console/server.py",
        'if not hmac.compare_digest(form.get("token", ""), self.token):',
        "if False:",
        CONSOLE,
    ),
    Mutation(
        "console-host-header",
        "the console's refusal of a request for another host (DNS rebinding)",
        "shardlog/console/server.py",
        'return host_header in {f"{h}:{self.port}" for h in LOOPBACK_HOSTS}',
        "return True",
        CONSOLE,
    ),
    Mutation(
        "console-lag-on-demand",
        "the overview's request bound: the ingest lag (Kinesis reads) only on demand",
        "shardlog/console/server.py",
        'lag=params.get("lag") == "1"',
        "lag=True",
        CONSOLE,
    ),
    Mutation(
        "console-loopback",
        "the console's refusal to listen beyond 127.0.0.1",
        "shardlog/console/server.py",
        "if host not in LOOPBACK_HOSTS:",
        "if False:",
        CONSOLE,
    ),
    Mutation(
        "codec-ignored",
        "the decoder honouring a segment's codec (version 3 records read as if stored plain)",
        "shardlog/format.py",
        "    if version == VERSION_COMPRESSED:\n",
        "    if False:\n",
        CODEC,
    ),
    Mutation(
        "codec-unknown",
        "refusing a codec the decoder does not implement (zstd's reserved byte read as zlib)",
        "shardlog/format.py",
        "    if codec not in CODECS:\n",
        "    if False:\n",
        CODEC,
    ),
    Mutation(
        "decompress-bound",
        "never decompressing past a segment's declared size (a decompression bomb inflated)",
        "shardlog/format.py",
        "records = inflater.decompress(data, size + 1)",
        "records = inflater.decompress(data)",
        CODEC,
    ),
    Mutation(
        "decompress-limit",
        "refusing a declared decompressed size past SEGMENT_MAX_READ_BYTES",
        "shardlog/format.py",
        "    if size > max_bytes:\n",
        "    if False:\n",
        CODEC,
    ),
    Mutation(
        "stored-size-limit",
        "the segment store refusing an object past its size limit before reading it",
        "shardlog/segments.py",
        "if size > self.max_segment_bytes:",
        "if False:",
        CODEC,
    ),
    Mutation(
        "filter-not-applied",
        "a Lambda group's filterCriteria: records no filter keeps are never invoked",
        "shardlog/lambda_consumer/delivery.py",
        "kept = {r.seq for r in self.filter.keep([f.record for f in fed])}",
        "kept = {f.record.seq for f in fed}",
        FILTERS,
    ),
    Mutation(
        "filtered-batch-checkpoint",
        "the checkpoint past a batch whose records were all filtered out",
        "shardlog/lambda_consumer/delivery.py",
        "self._save(checkpoint=True)  # past records all filtered out",
        "pass  # past records all filtered out",
        FILTERS,
    ),
    Mutation(
        "filter-non-json-data",
        "data that is not JSON matching no filter that names data (as the ESM drops it)",
        "shardlog/lambda_consumer/filters.py",
        "if record[DATA] is _NOT_JSON and self.pattern.names_data:",
        "if False:",
        FILTERS,
    ),
    Mutation(
        "lanes-checkpoint-min",
        "a Lambda group's checkpoint at the lowest seq not done over its lanes (not the highest)",
        "shardlog/lambda_consumer/lanes.py",
        "return min(fronts, default=self.frontier)",
        "return max(fronts, default=self.frontier)",
        (
            "tests/unit/test_lambda_consumer_lanes.py",
            "tests/functional/lambda_consumer/test_lanes.py",
        ),
    ),
    Mutation(
        "runner-environment-check",
        "synth's refusal of a group whose filters overflow the runner's 4 KB environment",
        "infra/lambda_consumers.py",
        "if size > LAMBDA_ENVIRONMENT_BYTES:",
        "if False:",
        ("tests/infra/test_cdk_lambda_consumers.py",),
    ),
    Mutation(
        "ingest-window-whole-seconds",
        "refusing a batching window the event source mapping cannot take (not whole seconds)",
        "shardlog/settings.py",
        "    if window_ms % 1000:",
        "    if False:",
        ("tests/unit/test_settings.py", "tests/functional/cli/test_local_up_dial.py"),
    ),
    Mutation(
        "ingest-segments-per-batch",
        "refusing a batch cut into more segments than the writer creates within its timeout",
        "infra/settings.py",
        "if segments > IC.INGEST_MAX_SEGMENTS_PER_BATCH:",
        "if False:",
        ("tests/unit/test_settings.py",),
    ),
    Mutation(
        "fan-out-subscribe-on-consumer",
        "least privilege with fan-out: SubscribeToShard on the ingest consumer only",
        "infra/ingest.py",
        "(KINESIS_FAN_OUT_CONSUMER_ACTIONS, [self.fan_out_consumer.attr_consumer_arn]),",
        "(KINESIS_FAN_OUT_CONSUMER_ACTIONS, [stream, self.fan_out_consumer.attr_consumer_arn]),",
        ("tests/infra/test_cdk_ingest_dial.py",),
    ),
    Mutation(
        "seek-hold-fence",
        "a group seek's hold: the lease taken from its owner, leaseCounter moved",
        "shardlog/dal/seek.py",
        '"#owner = :me",\n                "#counter = if_not_exists(#counter, :zero) + :one",\n',
        "",
        SEEK,
    ),
    Mutation(
        "seek-parents-first",
        "a group seek places each lease after its parents'",
        "shardlog/consumer/seek.py",
        "for p in lineage_order(partitions)\n        if p.partition_id in positions",
        "for p in sorted(partitions, key=lambda p: p.partition_id)\n"
        "        if p.partition_id in positions",
        SEEK,
    ),
    Mutation(
        "seek-reopened-descendants",
        "a seek that re-opens a finished partition restarts its descendants at 0",
        "shardlog/consumer/seek.py",
        "elif reopened.intersection(partition.parents):",
        "elif False:",
        SEEK,
    ),
    Mutation(
        "seek-clears-retry-state",
        "a seek's placement clears a Lambda group's retry state and pending give-up",
        "shardlog/dal/seek.py",
        "return self._send(held, update.extended(removes=_CLEARED))",
        "return self._send(held, update)",
        SEEK,
    ),
    Mutation(
        "seek-pending-give-up",
        "a seek refused while a Lambda group's give-up may not be sent yet",
        "shardlog/consumer/seek.py",
        "if not pending:\n            return",
        "if True:\n            return",
        SEEK,
    ),
    Mutation(
        "lambda-wake-delivered-already",
        "a Lambda consumer runner's skip of a wake only when the checkpoint reached its head",
        "shardlog/lambda_consumer/runner.py",
        "return checkpoint is not None and checkpoint.isdigit() and int(checkpoint) >= head",
        "return checkpoint is not None and checkpoint.isdigit() and int(checkpoint) >= head - 1",
        ("tests/functional/lambda_consumer/test_wakes.py",),
    ),
    Mutation(
        "typed-dead-letter",
        "a record that does not fit its typed table going to the dead-letter table (here: "
        "counted as not the table's, so dropped past the batch check)",
        "shardlog/spark/typed.py",
        "matched = pc.fill_null(rows.column(MATCHED), False)",
        "matched = pc.and_(pc.fill_null(rows.column(MATCHED), False), "
        "pc.is_null(rows.column(ERROR_FIELD)))",
        TYPED_COMPACTION,
    ),
    Mutation(
        "typed-rejected-watermark",
        "typed compaction skipping the refused records its dead-letter table already holds "
        "(below that table's watermark)",
        "shardlog/spark/typed.py",
        'below = pc.less(refused.column("seq"), self._marks(refused))',
        'below = pc.less(refused.column("seq"), pc.multiply(self._marks(refused), 0))',
        TYPED_COMPACTION,
    ),
    Mutation(
        "segment-fast-read-bounds",
        "the segment decoder's fast read handing a record over only when it ends inside the "
        "records (here: a record running into the checksum is read as one)",
        "shardlog/format.py",
        "        if pos > end or not kseq.isdigit():",
        "        if not kseq.isdigit():",
        ("tests/unit/test_format.py",),
    ),
    Mutation(
        "typed-raw-chunk-rows",
        "a typed table's chunk read from the raw run's files only when they hold each of its "
        "seqs once (here: as many rows as seqs, one of them twice and another missing)",
        "shardlog/spark/typed.py",
        "if mine.num_rows != end - start or not mine.column"
        '("seq").combine_chunks().equals(expected):',
        "if mine.num_rows != end - start:",
        ("tests/unit/test_typed_raw_source.py", *TYPED_COMPACTION),
    ),
    Mutation(
        "typed-raw-holding",
        "a typed table's chunk read from the raw run's files only when that run's batch holds "
        "the whole chunk (here: whenever a file of the partition overlaps it)",
        "shardlog/spark/typed.py",
        "if not low <= start < end <= high:",
        "if not self.ranges.get(partition_id):",
        ("tests/unit/test_typed_raw_source.py", *TYPED_COMPACTION),
    ),
    Mutation(
        "typed-batch-check",
        "typed compaction committing only when each batch was seen whole and every record "
        "accounted for",
        "shardlog/spark/typed.py",
        "    check_typed(plans, stats)\n",
        "",
        TYPED_COMPACTION,
    ),
    Mutation(
        "typed-accounting",
        "typed compaction's batch check requiring every record typed, rejected, already "
        "rejected or not the table's, once",
        "shardlog/spark/typed.py",
        "if not whole or outside or accounted != total[SEEN]:",
        "if not whole or outside:",
        ("tests/unit/test_typed_check.py", *TYPED_COMPACTION),
    ),
    Mutation(
        "typed-parse-once",
        "the typed parse reading each object level's JSON once per record (each read a "
        "column of its own projection, not inlined into every use)",
        "shardlog/spark/payloads.py",
        "        return F.col(name)\n",
        "        return read\n",
        ("tests/spark/test_typed_payloads.py",),
    ),
    Mutation(
        "worker-daemon-reread-changed",
        "the local runs' Python workers reading an archive on their path again when it "
        "changed (only then: shardlog.spark.worker_daemon)",
        "shardlog/spark/worker_daemon.py",
        "_READ_AT.get(archive) == stamp",
        "archive in _READ_AT",
        ("tests/unit/test_worker_daemon.py",),
    ),
    Mutation(
        "typed-decimal-precision-edge",
        "a typed table refusing a decimal with more integer digits than its precision "
        "leaves, from exactly 10^(precision - scale) on",
        "shardlog/spark/payloads.py",
        "F.abs(wide) >= F.lit(",
        "F.abs(wide) > F.lit(",
        ("tests/spark/test_typed_payloads.py",),
    ),
    Mutation(
        "typed-filter-gate",
        "a declared table with a record filter parsing only the records that are its own",
        "shardlog/spark/payloads.py",
        "text if self.gate is None else F.when(self.gate, text)",
        "text",
        ("tests/spark/test_typed_payloads.py",),
    ),
    Mutation(
        "typed-impossible-date",
        "a payload's impossible date (2023-02-29) refused to the dead-letter table, not the "
        "typed compaction's failure (Spark's default parser policy fails the job)",
        "shardlog/spark/session.py",
        '    "spark.sql.legacy.timeParserPolicy": "CORRECTED",\n',
        "",
        ("tests/spark/test_typed_payloads.py",),
    ),
    Mutation(
        "typed-marks-default",
        "typed compaction's dead-letter watermark of a partition it has none for: 0, so "
        "every refused record of that partition goes to the dead-letter table",
        "shardlog/spark/typed.py",
        "return pc.fill_null(pc.take(marks, index), 0)",
        "return pc.fill_null(pc.take(marks, index), 2**62)",
        TYPED_COMPACTION,
    ),
    Mutation(
        "typed-refused-bytes",
        "typed compaction handing its writer a record's bytes whenever the record is refused "
        "(the dead-letter table's data), and only then",
        "shardlog/spark/typed.py",
        "F.when(F.col(ERROR_FIELD).isNotNull(), F.col(DATA))",
        "F.when(F.col(ERROR_FIELD).isNull(), F.col(DATA))",
        TYPED_COMPACTION,
    ),
    Mutation(
        "volume-claim",
        "compaction by volume claiming each threshold crossing before it starts a run",
        "shardlog/spark/volume.py",
        "        if not self.counter.claim(backlog):\n",
        "        if False:\n",
        ("tests/spark/test_volume_trigger.py",),
    ),
    Mutation(
        "volume-token",
        "compaction by volume starting a crossing's run under the crossing's own clientToken",
        "shardlog/spark/volume.py",
        'return hashlib.sha256(f"{run_name(job)}|volume|{crossing}".encode()).hexdigest()',
        'return __import__("uuid").uuid4().hex',
        ("tests/spark/test_volume_trigger.py",),
    ),
    Mutation(
        "volume-count-resume",
        "the backlog counter counting a partition's change from the head counted last when a "
        "batch between was dropped",
        "shardlog/dal/volume.py",
        "            old_head, old_bytes = counted  # counted part of it: add the rest\n",
        "            return Backlog.from_item(raw)\n",
        ("tests/spark/test_volume_trigger.py",),
    ),
    Mutation(
        "volume-count-once",
        "the backlog counter adding a partition's commits once, from the head counted last",
        "shardlog/dal/volume.py",
        '"attribute_not_exists(#h) OR #h = :old",',
        '"attribute_not_exists(#h) OR #h <= :new",',
        ("tests/spark/test_volume_trigger.py",),
    ),
    Mutation(
        "retention-horizon-first",
        "writing the trim horizon before tagging any segment below it for expiry",
        "shardlog/retention.py",
        """        if horizon > partition.trim_horizon:
            self.partitions.advance_horizon(pid, horizon)
        # 3. tag what lies below the horizon written, from where the last trim stopped
        current = self.tables.get_partition(pid) or partition
        trim.horizon = current.trim_horizon
        trim.tagged = self._tag(pid, current.trim_tagged, current.trim_horizon)""",
        """        trim.tagged = self._tag(pid, partition.trim_tagged, horizon)
        if horizon > partition.trim_horizon:
            self.partitions.advance_horizon(pid, horizon)
        current = self.tables.get_partition(pid) or partition
        trim.horizon = current.trim_horizon""",
        RETENTION,
    ),
    Mutation(
        "retention-horizon-up-only",
        "the trim horizon's write moving it only up and never past the committed head",
        "shardlog/dal/partitions.py",
        'condition="(attribute_not_exists(#horizon) OR #horizon < :h) AND #next >= :h",',
        'condition="attribute_exists(#next)",',
        RETENTION,
    ),
    Mutation(
        "retention-lagging-group",
        "holding segments for every consumer group that has not read them",
        "shardlog/retention.py",
        "        if hold_for_groups:",
        "        if False:",
        RETENTION,
    ),
    Mutation(
        "read-below-horizon",
        "answering TrimmedError (not corruption) for a read below the trim horizon",
        "shardlog/segments.py",
        "        if from_seq < horizon:\n            raise TrimmedError(",
        "        if False:\n            raise TrimmedError(",
        RETENTION,
    ),
    Mutation(
        "backfill-watermark-condition",
        "the backfill's swap committed only if no compaction moved the table's watermarks "
        "since its rows were derived",
        "shardlog/lake/replace.py",
        "        if moved:\n            raise LakeConflictError(",
        "        if moved and False:\n            raise LakeConflictError(",
        BACKFILL,
    ),
    Mutation(
        "backfill-derives-the-delta",
        "a backfill's retry deriving the rows a racing compaction appended",
        "shardlog/spark/backfill.py",
        "for plan in plan_ranges(clients, args, covered, typed_marks):",
        "for plan in plan_ranges(clients, args, covered or {}, covered or typed_marks):",
        BACKFILL,
    ),
    Mutation(
        "backfill-keeps-refusals-above",
        "the backfill's dead-letter swap keeping the refusals at or above the typed table's "
        "watermark (a compaction between its two commits)",
        "shardlog/lake/replace.py",
        "        if last < bound:\n            doomed.append(data_file)",
        "        if True:\n            doomed.append(data_file)",
        BACKFILL,
    ),
    Mutation(
        "evolution-refuses-narrowing",
        "schema evolution refusing a type change other than a widening",
        "shardlog/lake/evolution.py",
        "        elif widens(have, want):",
        "        elif True:",
        ("tests/unit/test_lake_evolution.py",),
    ),
    Mutation(
        "window-state-fence",
        "a tumbling window's state written only by the fenced write of its checkpoint",
        "shardlog/dal/consumers.py",
        "        clauses = progress.clauses()\n",
        "        clauses = progress.clauses()\n"
        "        if progress.window is not None:  # the state in a write of its own, unfenced\n"
        "            update_item(self.leases.clients, Update(base.table, base.key,"
        ' ("#window = :window",), values={":window": progress.window.attribute()}))\n',
        ("tests/functional/lambda_consumer/test_windows.py",),
    ),
    Mutation(
        "retire-unchecked-group",
        "retirement's check that every consumer group is at SHARD_END on the partition",
        "shardlog/retirement.py",
        "readers = group_names(self.clients, self.tables.names.consumers)",
        "readers: list[str] = []",
        ("tests/functional/consumer/test_live_set.py",),
    ),
    Mutation(
        "retire-after-revival",
        "the retirement's condition on the revision it was judged at (a group created since "
        "revived the partition)",
        "shardlog/dal/partitions.py",
        'condition=f"#state = :ended AND attribute_exists(#live) AND {revision}",',
        'condition="#state = :ended AND attribute_exists(#live)",',
        ("tests/functional/consumer/test_live_set.py",),
    ),
    Mutation(
        "retired-parent-not-fetched",
        "the hot paths' read by key of a parent the live index does not show",
        "shardlog/tables.py",
        "return LiveLineage(live, {**parents, **by_id})",
        "return LiveLineage(live, by_id)",
        ("tests/functional/consumer/test_live_set.py",),
    ),
    Mutation(
        "lake-reader-retirement",
        "retirement waiting for every lake table's watermark, the declared tables' included, "
        "before it retires a partition",
        "shardlog/retirement.py",
        "    return is_lake_reader(reader) and lake_at_head",
        "    return reader == C.COMPACTION_GROUP and lake_at_head",
        ("tests/functional/lake/test_lake_readers.py",),
    ),
    Mutation(
        "lake-reader-caught-up",
        "a lake table planning over the live set only once it holds every ENDED partition "
        "of its full read (history retired before it existed)",
        "shardlog/retirement.py",
        "        if behind:\n",
        "        if False:\n",
        ("tests/functional/lake/test_lake_readers.py",),
    ),
    Mutation(
        "retention-typed-tables",
        "retention holding the segments a declared lake table does not have yet",
        "shardlog/retention.py",
        "    lake = {g for g in checkpoints.groups if is_lake_reader(g)} | {C.COMPACTION_GROUP}",
        "    lake = {C.COMPACTION_GROUP}",
        RETENTION,
    ),
    Mutation(
        "capacity-runner-reads",
        "the capacity model's count of the Lambda runner's reads per wake (make test checks the "
        "model against a local run at 12 shards; a count one off per commit must fail there)",
        "scripts/capacity.py",
        '"dynamodb:GetItem": 4,',
        '"dynamodb:GetItem": 3,',
        ("tests/functional/local/test_capacity_model.py",),
    ),
    Mutation(
        "upsert-watermark-check",
        "the upsert's check that each partition of its batch starts at the table's watermark "
        "(a re-run or a racing run would apply its updates again)",
        "shardlog/lake/upsert.py",
        "if marks.get(p, 0) != start)",
        "if marks.get(p, 0) < 0)",
        UPSERT,
    ),
    Mutation(
        "upsert-own-commit-recognition",
        "the upsert recognising its own landed commit by its run id after a lost answer",
        "shardlog/lake/upsert.py",
        "own = own_snapshot(table, batch.run_id)",
        "own = None",
        UPSERT,
    ),
    Mutation(
        "upsert-log-clock",
        "the log clock's running maximum within a partition (the higher seq wins even where "
        "the arrival time steps back)",
        "shardlog/lake/upsert.py",
        "clock[part] = np.maximum.accumulate(np.maximum(arrival_ms[part], start))",
        "clock[part] = np.maximum(arrival_ms[part], start)",
        UPSERT,
    ),
    Mutation(
        "upsert-child-after-parents",
        "an upsert table reading a child partition only once its parents are wholly in it",
        "shardlog/lake/upsert.py",
        "(readable if all(done(p) for p in partition.parents) else waiting)",
        "(readable if True else waiting)",
        UPSERT,
    ),
    Mutation(
        "rewrite-replans",
        "maintenance's rewrite planning each attempt afresh from the table it read (after a "
        "refused commit, the first attempt's files and watermarks reused instead)",
        "shardlog/lake/rewrite.py",
        "        plan = plan_day(table, day, rewrite, below)",
        "        plan = [*sent.values()][0][0] if sent else plan_day(table, day, rewrite, below)",
        REWRITE,
    ),
    Mutation(
        "rewrite-carries-watermarks",
        "the rewrite's snapshot carrying the table's watermarks unchanged",
        "shardlog/lake/rewrite.py",
        "                plan.watermarks,",
        "                {},",
        REWRITE,
        LAKE_MODEL,
    ),
    Mutation(
        "rewrite-row-check",
        "a rewritten file checked to hold one log partition's rows in strictly increasing seq "
        "order across the files it replaces, so that its name's range is its rows'",
        "shardlog/lake/rewrite.py",
        "if not ordered or not ours or seqs[0].as_py() <= last:",
        "if not ordered or not ours:",
        ("tests/unit/test_lake_rewrite.py",),
    ),
    Mutation(
        "rewrite-dead-letter-bound",
        "the dead-letter table's rewrite leaving apart the refusals at or above its typed "
        "table's watermark (a file across it would straddle the backfill's bound)",
        "spark_jobs/maintain.py",
        "_maintain(args, tables.rejected, rejected, now, bound)",
        "_maintain(args, tables.rejected, rejected, now, None)",
        ("tests/spark/test_rewrite_jobs.py",),
    ),
    Mutation(
        "kinesis-read-after-position",
        "the embedded Kinesis' GetRecords starting right after the iterator's position (its "
        "bisection; one off re-reads a record)",
        "shardlog/local/kinesis_fidelity.py",
        "start = bisect.bisect_right(numbers, last)",
        "start = bisect.bisect_left(numbers, last)",
        ("tests/functional/local/test_kinesis_fidelity.py",),
    ),
    Mutation(
        "wake-group-held-back",
        "the local wake queue's event source holding back a message group's later messages "
        "behind a failed one (FIFO order per partition)",
        "shardlog/local/event_sources.py",
        "                if not self._invoke(handler, messages[start : start + self.batch_size]):\n"
        "                    return",
        "                if not self._invoke(handler, messages[start : start + self.batch_size]):\n"
        "                    continue",
        ("tests/functional/local/test_event_sources.py",),
    ),
    Mutation(
        "server-process-stdin-stop",
        "the embedded AWS's own process ending when its stdin ends (its parent stops it or "
        "dies): no orphan server",
        "shardlog/local/server_process.py",
        "while stdin.read(65536):",
        "while stdin.read(65536) or not time.sleep(1):",
        ("tests/functional/local/test_server_process.py",),
    ),
    Mutation(
        "server-process-stderr-tail",
        "a child that fails to start reported with the end of its stderr (why it failed)",
        "shardlog/local/server_process.py",
        'said = f"; its stderr ended with:\\n{tail}" if tail else "; it wrote nothing on stderr"',
        'said = "; it wrote nothing on stderr"',
        ("tests/functional/local/test_server_process.py",),
    ),
    Mutation(
        "class-archive-publish-any-exit",
        "the local Spark JVMs' class archive published whatever the JVM's exit: a killed "
        "writer's partial file would become the archive every later JVM maps",
        "shardlog/spark/class_archive.py",
        "        if exit_code != 0 or not written.is_file()",
        "        if not written.is_file()",
        ("tests/unit/test_class_archive.py",),
    ),
    Mutation(
        "class-archive-shared-writer-file",
        "two JVMs writing the class archive at once write to the same file",
        "shardlog/spark/class_archive.py",
        '{os.getpid()}-{next(_written)}.tmp"',
        '{os.getpid()}.tmp"',
        ("tests/unit/test_class_archive.py",),
    ),
    Mutation(
        "unpacked-archive-prune-in-use",
        "the local EMR Serverless prunes an unpacked spark.archives copy a running job "
        "links to (its driver and executors import from it)",
        "shardlog/local/emr_serverless.py",
        "    removed = [p for p in unpacked[kept:] if p.resolve() not in in_use]",
        "    removed = list(unpacked[kept:])",
        ("tests/spark/test_local_emr.py",),
    ),
    Mutation(
        "expression-copy-own-children",
        "the embedded DynamoDB's copy of a kept update expression tree (its validator "
        "replaces nodes in the copy's children: a copy sharing them changes the kept tree)",
        "shardlog/local/expressions.py",
        'new.__dict__ = {"type": state["type"], "children": children, "parent": parent}',
        'new.__dict__ = {"type": state["type"], "children": state["children"], "parent": parent}',
        ("tests/unit/test_expression_copy.py", "tests/functional/local/test_expressions.py"),
    ),
    Mutation(
        "lambda-progress-from-take",
        "a Lambda runner resuming the retry state and pending give-ups on the lease item its "
        "take returned (none read: batches retried from scratch, give-ups never sent)",
        "shardlog/dal/consumers.py",
        "        return LaneProgress.from_item(lease.item)",
        "        return LaneProgress()",
        ("tests/functional/lambda_consumer/test_runner_faults.py",),
    ),
    Mutation(
        "wake-queue-nudge",
        "the local wake queue's source receiving as soon as it is nudged (a wake sent) rather "
        "than at its next poll",
        "shardlog/local/event_sources.py",
        "if not stop.is_set() and self._nudged.wait(seconds):",
        "if not stop.is_set() and stop.wait(seconds):",
        ("tests/functional/local/test_event_sources.py",),
    ),
    Mutation(
        "dynamodb-answer-binary",
        "the embedded DynamoDB's direct answers writing binary attribute values in base64, as "
        "moto's serializer does (else a B, BS or nested binary value reads back wrong)",
        "shardlog/local/dynamodb_answers.py",
        '        return base64.b64encode(value).decode("ascii")',
        '        return value.decode("latin-1")',
        ("tests/functional/local/test_dynamodb_answers.py",),
    ),
    Mutation(
        "dynamodb-answer-shape",
        "the embedded DynamoDB's direct answers leaving out what the operation's output shape "
        "does not have, as moto's serializer does (else PutItem answers moto's internal "
        "ConsumedCapacityUnits)",
        "shardlog/local/dynamodb_answers.py",
        "if k in members and v is not None",
        "if v is not None",
        ("tests/functional/local/test_dynamodb_answers.py",),
    ),
)


@dataclass
class Run:
    caught: bool
    failed: list[str] = field(default_factory=list)
    seconds: float = 0.0
    error: str = ""


@dataclass
class Outcome:
    name: str
    breaks: str
    suite: Run
    models: Run | None = None

    @property
    def caught(self) -> bool:
        return self.suite.caught and (self.models is None or self.models.caught)


def scratch_copy(parent: Path, name: str) -> Path:
    """The repository's files (no venv, no git, no build output) in a fresh directory."""
    target = parent / name
    shutil.copytree(ROOT, target, ignore=COPY_IGNORE, symlinks=True)
    return target


def run_tests(copy: Path, tests: tuple[str, ...], expect_pass: bool = False) -> Run:
    """pytest over ``tests`` in the copy; stop at the first failure unless a pass is expected."""
    env = {**os.environ, "PYTHONPATH": str(copy), "PYTHONDONTWRITEBYTECODE": "1"}
    imported = subprocess.run(
        [str(PYTHON), "-c", "import shardlog, lambdas; print(shardlog.__file__, lambdas.__file__)"],
        cwd=copy, env=env, capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    if not all(Path(p).is_relative_to(copy) for p in imported):
        raise click.ClickException(f"the copy is not what gets imported: {imported}")
    command = [
        str(PYTHON), "-m", "pytest", "-q", "-p", "no:cacheprovider",
        "-n", "0", "-rf", *([] if expect_pass else ["-x"]), *tests,
    ]  # fmt: skip
    started = time.monotonic()
    try:
        done = subprocess.run(
            command, cwd=copy, env=env, capture_output=True, text=True, timeout=TIMEOUT_S
        )
    except subprocess.TimeoutExpired:
        return Run(False, seconds=time.monotonic() - started, error=f"timed out ({TIMEOUT_S} s)")
    seconds = time.monotonic() - started
    failed = [
        line.split(" ", 2)[1] for line in done.stdout.splitlines() if line.startswith("FAILED ")
    ]
    error = "" if failed or done.returncode in (0, 1) else done.stdout[-2000:] + done.stderr[-2000:]
    return Run(done.returncode != 0, failed, seconds, error)


def check(mutation: Mutation | None, parent: Path, models_alone: bool) -> Outcome:
    name = mutation.name if mutation else "baseline"
    copy = scratch_copy(parent, name)
    try:
        if mutation is None:
            tests = tuple(dict.fromkeys(t for m in MUTATIONS for t in m.tests))
            return Outcome(
                name, "nothing (all guarding tests must pass)", run_tests(copy, tests, True)
            )
        mutation.apply(copy)
        suite = run_tests(copy, mutation.tests)
        models = run_tests(copy, mutation.models) if models_alone and mutation.models else None
        return Outcome(name, mutation.breaks, suite, models)
    finally:
        shutil.rmtree(copy, ignore_errors=True)


def line(outcome: Outcome, baseline: bool = False) -> str:
    suite = outcome.suite
    if baseline:
        verdict = "PASS" if not suite.caught else f"FAIL ({len(suite.failed)} failed)"
    else:
        verdict = "CAUGHT" if outcome.caught else "SURVIVED"
    text = f"{outcome.name:<26} {verdict:<9} {suite.seconds:6.0f} s  {outcome.breaks}"
    if suite.failed:
        text += f"\n{'':<28}failed: {', '.join(suite.failed[:3])}"
    if outcome.models is not None:
        models = outcome.models
        state = "caught" if models.caught else "NOT caught"
        text += f"\n{'':<28}model tests alone: {state} ({models.seconds:.0f} s)"
        if models.failed:
            text += f": {', '.join(models.failed[:2])}"
    for run in (suite, outcome.models):
        if run is not None and run.error:
            text += f"\n{'':<28}error: {run.error.strip().splitlines()[-1]}"
    return text


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--only", multiple=True, type=click.Choice([m.name for m in MUTATIONS]),
              help="Run only this mutation (repeatable).")  # fmt: skip
@click.option("--list", "list_only", is_flag=True, help="List the mutations and exit.")
@click.option("--baseline/--skip-baseline", default=True, show_default=True,
              help="First check that the guarding tests pass unmutated.")  # fmt: skip
@click.option("--models/--no-models", default=True, show_default=True,
              help="Also run the model tests alone on the fencing mutations.")  # fmt: skip
@click.option("--json", "as_json", is_flag=True, help="Print the outcomes as JSON.")
def main(only: tuple[str, ...], list_only: bool, baseline: bool, models: bool,
         as_json: bool) -> None:  # fmt: skip
    """Break each safety mechanism in a scratch copy and show which tests catch it."""
    chosen = [m for m in MUTATIONS if not only or m.name in only]
    if list_only:
        for m in chosen:
            click.echo(f"{m.name:<26} {m.path:<30} {m.breaks}")
        return
    if not PYTHON.exists():
        raise click.ClickException(f"{PYTHON} is missing: run `make install` first")
    outcomes: list[Outcome] = []
    with tempfile.TemporaryDirectory(prefix="shardlog-mutants-") as scratch:
        parent = Path(scratch)
        if baseline:
            base = check(None, parent, False)
            if not as_json:
                click.echo(line(base, baseline=True))
            if base.suite.caught:
                raise click.ClickException("the unmutated tests fail: fix them first")
        with click.progressbar(chosen, label="mutations", file=sys.stderr) as bar:
            for mutation in bar:
                outcome = check(mutation, parent, models)
                outcomes.append(outcome)
                if not as_json:
                    click.echo("\n" + line(outcome))
    caught = sum(o.caught for o in outcomes)
    if as_json:
        click.echo(json.dumps([asdict(o) | {"caught": o.caught} for o in outcomes], indent=2))
    else:
        click.echo(f"\n{caught}/{len(outcomes)} mutations caught")
    sys.exit(0 if caught == len(outcomes) else 1)


if __name__ == "__main__":
    main()
