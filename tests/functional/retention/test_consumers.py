"""Consumer groups and the trim horizon: a Lambda group whose checkpoint is below it (only
possible when retention does not hold for groups) restarts at it, counted; a group created
at TRIM_HORIZON after a trim starts at the horizon."""

from __future__ import annotations

from shardlog.clock import ManualClock
from shardlog.local.lifecycle import expire_now
from shardlog.retention import RetentionPolicy
from shardlog.tables import Tables
from tests.functional.retention.test_trim import later, set_checkpoint, trimmer, write_log
from tests.support.aws import AwsEnv
from tests.support.lambda_consumers import Recorder, plenty_of_time, runner_for

P = "shardId-000000000000"


def trim_to_4(aws: AwsEnv, policy: RetentionPolicy) -> None:
    """A log [0, 6) in segments of 2, the lake at 4, trimmed to 4 and expired below it."""
    set_checkpoint(aws, "$compaction", "4")
    clock = later(8)
    [trim] = trimmer(aws, clock, policy).run()
    assert trim.horizon == 4
    expire_now(aws.clients, aws.config.bucket, clock.now_ms())


def test_a_lambda_group_below_the_horizon_restarts_at_it_counted(
    aws: AwsEnv, clock: ManualClock
) -> None:
    write_log(aws, [2, 2, 2])
    recorder = Recorder()
    runner, _ = runner_for(aws, clock, recorder, "slow")
    set_checkpoint(aws, "slow", "1")  # it read seq 0, then stalled
    trim_to_4(aws, RetentionPolicy(days=7, hold_for_groups=False))

    report = runner.run(P, request_id="r1", remaining_ms=plenty_of_time)

    assert report.trimmed_unread == 3
    assert report.as_dict()["trimmedUnread"] == 3
    assert recorder.seqs(P) == [4, 5]
    lease = Tables(aws.clients, aws.config.tables).get_lease("slow", P)
    assert lease is not None and lease.checkpoint == "6"


def test_a_group_created_at_trim_horizon_after_a_trim_starts_at_the_horizon(
    aws: AwsEnv, clock: ManualClock
) -> None:
    write_log(aws, [2, 2, 2])
    trim_to_4(aws, RetentionPolicy(days=7))  # no group yet: only the lake holds
    recorder = Recorder()
    runner, _ = runner_for(aws, clock, recorder, "late", starting_position="TRIM_HORIZON")
    report = runner.run(P, request_id="r1", remaining_ms=plenty_of_time)
    assert report.trimmed_unread == 0
    assert recorder.seqs(P) == [4, 5]
    lease = Tables(aws.clients, aws.config.tables).get_lease("late", P)
    assert lease is not None and lease.checkpoint == "6"
