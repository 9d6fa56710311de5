"""The browser tests' fixtures: Debian's Chromium, headless, driven by Selenium through
Debian's ChromeDriver (`make browser` installs both), one browser for the session, with a
fresh profile; screenshots go to build/console-screenshots/."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
SCREENSHOTS = Path(__file__).resolve().parents[2] / "build" / "console-screenshots"
PAGE_LOAD_TIMEOUT_S = 60


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    """A headless Chromium; fails (never skips) when it is not installed."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    missing = [str(p) for p in (CHROMIUM, CHROMEDRIVER) if not p.exists()]
    assert not missing, f"{', '.join(missing)} missing: run `make browser` (Debian's packages)"
    profile = tempfile.mkdtemp(prefix="shardlog-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for argument in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--window-size=1280,900",
        f"--user-data-dir={profile}",
    ):
        options.add_argument(argument)
    driver = webdriver.Chrome(options=options, service=Service(executable_path=str(CHROMEDRIVER)))
    driver.set_page_load_timeout(PAGE_LOAD_TIMEOUT_S)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


@pytest.fixture(scope="session")
def screenshot(browser: Any) -> Any:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)

    def take(name: str) -> Path:
        path = SCREENSHOTS / f"{name}.png"
        browser.save_screenshot(str(path))
        return path

    return take
