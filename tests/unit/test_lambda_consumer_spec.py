"""`--lambda-consumer`: a group's settings as cdk.json spells them, in a query string or a
JSON file, checked by the group's one schema before anything starts (exit 2, one line
naming the group and the field)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from shardlog.cli.main import cli
from shardlog.exceptions import ShardlogError
from shardlog.local.lambda_consumers import parse_group

BUY = {"data": {"order": {"type": ["buy"]}}}


def refused(spec: str) -> str:
    with pytest.raises(ShardlogError) as caught:
        parse_group(spec)
    message = str(caught.value)
    assert "\n" not in message
    return message


def test_a_plain_target_takes_the_defaults() -> None:
    group = parse_group("billing=json:dumps")
    assert (group.settings.group, group.target, group.function is json.dumps) == (
        "billing",
        "json:dumps",
        True,
    )
    assert group.settings.batch_size == 100


def test_query_string_keys_are_cdk_jsons() -> None:
    group = parse_group(
        "billing=json:dumps?batchSize=10&bisectBatchOnFunctionError=false"
        "&maximumRetryAttempts=-1&startingPosition=LATEST"
        "&onFailureDestination=arn:aws:sqs:us-east-1:123456789012:failures"
        f"&filterCriteria={json.dumps([{'pattern': BUY}])}"
    )
    s = group.settings
    assert (s.batch_size, s.bisect_batch_on_function_error, s.maximum_retry_attempts) == (
        10,
        False,
        -1,
    )
    assert s.on_failure_destination == "arn:aws:sqs:us-east-1:123456789012:failures"
    assert [p.pattern for p in s.filter_criteria] == [json.dumps(BUY, separators=(",", ":"))]
    assert group.target == "json:dumps"


def test_a_settings_file_holds_the_keys_and_the_handler(tmp_path: Path) -> None:
    path = tmp_path / "billing.json"
    path.write_text(
        json.dumps({"handler": "json:dumps", "batchSize": 7, "filterCriteria": [{"pattern": BUY}]})
    )
    group = parse_group(f"billing=@{path}")
    assert (group.target, group.settings.batch_size, len(group.settings.filter_criteria)) == (
        "json:dumps",
        7,
        1,
    )


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        ("billing=json:dumps?batchSize=10001", "group 'billing': batchSize: Input should be"),
        ("billing=json:dumps?batchSize=0", "batchSize: Input should be greater than or equal to 1"),
        ("billing=json:dumps?batchsize=10", "batchsize: Extra inputs are not permitted"),
        ("billing=json:dumps?batchSize=1&batchSize=2", "billing: batchSize is given twice"),
        ("billing=json:dumps?batchSize", "billing: bad settings"),
        ("billing=json:dumps?group=other", "billing: group is not a setting here"),
        ("billing=json:dumps?functionArn=x", "billing: functionArn is not a setting here"),
        (
            'billing=json:dumps?filterCriteria=[{"pattern":{"data":{"amount":[{"numeric":[">"]}]}}}]',
            "group 'billing': filterCriteria[0].pattern.data.amount[0].numeric: must be",
        ),
        ("billing=json?batchSize=1", "billing: expected MODULE:FUNCTION, got 'json'"),
        # a bad setting is named before the module is imported
        ("billing=no_such_module:f?batchSize=0", "batchSize"),
        ("billing=no_such_module:f", "billing: cannot import 'no_such_module'"),
        ("billing=json:nothing", "billing: json has no function 'nothing'"),
    ],
)
def test_bad_settings_are_one_line_naming_the_group_and_the_field(spec: str, words: str) -> None:
    assert words in refused(spec)


@pytest.mark.parametrize(
    ("content", "words"),
    [
        (None, "billing: cannot read"),
        ("{not json", "is not JSON"),
        ("[1]", "must hold a JSON object"),
        (json.dumps({"batchSize": 5}), 'needs "handler": "MODULE:FUNCTION"'),
        (json.dumps({"handler": "json:dumps", "group": "x"}), "group is not a setting here"),
        (
            json.dumps({"handler": "json:dumps", "filterCriteria": [{"pattern": "{}"}] * 6}),
            "group 'billing': filterCriteria: 6 filters: at most 5",
        ),
    ],
)
def test_a_bad_settings_file_is_named(tmp_path: Path, content: Any, words: str) -> None:
    path = tmp_path / "settings.json"
    if content is not None:
        path.write_text(content)
    assert words in refused(f"billing=@{path}")


def test_local_up_refuses_bad_settings_before_anything_starts(tmp_path: Path) -> None:
    spec = 'billing=json:dumps?filterCriteria=[{"pattern":{"data":{"amount":5}}}]'
    result = CliRunner().invoke(
        cli, ["--state-file", str(tmp_path / "s.json"), "local", "up", "--lambda-consumer", spec]
    )
    assert result.exit_code == 2, result.output
    [line] = [x for x in result.output.splitlines() if "filterCriteria" in x]
    assert "group 'billing': filterCriteria[0].pattern.data.amount: must be a list" in line
    assert not (tmp_path / "s.json").exists()
