"""The console's pages against `local up`'s runtime with produced data: the numbers equal
`shardlog status --json` and `shardlog read`, records are found by seq, time and key,
every value is escaped, and bad input answers a message with a 4xx status."""

from __future__ import annotations

import base64
import html
import json
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.support.console import (
    BINARY_DATA,
    BINARY_KEY,
    GROUP,
    POISON_KEY,
    SCRIPT_DATA,
    SCRIPT_KEY,
    ConsoleUnderTest,
    cells,
    console_under_test,
    number,
    read_lines,
    shardlog,
)

# One module fixture (the runtime with its data) and, for the browser, one Chromium: under
# pytest-xdist the module stays on one worker.
pytestmark = pytest.mark.xdist_group("console-pages")


@pytest.fixture(scope="module")
def console() -> Iterator[ConsoleUnderTest]:
    with console_under_test() as running:
        yield running


def test_the_overview_shows_what_status_json_shows(console: ConsoleUnderTest) -> None:
    status, page = console.get("/?lag=1")
    assert status == 200
    shown = cells(page).tables["partitions"]
    expected = json.loads(shardlog(console, "status", "--json"))
    assert len(expected) == 5  # two roots, a split's two children, a merge's child
    assert sorted(shown) == sorted(row["partitionId"] for row in expected)
    for row in expected:
        cell = shown[row["partitionId"]]
        assert cell["state"] == row["state"]
        assert number(cell["nextSeq"]) == row["nextSeq"]
        assert cell["ingestCheckpoint"] == (row["ingestCheckpoint"] or "-")
        assert cell["leaseOwner"] == (row["leaseOwner"] or "-")
        assert number(cell["lagRecords"]) == row["lagRecords"]
        assert cell["parents"] == ", ".join(row["parents"])
    # The lineage: a box per partition, an arrow per (parent, child).
    assert page.count('<g data-partition="') == 5
    assert page.count("<line ") == sum(len(row["parents"]) for row in expected) == 4


def test_the_overview_reads_no_shard_unless_asked(console: ConsoleUnderTest) -> None:
    _, page = console.get("/")
    shown = cells(page).tables["partitions"]
    assert {row["lagRecords"] for row in shown.values()} == {"not read"}
    assert 'id="read-lag"' in page


def test_the_group_page_shows_what_status_group_json_shows(console: ConsoleUnderTest) -> None:
    status, page = console.get(f"/group?name={GROUP}")
    assert status == 200, page
    shown = cells(page)
    expected = json.loads(shardlog(console, "status", "--group", GROUP, "--json"))
    assert len(expected) == 5
    for row in expected:
        cell = shown.tables["progress"][row["partitionId"]]
        assert number(cell["nextSeq"]) == row["nextSeq"]
        assert cell["checkpoint"] == (row["checkpoint"] or "-")
        assert number(cell["lagRecords"]) == row["lagRecords"]
        assert number(cell["lagMs"]) == row["lagMs"]
    assert "a Lambda consumer group" in page


def test_the_given_up_batch_is_shown_with_the_read_that_replays_it(
    console: ConsoleUnderTest,
) -> None:
    _, page = console.get(f"/group?name={GROUP}")
    batches = cells(page).tables["on-failure"]
    assert len(batches) == 1
    (partition, batch), = batches.items()  # fmt: skip
    assert batch["condition"] == "RetryAttemptsExhausted"
    replay = batch["replay"].split()
    assert replay[:2] == ["shardlog", "read"]
    replayed = read_lines(console, *replay[2:])
    assert [r["partitionKey"] for r in replayed] == [POISON_KEY]
    assert replayed[0]["partitionId"] == partition
    # The peek left it in the queue: a second view shows it again.
    assert cells(console.get(f"/group?name={GROUP}")[1]).tables["on-failure"] == batches


def test_the_groups_page_lists_the_group_and_not_shardlogs_own(console: ConsoleUnderTest) -> None:
    _, page = console.get("/groups")
    assert f"name={GROUP}" in page
    assert "$ingest" not in page and "$compaction" not in page


