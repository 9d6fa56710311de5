"""filterCriteria end to end on the embedded AWS: records no filter keeps never reach the
function, the checkpoint moves past them (a batch of only such records: one fenced write,
as a delivered batch), retries and give-ups see only kept records, the limits at and past
their edge, and the group's EventCount / FilteredOutEventCount / DroppedEventCount."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pytest

from lambdas.lambda_consumer.handler import create_handler
from lambdas.observability import metrics
from shardlog import constants as C
from shardlog.aws import RequestCounter
from shardlog.clock import ManualClock
from shardlog.format import IncomingRecord
from shardlog.lambda_consumer.filters import MAX_FILTERS, MAX_PATTERN_CHARS
from shardlog.lambda_consumer.runner import Outcome, RunReport
from shardlog.lambda_consumer.wake import Wake
from shardlog.local.lambda_context import LambdaContext
from shardlog.tables import Tables
from tests.functional.lambda_consumer.conftest import Start
from tests.support.aws import AwsEnv
from tests.support.factories import append, incoming_records
from tests.support.lambda_consumers import (
    Recorder,
    Seen,
    drive,
    plenty_of_time,
    received,
    runner_for,
)

P = "shardId-000000000000"
BUY = [{"pattern": {"data": {"type": ["buy"]}}}]


def orders(*types: str | None, keys: tuple[str, ...] = (), start: int = 0) -> list[IncomingRecord]:
    """One record per type: data ``{"type": t, "amount": i}`` (None: data that is not JSON);
    partition keys from ``keys`` when given; Kinesis numbering from ``start``."""
    records = incoming_records(len(types), start=start)
    return [
        r._replace(
            data=b"raw \xff bytes" if t is None else json.dumps({"type": t, "amount": i}).encode(),
            partition_key=keys[i] if keys else r.partition_key,
        )
        for i, (r, t) in enumerate(zip(records, types, strict=True))
    ]


def amounts(recorder: Recorder) -> list[int]:
    return [json.loads(s.data)["amount"] for batch in recorder.calls for s in batch]


def checkpoint(aws: AwsEnv, group: str) -> str | None:
    lease = Tables(aws.clients, aws.config.tables).get_lease(group, P)
    return lease.checkpoint if lease else None


def run(runner: Any, request_id: str = "r1") -> RunReport:
    report: RunReport = runner.run(P, request_id=request_id, remaining_ms=plenty_of_time)
    return report


def test_filtered_out_records_never_reach_the_function_and_are_checkpointed_past(
    aws: AwsEnv, clock: ManualClock, start_group: Start
) -> None:
    recorder = Recorder()
    group = start_group(recorder, batch_size=4, filter_criteria=BUY)
    append(aws, P, orders(*["buy", "sell", "sell"] * 4), segment_max_records=5)
    drive(group, clock)
    assert amounts(recorder) == [0, 3, 6, 9]  # the buys, in order
    assert all(json.loads(s.data)["type"] == "buy" for b in recorder.calls for s in b)
    assert checkpoint(aws, "billing") == "12"  # past the sells at the end too


def no_more(counts: Mapping[str, int], than: Mapping[str, int]) -> bool:
    """No operation counted more often than in ``than``."""
    return all(count <= than.get(operation, 0) for operation, count in counts.items())


def test_a_batch_of_only_filtered_out_records_invokes_nothing_and_is_one_checkpoint(
    aws: AwsEnv, clock: ManualClock
) -> None:
    append(aws, P, orders("sell", "sell", "sell", "sell"))
    filtered, delivered = Recorder(), Recorder()
    runner, _ = runner_for(aws, clock, filtered, "filtered", batch_size=4, filter_criteria=BUY)
    everything, _ = runner_for(aws, clock, delivered, "everything", batch_size=4)
    requests = {
        name: RequestCounter().attach(r.clients)
        for name, r in (("filtered", runner), ("everything", everything))
    }
    report = run(runner)
    assert (report.outcome, filtered.calls, report.filtered_out, report.event_count) == (
        Outcome.CAUGHT_UP,
        [],
        4,
        4,
    )
    assert (report.delivered, report.invocations, checkpoint(aws, "filtered")) == (0, 0, "4")
    assert run(everything).delivered == 4
    # No more requests than a delivered batch ...
    assert no_more(requests["filtered"].snapshot(), requests["everything"].snapshot())
    # ... and, for a group under way, one fenced UpdateItem between its take and release.
    append(aws, P, orders("sell", "sell", "sell", "sell", start=4))
    for counter in requests.values():
        counter.reset()
    again = run(runner, "r2")
    assert (again.filtered_out, again.invocations, checkpoint(aws, "filtered")) == (4, 0, "8")
    assert run(everything, "r2").delivered == 4
    assert no_more(requests["filtered"].snapshot(), requests["everything"].snapshot())
    assert (
        requests["filtered"].by_operation["dynamodb.UpdateItem"] == 3
    )  # take, checkpoint, release


def test_retries_bisect_and_give_ups_see_only_kept_records(aws: AwsEnv, clock: ManualClock) -> None:
    def poison(batch: list[Seen]) -> Any:
        if any(json.loads(s.data)["amount"] == 2 for s in batch):
            raise ValueError("poison")
        return None

    recorder = Recorder(poison)
    runner, _ = runner_for(
        aws, clock, recorder, batch_size=6, maximum_retry_attempts=1, filter_criteria=BUY
    )
    append(aws, P, orders("buy", "sell", "buy", "sell", "buy", "sell"))
    report = run(runner)
    assert [[s.seq for s in b] for b in recorder.calls] == [[0, 2, 4], [0], [2], [2], [4]]
    assert (report.delivered, report.filtered_out, report.sent_to_destination) == (2, 3, 1)
    assert report.event_count == 6  # each record once, though 1 and 3 were filtered again
    [failure] = [json.loads(b) for b in received(aws, _failure_queue(aws, runner))]
    info = failure["shardlogBatchInfo"]
    assert (info["startSequenceNumber"], info["endSequenceNumber"], info["batchSize"]) == (2, 2, 1)
    assert checkpoint(aws, "billing") == "6"


def _failure_queue(aws: AwsEnv, runner: Any) -> str:
    arn = runner.settings.consumer.on_failure_destination
    return str(aws.clients.client("sqs").get_queue_url(QueueName=arn.split(":")[-1])["QueueUrl"])


def test_data_that_is_not_json_matches_only_filters_without_data(
    aws: AwsEnv, clock: ManualClock, start_group: Start
) -> None:
    recorder = Recorder()
    criteria = [
        {"pattern": {"partitionKey": [{"prefix": "vip-"}]}},
        {"pattern": {"data": {"type": ["buy"]}}},
    ]
    group = start_group(recorder, filter_criteria=criteria)
    keys = ("vip-1", "std-1", "std-2", "std-3", "vip-2", "std-4")
    append(aws, P, orders(None, None, "buy", "sell", "sell", None, keys=keys))
    drive(group, clock)
    assert [s.key for b in recorder.calls for s in b] == ["vip-1", "std-2", "vip-2"]
    assert checkpoint(aws, "billing") == "6"


def test_five_filters_one_of_4096_characters_are_or_ed(
    aws: AwsEnv, clock: ManualClock, start_group: Start
) -> None:
    head = '{"partitionKey":["key-4","'
    longest = head + "x" * (MAX_PATTERN_CHARS - len(head) - 3) + '"]}'
    assert len(longest) == MAX_PATTERN_CHARS
    criteria = [{"pattern": {"partitionKey": [f"key-{i}"]}} for i in range(MAX_FILTERS - 1)]
    recorder = Recorder()
    group = start_group(recorder, filter_criteria=[*criteria, {"pattern": longest}])
    keys = tuple(f"key-{i % 6}" for i in range(12))
    append(aws, P, orders(*["sell"] * 12, keys=keys))
    drive(group, clock)
    assert [s.key for b in recorder.calls for s in b] == [k for k in keys if k != "key-5"]
    assert checkpoint(aws, "billing") == "12"


@pytest.mark.parametrize(
    ("criteria", "field"),
    [
        ([{"pattern": {"partitionKey": [str(i)]}} for i in range(MAX_FILTERS + 1)], "at most 5"),
        (
            [{"pattern": '{"partitionKey":["' + "x" * MAX_PATTERN_CHARS + '"]}'}],
            "filterCriteria[0].pattern: 4117 characters: at most 4096",
        ),
        (
            [{"pattern": {"data": {"amount": [{"numeric": [">", "ten"]}]}}}],
            "filterCriteria[0].pattern.data.amount[0].numeric: must be a number",
        ),
    ],
)
def test_past_the_limits_a_group_is_refused_before_it_starts(
    start_group: Start, criteria: Any, field: str
) -> None:
    with pytest.raises(ValueError, match=field.replace("[", r"\[").replace("]", r"\]")):
        start_group(Recorder(), filter_criteria=criteria)


def test_the_runner_publishes_the_groups_event_counts(aws: AwsEnv, clock: ManualClock) -> None:
    def poison(batch: list[Seen]) -> Any:
        if any(s.seq == 0 for s in batch):
            raise ValueError("poison")
        return None

    recorder = Recorder(poison)
    runner, _ = runner_for(
        aws, clock, recorder, batch_size=10, maximum_retry_attempts=0, filter_criteria=BUY
    )
    append(aws, P, orders("buy", "sell", "buy", "buy", "sell"))
    handler = create_handler(runner.settings, runner.clients, clock, invoker=runner.invoker)
    wake = Wake("billing", P, "commit", "d").body()
    event = {"Records": [{"messageId": "m1", "receiptHandle": "h", "body": wake}]}
    context = LambdaContext("runner", timeout_ms=900_000, clock=clock)
    assert handler(event, context) == {"batchItemFailures": []}
    emitted = metrics.serialize_metric_set()
    [directive] = emitted["_aws"]["CloudWatchMetrics"]
    assert directive["Namespace"] == C.METRICS_NAMESPACE
    assert [d for d in directive["Dimensions"][0] if d != "service"] == [C.DIMENSION_CONSUMER_GROUP]
    assert emitted[C.DIMENSION_CONSUMER_GROUP] == "billing"
    counts = {  # EMF carries a value or a list of values
        name: sum(emitted[name]) if isinstance(emitted[name], list) else emitted[name]
        for name in (
            C.METRIC_EVENT_COUNT,
            C.METRIC_FILTERED_OUT_EVENT_COUNT,
            C.METRIC_DROPPED_EVENT_COUNT,
        )
    }
    # 0 given up (bisected down to it, no retry), 2 and 3 delivered, 1 and 4 filtered out
    assert counts == {"EventCount": 5, "FilteredOutEventCount": 2, "DroppedEventCount": 1}
