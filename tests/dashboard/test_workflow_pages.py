"""Workflows on the dashboard: the group page lists the live ones, a workflow's page shows
its state, counts, step grid and failures; what Redis holds is escaped, bad data of one
workflow is told on its page and row alone; and, in a real browser, a workflow is
followed from the group page to its end, and one is cancelled by its button."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import trio

import trunner
from trunner import chain, step
from trunner import workflows as wf
from trunner.keys import Keys

from ..conftest import config, open_checked_runner
from ..support.servers import RedisServer
from .browser import open_browser, require_browser
from .helpers import csrf_of, open_app, post, served
from .test_browser import STEP, click_and_confirm, in_thread, wait_text

XSS = "<script>alert('x')</script><img src=x onerror=alert(1)>"
tasks = trunner.TaskRegistry()
#: Set to let ``held`` return (a new one per test).
gates = {"held": trio.Event()}


@tasks.task()
async def double(number: int) -> int:
    return 2 * number


@tasks.task()
async def total(numbers: list[int]) -> int:
    return sum(numbers)


@tasks.task()
async def held(number: int) -> int:
    await gates["held"].wait()
    return number


def _grid(html: str) -> list[str]:
    return re.findall(r'<i class="step s-(\w+)" data-step=', html)


async def test_live_workflows_are_listed_and_a_workflow_page_shows_its_steps(
    url: str, group: str, raw: Any
) -> None:
    async with trunner.open_client(url, group, tasks=tasks) as client:
        handle = await client.dispatch(
            chain(wf.group(step(double, n) for n in range(3)), step(total)), workflow_id="w/1"
        )
        flow = Keys("trunner", group)._workflow(handle.id)
        raw.hset(flow.wf, "name", XSS)
        failure = '{"type": "Boom", "message": "%s", "task": "%s", "attempt": 2}'
        raw.hset(flow.err, "1", failure % (XSS.replace('"', "'"), XSS.replace('"', "'")))
        async with open_app(url, [group]) as http:
            snapshot = (await http.get(f"/group/{group}/snapshot")).json()
            assert snapshot["counts"]["workflows"] == 1
            (listed,) = snapshot["workflows"]
            assert (listed["id"], listed["state"], listed["steps"], listed["live"]) == (
                "w/1", "running", 4, 3,
            )  # fmt: skip
            assert listed["name"] == XSS, "text in JSON; the page's script shows it as text"
            overview = (await http.get("/")).text
            assert "<td>3</td><td>0</td><td>0</td><td>0</td><td>1</td>" in overview, "1 workflow"
            group_page = await http.get(f"/group/{group}")
            assert 'id="count-workflows">1<' in group_page.text
            assert f'data-workflows="/group/{group}/workflow/"' in group_page.text
            page = await http.get(f"/group/{group}/workflow/w%2F1")
            assert page.status_code == 200
            assert "<script>alert" not in page.text
            assert "onerror=alert" not in page.text.replace("onerror=alert(1)&gt;", "")
            assert "&lt;script&gt;alert(" in page.text
            assert 'id="workflow-state">running<' in page.text
            assert 'id="workflow-steps">4<' in page.text
            assert _grid(page.text) == ["live"] * 3 + ["waiting"]
            assert page.text.count('<tr data-step="1">') == 1, "its failure is listed"
            assert "Boom: " in page.text
            assert 'id="cancel-workflow"' in page.text
            gone = await http.get(f"/group/{group}/workflow/nothing")
            assert 'id="workflow-unknown"' in gone.text


async def test_the_grid_pages_and_a_workflow_is_cancelled_by_its_button(
    memory_url: str, group: str
) -> None:
    async with trunner.open_client(memory_url, group, tasks=tasks) as client:
        big = await client.dispatch(wf.group(step(double, n) for n in range(3000)))
        async with open_app(memory_url, [group]) as http:
            first = await http.get(f"/group/{group}/workflow/{big.id}")
            assert len(_grid(first.text)) == 2500
            assert 'href="?start=2500"' in first.text
            second = await http.get(f"/group/{group}/workflow/{big.id}?start=2500")
            assert _grid(second.text) == ["live"] * 500
            assert 'href="?start=0"' in second.text
            assert len(_grid((await http.get(f"/group/{group}/workflow/{big.id}?start=x")).text))
            done = await post(
                http,
                f"/group/{group}/action/cancel-workflow",
                {"csrf": csrf_of(first.text), "id": big.id},
            )
            assert done.status_code == 303
            after = await http.get(done.headers["location"])
            # no runner holds a step: its queued steps are taken out, and it settles
            assert f"cancel workflow {big.id}: cancelled" in after.text
            page = await http.get(f"/group/{group}/workflow/{big.id}")
            assert 'id="workflow-state">cancelled<' in page.text


async def test_a_read_only_dashboard_shows_no_cancel_of_a_workflow(
    memory_url: str, group: str
) -> None:
    async with trunner.open_client(memory_url, group, tasks=tasks) as client:
        handle = await client.dispatch(step(double, 1))
        async with open_app(memory_url, [group], read_only=True) as http:
            page = await http.get(f"/group/{group}/workflow/{handle.id}")
            assert 'id="workflow-state">running<' in page.text
            assert "cancel-workflow" not in page.text
            refused = await post(
                http, f"/group/{group}/action/cancel-workflow", {"id": handle.id, "csrf": "x"}
            )
            assert refused.status_code == 403
        assert (await handle.status()).state.value == "running"


async def test_bad_data_of_a_workflow_shows_on_its_page_and_row_alone(
    url: str, group: str, raw: Any
) -> None:
    async with trunner.open_client(url, group, tasks=tasks) as client:
        good = await client.dispatch(step(double, 1))
        bad = await client.dispatch(step(double, 2))
        keys = Keys("trunner", group)
        raw.hset(keys._workflow(bad.id).wf, mapping={"state": XSS, "n": "1e400"})
        raw.zadd(keys.workflows, {"not-a-hash": 1})
        raw.set(keys._workflow("not-a-hash").wf, "a string")
        async with open_app(url, [group]) as http:
            snapshot = (await http.get(f"/group/{group}/snapshot")).json()
            rows = {w["id"]: w for w in snapshot["workflows"]}
            assert rows[good.id]["state"] == "running"
            assert "is not a workflow state" in rows[bad.id]["problem"]
            assert "WRONGTYPE" in rows["not-a-hash"]["problem"]
            assert "workflows" not in snapshot["errors"]
            page = await http.get(f"/group/{group}/workflow/{bad.id}")
            assert page.status_code == 200
            assert 'id="workflow-problem">unreadable: BadData' in page.text
            assert "<script>alert" not in page.text
            wrong = await http.get(f"/group/{group}/workflow/not-a-hash")
            assert 'id="workflow-problem">unreadable: ' in wrong.text
            spaced = await http.get(f"/group/{group}/workflow/has%20space")
            assert 'id="workflow-problem">unreadable: ValueError' in spaced.text
            assert (await http.get(f"/group/{group}")).status_code == 200


@pytest.mark.deadline(180)
async def test_a_browser_follows_a_workflow_to_its_end_and_cancels_another(
    redis_server: RedisServer, group: str, tmp_path: Path
) -> None:
    require_browser()
    from selenium.common.exceptions import StaleElementReferenceException  # noqa: PLC0415
    from selenium.webdriver.common.by import By  # noqa: PLC0415 - the test extra
    from selenium.webdriver.support.ui import WebDriverWait  # noqa: PLC0415 - idem

    gates["held"] = trio.Event()
    url = redis_server.url
    cfg = config(group, report_interval=0.2)
    async with open_checked_runner(url, cfg, tasks) as runner, served(url, [group]) as base:
        flow = await runner.dispatch(chain(step(held, 1), step(double)), name="followed")
        driver = await in_thread(open_browser)
        try:
            await in_thread(driver.get, f"{base}/group/{group}")
            await in_thread(wait_text, driver, "workflows", flow.id)
            await in_thread(wait_text, driver, "count-workflows", "1")

            def follow(d: Any) -> bool:
                # The list is drawn again at each update: a link found may be replaced
                # before the click (stale), then it is found again.
                d.find_element(By.LINK_TEXT, flow.id).click()
                return True

            wait = WebDriverWait(driver, STEP, ignored_exceptions=[StaleElementReferenceException])
            await in_thread(wait.until, follow)
            await in_thread(wait_text, driver, "workflow-state", "running")
            grid = await in_thread(driver.find_elements, By.CSS_SELECTOR, "#steps .step")
            assert [await in_thread(g.get_attribute, "class") for g in grid] == [
                "step s-live",
                "step s-waiting",
            ]
            await in_thread(driver.save_screenshot, str(tmp_path / "1-workflow.png"))
            gates["held"].set()
            assert await flow.result() == 2

            def settled(d: Any) -> bool:
                d.refresh()  # the workflow page is read when loaded: load it again
                return "succeeded" in d.find_element(By.ID, "workflow-state").text

            await in_thread(WebDriverWait(driver, STEP).until, settled)
            shown = await in_thread(driver.find_elements, By.CSS_SELECTOR, "#steps .s-succeeded")
            assert len(shown) == 2
            gates["held"] = trio.Event()
            other = await runner.dispatch(chain(step(held, 2), step(double)))
            await in_thread(driver.get, f"{base}/group/{group}/workflow/{other.id}")
            question = await in_thread(click_and_confirm, driver, "#cancel-workflow")
            assert question.startswith(f"Cancel workflow {other.id}?")
            await in_thread(wait_text, driver, "flash", "cancelling")
            with trio.fail_after(STEP), pytest.raises(trunner.errors.WorkflowCancelled):
                await other.result()
            await in_thread(driver.save_screenshot, str(tmp_path / "2-cancelled.png"))
        finally:
            await in_thread(driver.quit)