def test_the_message_browser_shows_what_read_shows(console: ConsoleUnderTest) -> None:
    partition = json.loads(shardlog(console, "status", "--json"))[0]["partitionId"]
    expected = read_lines(console, "--partition", partition, "--from-seq", "3", "--limit", "5")
    status, page = console.get(f"/messages?partition={partition}&seq=3&limit=5&decode=hex")
    assert status == 200
    rows = cells(page).tables["records"]
    assert [int(r["seq"]) for r in rows.values()] == [r["seq"] for r in expected]
    for row, record in zip(rows.values(), expected, strict=True):
        assert row["partitionKey"] == record["partitionKey"]
        assert row["arrivalTime"] == record["arrivalTime"]
        assert bytes.fromhex(row["data"]) == base64.b64decode(record["data"])


def _find(console: ConsoleUnderTest, key: str) -> dict[str, Any]:
    for row in json.loads(shardlog(console, "status", "--json")):
        for record in read_lines(console, "--partition", row["partitionId"]):
            if record["partitionKey"] == key:
                return record
    raise AssertionError(f"no record with key {key}")


def test_a_record_has_a_permalink_with_each_decoding(console: ConsoleUnderTest) -> None:
    record = _find(console, BINARY_KEY)
    status, page = console.get(f"/record?partition={record['partitionId']}&seq={record['seq']}")
    assert status == 200
    assert BINARY_DATA.hex(" ") in page
    assert (
        f"shardlog read --partition {record['partitionId']} --from-seq {record['seq']} "
        f"--to-seq {record['seq'] + 1}"
    ) in page
    json_record = _find(console, SCRIPT_KEY)
    _, page = console.get(
        f"/record?partition={json_record['partitionId']}&seq={json_record['seq']}&decode=json"
    )
    pretty = json.dumps(json.loads(SCRIPT_DATA), indent=2, sort_keys=True)
    assert html.escape(pretty) in page


