"""The dashboard in a real browser (headless Chromium, driven by Selenium), on a real
runner group on a real Redis: the numbers change as tasks run, and a dead letter is
replayed by clicking its button and accepting the confirmation. Screenshots go to the
test's tmp_path.

Selenium blocks: each browser step runs in a thread (``trio.to_thread``) while the Trio
loop serves the dashboard and runs the runner. Waits are on the page's state
(WebDriverWait), bounded, never fixed sleeps."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
import trio

import trunner

from ..conftest import config, open_checked_runner
from ..support.servers import RedisServer
from .browser import open_browser, require_browser
from .helpers import served

T = TypeVar("T")

#: How long a browser step may wait for the page to show something (generous: the machine
#: may be busy; the test's Trio deadline bounds the whole).
STEP = 60.0


async def in_thread(call: Callable[..., T], *args: Any) -> T:
    return await trio.to_thread.run_sync(functools.partial(call, *args), abandon_on_cancel=True)


def wait_text(driver: Any, element_id: str, text: str) -> None:
    from selenium.webdriver.common.by import By  # noqa: PLC0415 - the test extra
    from selenium.webdriver.support import expected_conditions as ec  # noqa: PLC0415 - idem
    from selenium.webdriver.support.ui import WebDriverWait  # noqa: PLC0415 - idem

    WebDriverWait(driver, STEP).until(ec.text_to_be_present_in_element((By.ID, element_id), text))


def text_of(driver: Any, element_id: str) -> str:
    from selenium.webdriver.common.by import By  # noqa: PLC0415 - the test extra

    return str(driver.find_element(By.ID, element_id).text)


def click_and_confirm(driver: Any, css: str) -> str:
    """Click the first button matching ``css``, accept its confirmation; its question."""
    from selenium.webdriver.common.by import By  # noqa: PLC0415 - the test extra
    from selenium.webdriver.support import expected_conditions as ec  # noqa: PLC0415 - idem
    from selenium.webdriver.support.ui import WebDriverWait  # noqa: PLC0415 - idem

    driver.find_element(By.CSS_SELECTOR, css).click()
    alert = WebDriverWait(driver, STEP).until(ec.alert_is_present())
    question = str(alert.text)
    alert.accept()
    return question


@pytest.mark.deadline(180)
async def test_a_browser_sees_tasks_run_and_replays_a_dead_letter_by_clicking(
    redis_server: RedisServer, group: str, tmp_path: Path
) -> None:
    require_browser()
    url = redis_server.url
    gate = trio.Event()
    healed = False
    replayed_ran = trio.Event()
    tasks = trunner.TaskRegistry()

    @tasks.task
    async def work(payload: Any) -> None:
        trunner.current_message()
        await gate.wait()

    @tasks.task(max_retry=0)
    async def flaky(payload: Any) -> None:
        if not healed:
            raise RuntimeError("<b>not yet</b> & <script>alert('x')</script>")
        replayed_ran.set()

    cfg = config(group, num_workers=10, report_interval=0.2, instance_ttl=5.0)
    async with (
        open_checked_runner(url, cfg, tasks) as runner,
        served(url, [group], tasks=tasks) as base,
    ):
        driver = await in_thread(open_browser)
        try:
            await in_thread(driver.get, f"{base}/group/{group}")
            await in_thread(wait_text, driver, "live", "live")
            await in_thread(wait_text, driver, "instances", runner.consumer_name)
            await in_thread(wait_text, driver, "instances", "leader")
            for n in range(6):
                await runner.dispatch("work", n)
            await in_thread(wait_text, driver, "count-pending", "6")
            await in_thread(wait_text, driver, "running", "work")
            await in_thread(driver.save_screenshot, str(tmp_path / "1-running.png"))
            gate.set()
            await in_thread(wait_text, driver, "count-pending", "0")
            await in_thread(wait_text, driver, "timings", "work")
            await runner.dispatch("flaky", {"n": 1})
            await in_thread(wait_text, driver, "count-dead", "1")
            await in_thread(driver.save_screenshot, str(tmp_path / "2-dead-letter.png"))

            # The dead-letter table is drawn with the page: load it again, then click.
            await in_thread(driver.get, f"{base}/group/{group}")
            healed = True
            question = await in_thread(click_and_confirm, driver, "button.replay-one")
            assert question.startswith("Replay ")
            await in_thread(wait_text, driver, "flash", "replayed 1 dead letter")
            with trio.fail_after(STEP):
                await replayed_ran.wait()
            await in_thread(wait_text, driver, "count-dead", "0")
            page = await in_thread(lambda: str(driver.page_source))
            assert "<script>alert" not in page
            await in_thread(driver.save_screenshot, str(tmp_path / "3-replayed.png"))
        finally:
            await in_thread(driver.quit)
    assert (tmp_path / "3-replayed.png").stat().st_size > 10_000
