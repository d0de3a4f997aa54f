"""Headless Chromium driven by Selenium, for the dashboard's browser tests.

Debian's ``chromium`` and ``chromium-driver`` are used, named by path, so that Selenium
Manager never downloads a browser. Without them the tests skip; with ``CI=true`` a
missing browser is an error (as a missing redis-server is)."""

from __future__ import annotations

import os
import shutil
from typing import Any

import pytest

CHROMIUM = os.environ.get("TRUNNER_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("TRUNNER_CHROMEDRIVER", "/usr/bin/chromedriver")


def require_browser() -> None:
    """Skip the test without Chromium and its driver (fail it when ``CI=true``)."""
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if shutil.which(p) is None]
    try:
        import selenium  # noqa: F401, PLC0415 - the test extra, checked here
    except ImportError:
        missing.append("selenium (the test extra)")
    if missing:
        message = (
            f"browser tests need {', '.join(missing)} (apt-get install chromium chromium-driver)"
        )
        if os.environ.get("CI", "").lower() in {"1", "true", "yes"}:
            pytest.fail(message + " (CI=true makes this an error)")
        pytest.skip(message)


def open_browser() -> Any:
    """A headless Chromium (blocking: call it in a thread)."""
    os.environ["SE_OFFLINE"] = "true"  # Selenium Manager may never download anything
    from selenium import webdriver  # noqa: PLC0415 - the test extra, loaded by browser tests
    from selenium.webdriver.chrome.service import Service  # noqa: PLC0415 - idem

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in (
        "--headless=new",
        "--no-sandbox",  # the suite may run as root, in a container
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--window-size=1400,1700",
        "--no-first-run",
        "--disable-extensions",
    ):
        options.add_argument(argument)
    return webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
