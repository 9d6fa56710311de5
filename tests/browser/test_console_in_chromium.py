"""The console in a real headless Chromium against `local up`'s runtime with produced data:
every page renders, its numbers equal `shardlog status --json` and `shardlog read`, the
browser finds a record by its key through the search form, and an unknown partition shows
the message. Each page is saved as a screenshot under build/console-screenshots/."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.support.expected_conditions import staleness_of
from selenium.webdriver.support.wait import WebDriverWait

from tests.support.console import (
    GROUP,
    POISON_KEY,
    SCRIPT_KEY,
    ConsoleUnderTest,
    console_under_test,
    read_lines,
    shardlog,
)

# One module fixture (the runtime with its data) and, for the browser, one Chromium: under
# pytest-xdist the module stays on one worker.
pytestmark = pytest.mark.xdist_group("browser")


NAVIGATION_DEADLINE_S = 30  # bounded: a page of the local console loads in well under 1 s


@pytest.fixture(scope="module")
def console() -> Iterator[ConsoleUnderTest]:
    with console_under_test() as running:
        yield running


def cell(browser: Any, table: str, partition: str, field: str) -> str:
    selector = f'table#{table} tr[data-partition="{partition}"] td[data-field="{field}"]'
    return str(browser.find_element(By.CSS_SELECTOR, selector).text)


def test_the_overview_in_the_browser(
    console: ConsoleUnderTest, browser: Any, screenshot: Any
) -> None:
    browser.get(console.url + "/?lag=1")
    assert browser.title == "Overview · shardlog console"
    for row in json.loads(shardlog(console, "status", "--json")):
        pid = row["partitionId"]
        assert cell(browser, "partitions", pid, "state") == row["state"]
        assert int(cell(browser, "partitions", pid, "nextSeq")) == row["nextSeq"]
        assert int(cell(browser, "partitions", pid, "lagRecords")) == row["lagRecords"]
    boxes = browser.find_elements(By.CSS_SELECTOR, "svg#lineage g[data-partition]")
    assert len(boxes) == 5
    assert boxes[0].is_displayed()
    screenshot("overview")


def test_the_browser_reads_a_partition_like_read(
    console: ConsoleUnderTest, browser: Any, screenshot: Any
) -> None:
    partition = json.loads(shardlog(console, "status", "--json"))[-1]["partitionId"]
    browser.get(console.url + "/")
    link = browser.find_element(By.CSS_SELECTOR, f'table#partitions a[href*="{partition}"]')
    _navigating(browser, link.click)
    expected = read_lines(console, "--partition", partition, "--limit", "50")
    rows = browser.find_elements(By.CSS_SELECTOR, "table#records tbody tr")
    assert [int(r.get_attribute("data-seq")) for r in rows] == [r["seq"] for r in expected]
    keys = browser.find_elements(By.CSS_SELECTOR, 'table#records td[data-field="partitionKey"]')
    assert [k.text for k in keys] == [r["partitionKey"] for r in expected]
    screenshot("messages")


def test_the_browser_finds_a_record_by_key(
    console: ConsoleUnderTest, browser: Any, screenshot: Any
) -> None:
    browser.get(console.url + "/messages")
    field = browser.find_element(By.CSS_SELECTOR, 'form#search input[name="key"]')
    field.send_keys(SCRIPT_KEY)
    _navigating(browser, field.submit)
    keys = browser.find_elements(By.CSS_SELECTOR, 'table#records td[data-field="partitionKey"]')
    assert [k.text for k in keys] == [SCRIPT_KEY]  # shown as text: escaped, never run
    assert browser.find_element(By.ID, "done").is_displayed()
    screenshot("search")
    _navigating(
        browser, browser.find_element(By.CSS_SELECTOR, 'table#records td[data-field="seq"] a').click
    )
    assert "Record " in browser.title
    replay = browser.find_element(By.CSS_SELECTOR, 'code[data-field="replay"]').text
    assert replay.startswith("shardlog read --partition ")
    screenshot("record")


def test_an_unknown_partition_shows_the_message(
    console: ConsoleUnderTest, browser: Any, screenshot: Any
) -> None:
    browser.get(console.url + "/messages?partition=shardId-000000000099")
    alert = browser.find_element(By.CSS_SELECTOR, '[role="alert"]')
    assert "no partition 'shardId-000000000099'" in alert.text
    assert alert.get_attribute("data-status") == "404"
    screenshot("unknown-partition")


def test_the_group_and_lake_pages_in_the_browser(
    console: ConsoleUnderTest, browser: Any, screenshot: Any
) -> None:
    browser.get(console.url + "/groups")
    _navigating(browser, browser.find_element(By.LINK_TEXT, GROUP).click)
    for row in json.loads(shardlog(console, "status", "--group", GROUP, "--json")):
        pid = row["partitionId"]
        assert int(cell(browser, "progress", pid, "lagRecords")) == row["lagRecords"]
        assert cell(browser, "progress", pid, "checkpoint") == (row["checkpoint"] or "-")
    replay = browser.find_element(By.CSS_SELECTOR, 'table#on-failure td[data-field="replay"]')
    replayed = read_lines(console, *replay.text.split()[2:])
    assert [r["partitionKey"] for r in replayed] == [POISON_KEY]
    screenshot("group")
    browser.get(console.url + "/lake")
    rows = browser.find_elements(By.CSS_SELECTOR, "table#freshness tbody tr")
    assert len(rows) == 5
    for partition, mark in console.lake_watermarks.items():
        assert int(cell(browser, "freshness", partition, "watermark")) == mark
    screenshot("lake")


def _navigating(browser: Any, action: Any) -> None:
    """Do ``action`` (a submit, a click on a link) and return once its page replaced this
    one: reading right after it may meet the old page's elements (stale once it goes)."""
    page = browser.find_element(By.TAG_NAME, "html")
    action()
    WebDriverWait(browser, NAVIGATION_DEADLINE_S).until(staleness_of(page))
