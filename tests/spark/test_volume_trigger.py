"""Compaction started by volume: the partitions table's stream -> the Spark trigger Lambda ->
one compaction run per threshold crossing (shardlog/spark/volume.py).

The handler runs in-process against the embedded AWS: its DynamoDB stream is read by the
local event source (as the deployed mapping would), and its EMR Serverless starts a real
local spark-submit. Most tests use a 'compact' script that blocks until released, so a run
is active exactly as long as a test needs (run without a JVM: it does no Spark work); one
runs the real compaction job.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from lambdas.spark_trigger.handler import create_handler
from shardlog.dal.volume import BacklogCounter
from shardlog.function_settings import SparkTriggerSettings
from shardlog.lake.catalog import open_table
from shardlog.lake.commit import table_watermarks
from shardlog.local.emr_serverless import LOG_ROOT
from shardlog.local.event_sources import DynamoDbStreamSource
from shardlog.local.lambda_context import LambdaContext
from shardlog.spark.trigger import TERMINAL_STATES
from shardlog.spark.volume import volume_client_token
from shardlog.tables import Tables
from tests.spark.helpers import BLOCKING_JOB, provision_trigger, wait_state
from tests.support.aws import AwsEnv
from tests.support.factories import incoming_records, writer_for
from tests.support.faults import LostAnswer

P0, P1 = "shardId-000000000000", "shardId-000000000001"
THRESHOLD = 1_000
T1 = "2024-05-01T10:00:00Z"


class Deployment:
    """The trigger Lambda as deployed with compaction by volume on, its stream batches kept
    so a test can deliver them again, in any order."""

    def __init__(self, aws: AwsEnv, tmp_path: Path, clock: Any, scripts: Path | None) -> None:
        self.settings = provision_trigger(aws, "volume", scripts, compact_after_records=THRESHOLD)
        self.aws = aws
        self.emr = aws.clients.client("emr-serverless")
        self.handle = create_handler(self.settings, aws.clients)
        self.writer = writer_for(aws, clock, segment_max_records=200)
        self.batches: list[dict[str, Any]] = []
        stream_arn = aws.clients.dynamodb.describe_table(TableName=aws.config.partitions_table)[
            "Table"
        ]["LatestStreamArn"]
        self.source = DynamoDbStreamSource(
            aws.clients, stream_arn, self._keep, function_name="shardlog-spark-trigger"
        ).start()

    def _keep(self, event: dict[str, Any], _context: Any) -> None:
        self.batches.append(event)

    def commit(self, partition_id: str, count: int, start: int = 0) -> list[dict[str, Any]]:
        """Commit ``count`` records to a partition; the stream batches that announce it."""
        self.writer.append(partition_id, incoming_records(count, start=start))
        before = len(self.batches)
        self.source.poll_once()
        return self.batches[before:]

    def deliver(self, batch: dict[str, Any]) -> dict[str, Any]:
        return dict(self.handle(batch, LambdaContext("shardlog-spark-trigger")))

    def schedule(self, scheduled_time: str) -> dict[str, Any]:
        return self.deliver_scheduled({"job": "compact", "scheduledTime": scheduled_time})

    def deliver_scheduled(self, event: dict[str, Any]) -> dict[str, Any]:
        return dict(self.handle(event, LambdaContext("shardlog-spark-trigger")))

    def compaction_runs(self) -> list[dict[str, Any]]:
        runs = self.emr.list_job_runs(applicationId=self.settings.application_id)["jobRuns"]
        return [r for r in runs if r["name"] == "shardlog-compact"]

    def release_all(self) -> None:
        for run in self.compaction_runs():
            workdir = LOG_ROOT / run["id"]
            workdir.mkdir(parents=True, exist_ok=True)
            (workdir / "release").write_text("")
            wait_state(self.emr, self.settings.application_id, run["id"], TERMINAL_STATES)

    def counter(self) -> BacklogCounter:
        return BacklogCounter(self.aws.clients, self.aws.config.consumers_table)


@pytest.fixture
def blocking(aws: AwsEnv, tmp_path: Path, clock: Any, runs_without_spark: None) -> Any:
    (tmp_path / "compact.py").write_text(BLOCKING_JOB)
    deployment = Deployment(aws, tmp_path, clock, tmp_path)
    yield deployment
    deployment.release_all()


def test_below_the_threshold_only_the_schedule_starts_a_run(blocking: Deployment) -> None:
    results = [blocking.deliver(b) for b in blocking.commit(P0, 600)]
    results += [blocking.deliver(b) for b in blocking.commit(P1, THRESHOLD - 600 - 1)]
    assert results and not any(r["started"] for r in results)
    assert results[-1]["backlogRecords"] == THRESHOLD - 1
    assert blocking.compaction_runs() == []

    scheduled = blocking.schedule(T1)
    assert scheduled["started"]
    assert [r["id"] for r in blocking.compaction_runs()] == [scheduled["jobRunId"]]
    # The scheduled run takes the backlog: the threshold counts again from its start.
    blocking.release_all()
    after = [blocking.deliver(b) for b in blocking.commit(P0, THRESHOLD - 1, start=600)]
    assert not any(r["started"] for r in after)
    assert after[-1]["backlogRecords"] == THRESHOLD - 1
    assert len(blocking.compaction_runs()) == 1


def test_a_crossing_delivered_twice_and_by_two_partitions_starts_exactly_one_run(
    blocking: Deployment,
) -> None:
    first = blocking.commit(P0, 600)
    # Both partitions cross together: their batches arrive as two shards' would, each twice.
    second = blocking.commit(P1, 600)
    results = [blocking.deliver(b) for b in (*second, *first, *second, *first)]

    started = [r for r in results if r["started"]]
    assert len(started) == 1, results
    assert started[0]["crossing"] == 1 and started[0]["reason"] == "claimed"
    assert [r["id"] for r in blocking.compaction_runs()] == [started[0]["jobRunId"]]
    backlog = blocking.counter().read()
    assert (backlog.counted_records, backlog.crossing, backlog.started_crossing) == (1200, 1, 1)
    assert backlog.records == 0  # the redeliveries added nothing


def test_a_crossing_while_a_run_is_active_waits_for_it(blocking: Deployment) -> None:
    scheduled = blocking.schedule(T1)
    busy = [blocking.deliver(b) for b in blocking.commit(P0, THRESHOLD)]
    assert busy[-1]["reason"] == "a run is active" and not busy[-1]["started"]
    assert len(blocking.compaction_runs()) == 1

    blocking.release_all()
    after = [blocking.deliver(b) for b in blocking.commit(P0, 10, start=THRESHOLD)]
    assert after[-1]["started"] and after[-1]["jobRunId"] != scheduled["jobRunId"]
    assert len(blocking.compaction_runs()) == 2


def test_a_lost_start_answer_starts_no_second_run(blocking: Deployment) -> None:
    lost = LostAnswer(blocking.emr, "StartJobRun")
    batches = blocking.commit(P0, THRESHOLD)
    # Every attempt botocore makes is applied and its answer lost: the invocation fails.
    lost.arm(times=10)
    with pytest.raises(Exception, match="Connection"):
        for batch in batches:
            blocking.deliver(batch)
    lost.disarm()
    assert lost.lost >= 1
    assert blocking.counter().read().unstarted_claim

    # Lambda delivers the failed batch again: the claimed start is resent under its token.
    results = [blocking.deliver(b) for b in batches]
    resent = [r for r in results if r["started"]]
    assert [r["reason"] for r in resent] == ["resent"]
    runs = blocking.compaction_runs()
    assert [r["id"] for r in runs] == [resent[0]["jobRunId"]]
    assert not blocking.counter().read().unstarted_claim
    assert volume_client_token("compact", 1) != volume_client_token("compact", 2)


def test_each_crossing_starts_its_own_run(blocking: Deployment) -> None:
    first = [blocking.deliver(b) for b in blocking.commit(P0, THRESHOLD)]
    blocking.release_all()
    again = [blocking.deliver(b) for b in blocking.commit(P0, THRESHOLD, start=THRESHOLD)]
    runs = [r["jobRunId"] for r in (*first, *again) if r["started"]]
    assert len(runs) == len(set(runs)) == 2
    assert sorted(r["id"] for r in blocking.compaction_runs()) == sorted(runs)
    assert blocking.counter().read().crossing == 2


def test_two_invocations_racing_through_one_crossing_start_one_run(
    blocking: Deployment,
) -> None:
    """One invocation sees the crossing and, between its check for active runs and its
    claim, another (the other shard's batch) sees it too, claims it and starts the run."""
    first = blocking.commit(P0, 600)
    second = blocking.commit(P1, 600)
    blocking.deliver(first[0])
    inner: list[dict[str, Any]] = []

    def other_invocation(**_: Any) -> None:
        if not inner:
            inner.append({})  # once: the other invocation's own check comes through here
            inner[0] = blocking.deliver(second[0])

    blocking.emr.meta.events.register("after-call.emr-serverless.ListJobRuns", other_invocation)
    try:
        outer = blocking.deliver(second[0])
    finally:
        blocking.emr.meta.events.unregister(
            "after-call.emr-serverless.ListJobRuns", other_invocation
        )
    assert inner[0]["reason"] == "claimed" and inner[0]["started"]
    assert outer["reason"] == "claimed by another invocation" and not outer["started"]
    assert [r["id"] for r in blocking.compaction_runs()] == [inner[0]["jobRunId"]]


def test_a_dropped_batch_is_counted_with_the_partitions_next_change(
    blocking: Deployment,
) -> None:
    """A batch the mapping gave up on (its retries exhausted) is not lost to the backlog:
    the next change of that partition is counted from the head counted last."""
    (first,) = blocking.commit(P0, 300)
    blocking.commit(P0, 300, start=300)  # dropped: never delivered
    (third,) = blocking.commit(P0, 300, start=600)
    blocking.deliver(first)
    result = blocking.deliver(third)
    assert result["backlogRecords"] == 900
    assert blocking.counter().read().counted_records == 900


def test_the_run_a_crossing_starts_brings_the_lake_to_the_head(
    aws: AwsEnv, tmp_path: Path, clock: Any
) -> None:
    deployment = Deployment(aws, tmp_path, clock, scripts=None)  # the real spark_jobs/
    below = [deployment.deliver(b) for b in deployment.commit(P1, 300)]
    assert not any(r["started"] for r in below)
    results = [deployment.deliver(b) for b in deployment.commit(P0, THRESHOLD - 300)]
    (started,) = [r for r in results if r["started"]]
    run = wait_state(
        deployment.emr,
        deployment.settings.application_id,
        started["jobRunId"],
        TERMINAL_STATES,
        timeout_s=300,
    )
    assert run["state"] == "SUCCESS", run.get("stateDetails")
    partitions = Tables(aws.clients, aws.config.tables).list_partitions()
    heads = {p.partition_id: p.next_seq for p in partitions}
    lake = deployment.settings.job_args(aws.config.endpoint_url).lake()  # what the run used
    assert table_watermarks(open_table(lake)) == {P0: THRESHOLD - 300, P1: 300} == heads


def test_a_stream_batch_with_compaction_by_volume_off_is_refused(aws: AwsEnv) -> None:
    settings = SparkTriggerSettings(
        application_id="00app",
        execution_role_arn="arn:aws:iam::123456789012:role/spark",
        spark_jobs_uri="s3://artifacts/spark_jobs/",
        spark_deps_uri="s3://artifacts/spark_deps/deps.tar.gz",
        bucket=aws.config.bucket,
        tables=aws.config.tables,
    )
    handle = create_handler(settings, aws.clients)
    with pytest.raises(ValueError, match="SHARDLOG_COMPACT_AFTER_RECORDS"):
        handle({"Records": []}, LambdaContext("shardlog-spark-trigger"))
