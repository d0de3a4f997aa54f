"""What ``dispatch(workflow, ...)`` takes: headers for every step, what it refuses, and the
order of its checks and its dispatch hooks."""

from __future__ import annotations

import attrs
import pytest

import trunner
from trunner import chain, step
from trunner import workflows as wf
from trunner.errors import InvalidPayload
from trunner.middleware import DispatchInfo

from ..conftest import config, open_checked_runner

tasks = trunner.TaskRegistry()
seen: dict[str, dict[str, str]] = {}


@tasks.task()
async def look(name: str) -> str:
    seen[name] = dict(trunner.current_message().headers)
    return name


@tasks.task()
async def count(words: list[str]) -> int:
    return len(words)


@attrs.define
class Recording(trunner.Middleware):
    dispatched: list[str] = attrs.Factory(list)

    def on_dispatch(self, dispatch: DispatchInfo) -> None:
        self.dispatched.append(dispatch.task_name)
        dispatch.headers.setdefault("hooked", "yes")


async def test_a_workflows_headers_reach_every_step_and_a_steps_own_win(
    memory_url: str, group: str
) -> None:
    seen.clear()
    hook = Recording()
    async with open_checked_runner(memory_url, config(group, middleware=[hook]), tasks) as runner:
        work = chain(
            wf.group([step(look, "a"), step(look, "b", headers={"tenant": "mine"})]), step(count)
        )
        handle = await runner.dispatch(work, headers={"tenant": "acme"}, name="tenants")
        assert await handle.result() == 2
    assert seen == {
        "a": {"tenant": "acme", "hooked": "yes"},
        "b": {"tenant": "mine", "hooked": "yes"},
    }
    assert hook.dispatched == ["workflow:tenants", "look", "look", "count"]


async def test_a_refused_workflow_is_refused_before_its_dispatch_hooks_run(
    memory_url: str, group: str
) -> None:
    hook = Recording()
    async with open_checked_runner(memory_url, config(group, middleware=[hook]), tasks) as runner:
        with pytest.raises(InvalidPayload):  # the second step's payload is not a str
            await runner.dispatch(wf.group([step(look, "a"), step(look, 42)]))  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="priority"):
            await runner.dispatch(step(look, "a"), priority="default")  # type: ignore[call-overload]
        with pytest.raises(trunner.errors.InvalidHeaders):
            await runner.dispatch(step(look, "a"), headers={"n": 1})  # type: ignore[dict-item]
        big = "x" * 2_000_000  # over the limit, for a step that starts at once or later
        with pytest.raises(trunner.errors.PayloadTooLarge, match="step 1"):
            await runner.dispatch(wf.group([step(look, "a"), step(look, big)]))
        with pytest.raises(trunner.errors.PayloadTooLarge, match="step 1"):
            await runner.dispatch(chain(step(look, "a"), step(look, big)))
        with pytest.raises(ValueError, match=r"no '\.'"):  # a step's id is "<id>.<i>"
            await runner.dispatch(step(look, "a"), workflow_id="x.1")
        assert await runner.admin.workflows() == [], "nothing was written"
    assert hook.dispatched == []
