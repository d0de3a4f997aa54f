"""Typed dispatch, checked by mypy as a user's code is: a handle is typed by its task's
return annotation, and a payload of the wrong type is a type error at the call."""

from __future__ import annotations

from pathlib import Path

from mypy import api

USER_CODE = """
from __future__ import annotations

import attrs
import trunner

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
"""


def test_handles_are_typed_by_their_task(tmp_path: Path) -> None:
    source = tmp_path / "user_code.py"
    source.write_text(USER_CODE)
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
    assert revealed == [
        'note: Revealed type is "trunner.handles.TaskHandle[user_code.Thumbnail]"',
        'note: Revealed type is "user_code.Thumbnail"',
        'note: Revealed type is "trunner.handles.TaskHandle[user_code.Thumbnail]"',
        'note: Revealed type is "trunner.handles.TaskHandle[user_code.Thumbnail]"',
        'note: Revealed type is "trunner.handles.TaskHandle[Any]"',
        'note: Revealed type is "trunner.handles.TaskHandle[Any]"',
    ], out + err
    errors = [line for line in out.splitlines() if ": error: " in line]
    must_fail = [
        number for number, text in enumerate(USER_CODE.splitlines(), start=1) if "MUST-FAIL" in text
    ]
    failing = sorted({int(line.split(":")[1]) for line in errors})
    assert failing == must_fail, out + err