def test_a_time_finds_the_first_record_that_arrived_then(console: ConsoleUnderTest) -> None:
    partition = json.loads(shardlog(console, "status", "--json"))[0]["partitionId"]
    records = read_lines(console, "--partition", partition)
    target = records[len(records) // 2]
    first = next(r for r in records if r["arrivalTime"] >= target["arrivalTime"])
    at = urllib_quote(target["arrivalTime"])
    status, page = console.get(f"/messages?partition={partition}&time={at}")
    assert status == 200, page
    rows = cells(page).tables["records"]
    assert int(next(iter(rows.values()))["seq"]) == first["seq"]
    later = urllib_quote(datetime(2999, 1, 1, tzinfo=UTC).isoformat())
    _, page = console.get(f"/messages?partition={partition}&time={later}")
    assert "No committed record in this range yet." in page


def urllib_quote(text: str) -> str:
    from urllib.parse import quote

    return quote(text, safe="")


def test_key_search_finds_the_record_across_partitions(console: ConsoleUnderTest) -> None:
    record = _find(console, SCRIPT_KEY)
    status, page = console.get(f"/search?key={urllib_quote(SCRIPT_KEY)}")
    assert status == 200
    found = cells(page).tables["records"]
    assert list(found) == [f"{record['partitionId']}#{record['seq']}"]
    assert 'id="done"' in page


def test_key_search_is_bounded_and_resumes_from_its_cursor(console: ConsoleUnderTest) -> None:
    """Ten records a request: the progress grows, the record is found on the way."""
    url = f"/search?key={urllib_quote(POISON_KEY)}&budget=10"
    total = sum(r["nextSeq"] for r in json.loads(shardlog(console, "status", "--json")))
    found, requests = [], 0
    while url and requests < 100:
        _, page = console.get(url)
        requests += 1
        searched = re.search(r'data-field="searched">(\d+)<', page)
        assert searched is not None and int(searched.group(1)) <= 10
        found += list(cells(page).tables.get("records", {}))
        marker = 'id="continue" href="'
        url = html.unescape(page.split(marker, 1)[1].split('"', 1)[0]) if marker in page else ""
    assert requests == -(-total // 10)
    assert len(found) == 1


def test_every_value_is_escaped(console: ConsoleUnderTest) -> None:
    record = _find(console, SCRIPT_KEY)
    pages = [
        console.get(f"/search?key={urllib_quote(SCRIPT_KEY)}")[1],
        console.get(f"/messages?partition={record['partitionId']}&seq={record['seq']}")[1],
        console.get(f"/record?partition={record['partitionId']}&seq={record['seq']}")[1],
        console.get(f"/messages?partition={urllib_quote(SCRIPT_KEY)}")[1],
        console.get(f"/group?name={urllib_quote(SCRIPT_KEY)}")[1],
    ]
    for page in pages:
        assert "<script" not in page and "<img" not in page
    assert html.escape(SCRIPT_KEY) in pages[0]


@pytest.mark.parametrize(
    ("path", "status", "message"),
    [
        ("/messages?partition=shardId-nope", 404, "no partition 'shardId-nope'"),
        ("/messages?partition={p}&seq=999999", 400, "is past partition"),
        ("/messages?partition={p}&time=yesterday", 400, "is not an ISO 8601 time"),
        ("/messages?partition={p}&time=2026-11-25T03:00:00", 400, "has no time zone"),
        ("/messages?partition={p}&seq=-1", 400, "is not a whole number"),
        ("/messages?partition={p}&decode=base32", 400, "is not one of"),
        ("/messages?partition={p}&limit=501", 400, "limit: 501 is not in 1..500"),
        ("/record?partition={p}&seq=999999", 400, "is past partition"),
        ("/search?key=", 400, "give the partition key"),
        ("/search?key=k&cursor=x", 400, "is not <partition index>:<seq>"),
        ("/group?name=nobody", 404, "no consumer group 'nobody'"),
        ("/group?name=%24ingest", 404, "shardlog's own groups"),
        ("/nowhere", 404, "no page '/nowhere'"),
    ],
)
def test_bad_input_is_a_message_and_a_4xx(
    console: ConsoleUnderTest, path: str, status: int, message: str
) -> None:
    partition = json.loads(shardlog(console, "status", "--json"))[0]["partitionId"]
    got, page = console.get(path.format(p=partition))
    assert got == status
    assert html.escape(message, quote=True) in page or message in page
    assert "Traceback" not in page and 'role="alert"' in page


def test_the_lake_page_shows_watermarks_against_heads(console: ConsoleUnderTest) -> None:
    status, page = console.get("/lake")
    assert status == 200, page
    shown = cells(page)
    heads = {
        r["partitionId"]: r["nextSeq"] for r in json.loads(shardlog(console, "status", "--json"))
    }
    for partition, row in shown.tables["freshness"].items():
        assert number(row["head"]) == heads[partition]
        assert number(row["watermark"]) == console.lake_watermarks.get(partition, 0)
        assert number(row["behind"]) == heads[partition] - console.lake_watermarks.get(partition, 0)
    assert "console-test-" in page  # the commit's run id, on its snapshot
    assert set(shown.tables["runs"]) == {"compact", "analytics", "maintain"}


def test_the_lag_trend_is_drawn_from_cloudwatch(console: ConsoleUnderTest) -> None:
    """What a deployed group's runner publishes (ConsumerLagRecords, a point a minute)."""
    from shardlog import constants as C

    now = datetime.fromtimestamp(console.clock.now_ms() / 1000, UTC)
    dimensions = [
        {"Name": C.DIMENSION_CONSUMER_GROUP, "Value": GROUP},
        {"Name": "service", "Value": C.POWERTOOLS_SERVICE_NAME},
    ]
    lags = [40.0, 25.0, 7.0]
    console.runtime.clients.client("cloudwatch").put_metric_data(
        Namespace=C.METRICS_NAMESPACE,
        MetricData=[
            {
                "MetricName": C.METRIC_CONSUMER_LAG_RECORDS,
                "Dimensions": dimensions,
                "Timestamp": now - timedelta(minutes=30 - 10 * i),
                "Value": lag,
            }
            for i, lag in enumerate(lags)
        ],
    )
    _, page = console.get(f"/group?name={GROUP}")
    chart = page.split("lag (records, max a minute)", 1)[1].split("</h3>", 1)[1]
    assert chart.startswith('<svg class="chart"')
    points = re.search(r'points="([^"]*)"', chart)
    assert points is not None
    heights = [float(xy.split(",")[1]) for xy in points.group(1).split()]
    assert len(heights) == len(lags)
    assert heights == sorted(heights)  # falling lag: each point lower than the last
    assert "latest 7.0, max 40.0" in chart


def test_a_deployed_stack_is_read_by_its_outputs(console: ConsoleUnderTest) -> None:
    """`--stack-name`: the names come from the stack's outputs (a CloudFormation stack on the
    embedded AWS whose outputs name this deployment), the on-failure queue from its ARN."""
    from shardlog import constants as C
    from shardlog.console.server import Console, ConsoleServer
    from shardlog.console.source import Deployment
    from tests.support.console import http

    config, clients = console.config, console.runtime.clients
    queue_url = config.extra["lambdaConsumers"][GROUP]["onFailureQueueUrl"]
    queue_arn = clients.client("sqs").get_queue_attributes(
        QueueUrl=queue_url, AttributeNames=["QueueArn"]
    )["Attributes"]["QueueArn"]
    outputs = {
        C.OUTPUT_STREAM_NAME: config.stream_name,
        C.OUTPUT_BUCKET_NAME: config.bucket,
        C.OUTPUT_PARTITIONS_TABLE: config.partitions_table,
        C.OUTPUT_CONSUMERS_TABLE: config.consumers_table,
        C.OUTPUT_API_URL: "https://example.invalid/prod/",
        C.OUTPUT_EMR_APPLICATION_ID: "00000000000000000",
        C.OUTPUT_EMR_EXECUTION_ROLE_ARN: "arn:aws:iam::000000000000:role/none",
        C.OUTPUT_JOB_SCRIPTS_URI: "s3://none/spark_jobs/",
        C.OUTPUT_LAMBDA_CONSUMERS: json.dumps({GROUP: {"onFailureDestination": queue_arn}}),
        C.OUTPUT_ATHENA_WORKGROUP: "none",
        C.OUTPUT_LAKE_TABLE: config.extra["lake"]["table"],
    }
    name = f"console-{config.stream_name}"
    template = {
        "Resources": {"Topic": {"Type": "AWS::SNS::Topic"}},
        "Outputs": {key: {"Value": value} for key, value in outputs.items()},
    }
    clients.client("cloudformation").create_stack(StackName=name, TemplateBody=json.dumps(template))
    deployment = Deployment.from_stack(Deployment(config).clients(), name)
    with ConsoleServer(Console(deployment, clock=console.clock)) as server:
        _, by_stack = http(server.url + f"/group?name={GROUP}")
        _, lake = http(server.url + "/lake")
    _, by_state = console.get(f"/group?name={GROUP}")
    assert cells(by_stack).tables == cells(by_state).tables
    assert cells(by_stack).tables["on-failure"]  # found through GetQueueUrl of the ARN
    assert f"stack {name}" in by_stack
    assert console.config.extra["lake"]["table"] in lake
    assert "job runs not readable" in lake  # no such EMR application: said, not a failure


def test_alarms_in_alarm_are_listed(console: ConsoleUnderTest) -> None:
    cloudwatch = console.runtime.clients.client("cloudwatch")
    name = f"<b>{console.config.stream_name}</b> IngestIteratorAge"
    cloudwatch.put_metric_alarm(
        AlarmName=name,
        Namespace="AWS/Kinesis",
        MetricName="GetRecords.IteratorAgeMilliseconds",
        Statistic="Maximum",
        Period=60,
        EvaluationPeriods=1,
        Threshold=60_000,
        ComparisonOperator="GreaterThanThreshold",
    )
    _, quiet = console.get("/")
    assert html.escape(name) not in quiet
    cloudwatch.set_alarm_state(AlarmName=name, StateValue="ALARM", StateReason="ingest behind")
    try:
        _, page = console.get("/")
        assert html.escape(name) in page and name not in page
        assert "ingest behind" in page
    finally:
        cloudwatch.delete_alarms(AlarmNames=[name])


def test_a_worker_groups_page_shows_its_owners(console: ConsoleUnderTest) -> None:
    from tests.support.console import WORKER_GROUP

    _, page = console.get(f"/group?name={WORKER_GROUP}")
    shown = cells(page).tables["progress"]
    expected = json.loads(shardlog(console, "status", "--group", WORKER_GROUP, "--json"))
    assert {row["groupKind"] for row in expected} == {"workers"}
    assert "a worker group" in page and "On-failure batches" not in page
    for row in expected:
        cell = shown[row["partitionId"]]
        # The owner; whether its lease is live depends on the clock (the console's is the
        # test's, the CLI's the machine's), so it is compared by name.
        assert cell["leaseOwner"].split(" ")[0] == (row["leaseOwner"] or "-")
        assert cell["checkpoint"] == (row["checkpoint"] or "-")
        assert number(cell["lagRecords"]) == row["lagRecords"] == 0
    assert {row["leaseOwner"] for row in expected} - {None} <= {"worker-1", "worker-2"}
