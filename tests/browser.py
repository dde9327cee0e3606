"""Headless Chromium for the dashboard's page tests: Debian's ``chromium`` driven by selenium
through ``chromium-driver``, started with the flags it needs on a closed network, a fresh
profile each time."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

CHROMIUM, DRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
# Without the background-networking flags it stalls on the closed network.
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync")

needs_chromium = pytest.mark.skipif(
    not (Path(CHROMIUM).exists() and Path(DRIVER).exists()),
    reason="needs Debian's chromium and chromium-driver "
           "(apt-get install -y chromium chromium-driver)")


@contextmanager
def chromium(*, window: tuple[int, int] | None = None) -> Iterator[Any]:
    """A selenium driver of headless Chromium (``window``: width and height at scale 1)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    profile = tempfile.mkdtemp(prefix="chromium-")
    flags = [*FLAGS, f"--user-data-dir={profile}"]
    if window is not None:
        flags += [f"--window-size={window[0]},{window[1]}", "--force-device-scale-factor=1"]
    for flag in flags:
        opts.add_argument(flag)
    driver = webdriver.Chrome(service=Service(DRIVER), options=opts)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def panel_text(driver: Any, panel: str, shows: str, *, timeout_s: float = 30) -> str:
    """The text of the page element with id ``panel`` once it shows ``shows`` (the page fills
    its panels from the dashboard's API after it loads)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(driver, timeout_s).until(
        lambda d: shows in d.find_element(By.ID, panel).text)
    return str(driver.find_element(By.ID, panel).text)
