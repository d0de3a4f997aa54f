"""Typed dispatch, checked by mypy as a user's code is: a handle is typed by its task's
return annotation, and a payload of the wrong type is a type error at the call."""

from __future__ import annotations

from pathlib import Path

from mypy import api

USER_CODE = """
from __future__ import annotations

import datetime

import attrs
import trunner
import trunner.aio
import trunner.sync

tasks = trunner.TaskRegistry()


@attrs.frozen
class Request:
    path: str


@attrs.frozen
class Thumbnail:
    path: str


@tasks.task(keep_result=60)
async def resize(request: Request) -> Thumbnail:
    return Thumbnail(request.path)


async def use(client: trunner.Client) -> None:
    handle = await client.dispatch(resize, Request("a"))
    reveal_type(handle)
    reveal_type(await handle.result())
    later = await client.dispatch_delayed(resize, Request("b"), 5)
    reveal_type(later)
    again = client.handle(str(handle), resize)
    reveal_type(again)
    reveal_type(client.handle(str(handle)))
    by_name = await client.dispatch("resize", {"path": "c"})
    reveal_type(by_name)
    width: int = (await handle.result()).path  # MUST-FAIL: a str is not an int
    await client.dispatch(resize, {"path": "d"})  # MUST-FAIL: a dict is not a Request
    await client.dispatch(resize, Request("e"), keep_result="long")  # MUST-FAIL


@tasks.task
def measure(request: Request) -> int:
    return len(request.path)


async def plain_def_tasks(runner: trunner.Runner, client: trunner.aio.Client) -> None:
    reveal_type(await runner.dispatch(measure, Request("a")))
    reveal_type(await runner.dispatch_many(measure, [Request("b")]))
    reveal_type(await runner.dispatch_delayed(measure, Request("c"), 5))
    reveal_type(await client.dispatch(measure, Request("d")))
    reveal_type(client.handle("id", measure))
    await runner.dispatch(measure, "e")  # MUST-FAIL: a str is not a Request


def from_sync_code(client: trunner.sync.Client, when: datetime.datetime) -> None:
    reveal_type(client.dispatch(measure, Request("a")))
    reveal_type(client.dispatch(resize, Request("a")).result())
    reveal_type(client.dispatch_many(resize, [Request("b")]))
    reveal_type(client.dispatch_many(measure, [Request("b")]))
    reveal_type(client.dispatch_delayed(resize, Request("c"), 5))
    reveal_type(client.schedule_for(measure, Request("d"), when))
    reveal_type(client.handle("id", resize))
    reveal_type(client.dispatch_many("resize", [{"path": "e"}]))
    client.dispatch_many(resize, [{"path": "f"}])  # MUST-FAIL: a dict is not a Request
    client.schedule_for(measure, "g", when)  # MUST-FAIL: a str is not a Request
"""


def test_handles_are_typed_by_their_task(tmp_path: Path) -> None:
    out, err, revealed, failing = _check(tmp_path, USER_CODE)
    assert revealed == [
        'note: Revealed type is "trunner.handles.TaskHandle[user_code.Thumbnail]"',
        'note: Revealed type is "user_code.Thumbnail"',
        'note: Revealed type is "trunner.handles.TaskHandle[user_code.Thumbnail]"',
        'note: Revealed type is "trunner.handles.TaskHandle[user_code.Thumbnail]"',
        'note: Revealed type is "trunner.handles.TaskHandle[Any]"',
        'note: Revealed type is "trunner.handles.TaskHandle[Any]"',
        # plain def tasks, from Trio and asyncio
        'note: Revealed type is "trunner.handles.TaskHandle[int]"',
        'note: Revealed type is "list[trunner.handles.TaskHandle[int]]"',
        'note: Revealed type is "trunner.handles.TaskHandle[int]"',
        'note: Revealed type is "trunner.handles.TaskHandle[int]"',
        'note: Revealed type is "trunner.handles.TaskHandle[int]"',
        # the sync client
        'note: Revealed type is "trunner.sync.TaskHandle[int]"',
        'note: Revealed type is "user_code.Thumbnail"',
        'note: Revealed type is "list[trunner.sync.TaskHandle[user_code.Thumbnail]]"',
        'note: Revealed type is "list[trunner.sync.TaskHandle[int]]"',
        'note: Revealed type is "trunner.sync.TaskHandle[user_code.Thumbnail]"',
        'note: Revealed type is "trunner.sync.TaskHandle[int]"',
        'note: Revealed type is "trunner.sync.TaskHandle[user_code.Thumbnail]"',
        'note: Revealed type is "list[trunner.sync.TaskHandle[Any]]"',
    ], out + err
    assert failing == _must_fail(USER_CODE), out + err


