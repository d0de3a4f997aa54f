"""Results and progress at their limits: kept for very long, very large, reported very
often.

Crosses outcomes.py and handles.py (the time-to-live of a record), the ack and cancel
scripts (which set it), pool.py (a result's size) and progress.py (the throttle).
"""

from __future__ import annotations

import math
from typing import Any

import pytest
import trio

import trunner
from trunner import TaskState
from trunner._wire.envelope import encode_message
from trunner.keys import Keys
from trunner.progress import MAX_MESSAGE, PROGRESS_INTERVAL

from ..conftest import Gate, config, open_checked_runner, parts, raw_client


def registry(gate: Gate | None = None) -> trunner.TaskRegistry:
    tasks = trunner.TaskRegistry()

    @tasks.task(keep_result=60)
    async def echo(payload: Any) -> Any:
        return payload

    @tasks.task(keep_result=1e300)
    async def forever(payload: Any) -> Any:
        return payload

    @tasks.task
    async def gated(payload: Any) -> Any:
        assert gate is not None
        gate.enter(payload)
        await gate.open.wait()
        return payload

    return tasks


@pytest.mark.parametrize("keep", [1e15, 1e18, 1e300])
async def test_a_result_kept_for_longer_than_redis_can_count_is_kept(
    url: str, group: str, keys: Keys, keep: float
) -> None:
    """A keep_result past what Redis takes as a time-to-live is kept as long as Redis can:
    it never fails the acknowledgement (of its task, and of every task acknowledged with
    it)."""
    gate = Gate()
    async with open_checked_runner(url, config(group), registry(gate)) as runner:
        handle = await runner.dispatch("echo", "long", keep_result=keep)
        assert await handle.result() == "long"
        assert await (await runner.dispatch("forever", "task")).result() == "task"
        assert await (await runner.dispatch("echo", "after")).result() == "after"
        raw = raw_client(url)
        try:
            assert raw.pttl(keys.task(str(handle))) > 10**12
        finally:
            raw.close()
        # a cancelled task's outcome is kept as long
        cancelled = await runner.dispatch_delayed("gated", 1, 3600, keep_result=keep)
        assert await cancelled.cancel() is trunner.CancelOutcome.REMOVED
        assert (await cancelled.status()).state is TaskState.CANCELLED
        assert await runner.admin.pending_count() == 0


async def test_a_foreign_message_asking_to_keep_its_result_for_ever_is_acknowledged(
    url: str, group: str, keys: Keys
) -> None:
    """A producer without trunner's checks wrote the options: the runner copes."""
    data = encode_message("echo", "foreign", enqueued_at=1.0, max_bytes=10_000)
    data = data[:-1] + b',"keep_result":1e300}'
    raw = raw_client(url)
    try:
        entry = raw.xadd(keys.stream, {"payload": data}).decode()
    finally:
        raw.close()
    async with open_checked_runner(url, config(group), registry()) as runner:
        assert await runner.handle(entry).result() == "foreign"
        assert await (await runner.dispatch("echo", "after")).result() == "after"


def odd_results() -> trunner.TaskRegistry:
    tasks = trunner.TaskRegistry()

    @tasks.task(keep_result=60, max_retry=2, retry_backoff=0.01)
    async def nan(kind: str) -> Any:
        return {"value": {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}[kind]}

    @tasks.task(max_retry=2, retry_backoff=0.01)
    async def nan_unkept(_: Any) -> float:
        return math.nan  # nothing is kept: nothing to refuse

    @tasks.task(keep_result=60, max_retry=2, retry_backoff=0.01)
    async def sized(size: int) -> str:
        return "x" * size

    return tasks


@pytest.mark.parametrize("kind", ["nan", "inf", "-inf"])
async def test_a_result_holding_nan_or_infinity_is_refused_not_turned_to_null(
    url: str, group: str, kind: str
) -> None:
    """JSON has no NaN nor Infinity (a payload holding one is refused at dispatch): a
    kept result holding one is given up at once, like any result with no JSON form, rather
    than read back as None."""
    tasks = odd_results()
    async with open_checked_runner(url, config(group), tasks) as runner:
        with pytest.raises(trunner.TaskFailed) as info:
            await (await runner.dispatch("nan", kind)).result()
        assert info.value.attempt == 1
        error = info.value.error
        assert isinstance(error, trunner.errors.RemoteFailure)
        assert error.type_name == "InvalidResult"
        assert "NaN" in error.message
        await (await runner.dispatch("nan_unkept", None)).status()
    with pytest.raises(trunner.MaxRetryExceeded) as eager:
        await tasks.call("nan", kind)
    assert isinstance(eager.value.__cause__, trunner.errors.InvalidResult)


async def test_a_result_larger_than_max_payload_bytes_is_refused(url: str, group: str) -> None:
    """A kept result is bounded as a message is: one larger than ``max_payload_bytes`` is
    given up at once (it would be held in Redis for keep_result seconds)."""
    tasks = odd_results()
    cfg = config(group, max_payload_bytes=10_000)
    async with open_checked_runner(url, cfg, tasks) as runner:
        assert len(await (await runner.dispatch("sized", 9_000)).result()) == 9_000
        with pytest.raises(trunner.TaskFailed) as info:
            await (await runner.dispatch("sized", 10_000)).result()
        assert info.value.attempt == 1
        error = info.value.error
        assert isinstance(error, trunner.errors.RemoteFailure)
        assert error.type_name == "InvalidResult"
        assert "max_payload_bytes" in error.message
        assert await runner.admin.dead_letter_count() == 1
    # eager mode bounds it by the default, 1 MiB, as a runner with the default does
    assert len(await tasks.call("sized", 1000)) == 1000
    with pytest.raises(trunner.MaxRetryExceeded) as eager:
        await tasks.call("sized", 2 << 20)
    assert isinstance(eager.value.__cause__, trunner.errors.InvalidResult)


async def test_progress_reports_of_done_are_throttled_too(url: str, group: str) -> None:
    """A report of 1.0 is written at once; a task that reports 1.0 again and again (in a
    loop) writes no more often than other reports."""
    tasks = trunner.TaskRegistry()
    took: list[float] = []

    @tasks.task(keep_result=60)
    async def spam(count: int) -> int:
        began = trio.current_time()
        for _ in range(count):
            await trunner.report_progress(1.0, "done \udcff" + "!" * 1000)
        took.append(trio.current_time() - began)
        return count

    async with open_checked_runner(url, config(group), tasks) as runner:
        outcomes = parts(runner).outcomes
        written: list[float | None] = []
        write = outcomes.progress

        async def counted(job: Any) -> None:
            written.append(job.progress)
            await write(job)

        outcomes.progress = counted  # type: ignore[method-assign]
        handle = await runner.dispatch("spam", 1000)
        assert await handle.result() == 1000
        assert 1 <= len(written) <= 2 + took[0] / PROGRESS_INTERVAL
        status = await handle.status()
        assert status.progress == 1.0
        assert status.progress_message is not None
        assert status.progress_message.startswith("done ")
        assert len(status.progress_message) < 2 * MAX_MESSAGE  # cut (the surrogate escaped)
