"""Names read from the stream are unbounded: only registered tasks get per-name figures.

Messages of unknown task names (and undecodable ones) count under one name,
``(unregistered)``, in ``task_totals()``, the timings and the Prometheus metrics.
"""

from __future__ import annotations

from typing import Any

import trunner
from trunner.prometheus import collect
from trunner.statistics import UNREGISTERED

from ..conftest import Tally, config, redis_state

JUNK = 300


async def test_unknown_task_names_count_under_one_name(
    url: str, group: str, raw: Any, tally: Tally
) -> None:
    tasks = trunner.TaskRegistry()

    @tasks.task
    async def known(payload: Any) -> None:
        tally.record(payload)

    stream = f"trunner:{{{group}}}:stream"
    async with trunner.open_runner(url, config(group), tasks) as runner:
        await runner.dispatch("known", 1)
        await tally.wait(1)
        small = len(collect(runner))
        pipe = raw.pipeline()
        for i in range(JUNK):
            pipe.xadd(stream, {"payload": f'{{"task":"junk-{i}","payload":{i}}}'})
        pipe.xadd(stream, {"payload": b"not json"})
        pipe.execute()

        async def all_dead() -> bool:
            # In Redis, and counted: the runner counts a dead letter once the script's
            # reply is in, which comes after the entry is visible to others.
            counted = runner.statistics().dead_lettered == JUNK + 1
            return counted and await runner.admin.dead_letter_count() == JUNK + 1

        await redis_state(all_dead)
        totals = runner.task_totals()
        assert set(totals) == {"known", UNREGISTERED}
        assert totals[UNREGISTERED].dead_lettered == JUNK + 1
        assert totals["known"].succeeded == 1
        assert set(runner.timings.tasks) == {"known"}
        assert runner.statistics().dead_lettered == JUNK + 1
        metrics = collect(runner).decode()
        assert "junk-" not in metrics
        assert f'task="{UNREGISTERED}"}} {float(JUNK + 1)}' in metrics
        assert len(metrics) < small + 1000, "one more series per family, not one per name"