WORKFLOW_CODE = """
from __future__ import annotations

import attrs
import trunner
import trunner.aio
from trunner.workflows import Graph, chain, chord, graph, group, step

tasks = trunner.TaskRegistry()


@attrs.frozen
class Page:
    url: str


@tasks.task()
async def fetch(url: str) -> Page:
    return Page(url)


@tasks.task()
async def count(page: Page) -> int:
    return len(page.url)


@tasks.task
def total(counts: list[int]) -> float:
    return float(sum(counts))


@tasks.task()
async def double(number: int) -> int:
    return 2 * number


@tasks.task()
async def report(pair: tuple[Page, int]) -> str:
    return pair[0].url * pair[1]


async def use(client: trunner.Client, aio: trunner.aio.Client) -> None:
    reveal_type(chain(step(fetch, "u"), step(count)))
    handle = await client.dispatch(chain(step(fetch, "u"), step(count)))
    reveal_type(handle)
    reveal_type(await handle.result())
    counted = group(chain(step(fetch, u), step(count)) for u in "ab")
    merged = await aio.dispatch(chord(counted, step(total)))
    reveal_type(await merged.result())
    reveal_type(await client.dispatch(group([step(fetch, "a"), step(fetch, "b")])))
    chain(step(fetch, "u"), step(total))  # MUST-FAIL: a Page is not a list of int
    await client.dispatch(chain(step(count), step(double)))  # MUST-FAIL: no payload
    step(fetch, 42)  # MUST-FAIL: an int is not a str
    chord(group([step(fetch, "a")]), step(count))  # MUST-FAIL: a list of Page is not a Page


async def graphs(client: trunner.Client, urls: list[str]) -> None:
    g = Graph()
    page = g.add(step(fetch, "u"))
    reveal_type(page)
    words = g.then(page, step(count))
    reveal_type(words)
    joined = g.join(step(report), page, words)
    reveal_type(joined)
    reveal_type(await (await client.dispatch(g.returning(joined))).result())
    counts = [g.then(g.add(step(fetch, u)), step(count)) for u in urls]
    reveal_type(g.join(step(total), *counts))
    reveal_type(g.returning(page, words))
    reveal_type(graph({"a": step(fetch, "u"), "b": (step(count), "a")}))
    g.join(step(report), words, page)  # MUST-FAIL: the parents in the wrong order
    g.then(page, step(double))  # MUST-FAIL: a Page is not an int
    g.add(step(count))  # MUST-FAIL: an open step without parents has no payload
    g.join(step(total), page, words)  # MUST-FAIL: a Page is not an int
"""


def test_workflows_are_typed_by_their_steps(tmp_path: Path) -> None:
    out, err, revealed, failing = _check(tmp_path, WORKFLOW_CODE)
    assert revealed == [
        'note: Revealed type is "trunner._workflows._steps.Step[object, int]"',
        'note: Revealed type is "trunner._workflow_handle.WorkflowHandle[int]"',
        'note: Revealed type is "int"',
        'note: Revealed type is "float"',
        'note: Revealed type is "trunner._workflow_handle.WorkflowHandle[list[user_code.Page]]"',
        # graphs
        'note: Revealed type is "trunner._workflows._graph.Node[user_code.Page]"',
        'note: Revealed type is "trunner._workflows._graph.Node[int]"',
        'note: Revealed type is "trunner._workflows._graph.Node[str]"',
        'note: Revealed type is "str"',
        'note: Revealed type is "trunner._workflows._graph.Node[float]"',
        'note: Revealed type is "trunner._workflows._steps.Step[object, list[Any]]"',
        'note: Revealed type is "trunner._workflows._steps.Step[object, Any]"',
    ], out + err
    assert failing == _must_fail(WORKFLOW_CODE), out + err


def _check(tmp_path: Path, code: str) -> tuple[str, str, list[str], list[int]]:
    """mypy --strict on ``code`` as a user's module: its output, its errors, the types it
    revealed, and the lines with an error."""
    source = tmp_path / "user_code.py"
    source.write_text(code)
    out, err, _ = api.run(
        [
            "--strict",
            "--no-error-summary",
            "--hide-error-context",
            "--cache-dir",
            str(tmp_path / "cache"),
            "--config-file",
            "",
            str(source),
        ]
    )
    lines = [line.split(": ", 1)[1] for line in out.splitlines() if ": " in line]
    revealed = [line for line in lines if line.startswith("note: Revealed type")]
    errors = [line for line in out.splitlines() if ": error: " in line]
    return out, err, revealed, sorted({int(line.split(":")[1]) for line in errors})


def _must_fail(code: str) -> list[int]:
    """The lines of ``code`` marked MUST-FAIL."""
    return [n for n, text in enumerate(code.splitlines(), start=1) if "MUST-FAIL" in text]
