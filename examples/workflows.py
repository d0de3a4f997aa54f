"""Workflows: word counts of several pages fetched side by side, then one total; one page
read two ways, the two results joined (a graph): ``python examples/workflows.py``. Uses an
in-process Redis unless REDIS_URL is set.
"""

from __future__ import annotations

import os

import trio

import trunner
from trunner.workflows import Graph, chain, chord, group, step

tasks = trunner.TaskRegistry()

PAGES = {
    "https://example.com/a": "one two three",
    "https://example.com/b": "four five",
    "https://example.com/c": "six",
}


@tasks.task(max_retry=2, retry_backoff=0.1)
async def fetch(url: str) -> str:
    await trio.sleep(0.01)  # an HTTP request here
    if url not in PAGES:
        raise LookupError(f"no page at {url}")
    return PAGES[url]


@tasks.task()
async def count_words(page: str) -> int:
    return len(page.split())


@tasks.task()
async def total(counts: list[int]) -> int:
    return sum(counts)


@tasks.task()
async def longest_word(page: str) -> str:
    return max(page.split(), key=len)


@tasks.task()
async def summarize(facts: tuple[int, str]) -> str:
    words, longest = facts
    return f"{words} words, the longest {longest!r}"


async def main() -> None:
    url = os.environ.get("REDIS_URL", "memory://workflows")
    config = trunner.RunnerConfig(consumer_group="pages")
    async with trunner.open_runner(url, config, tasks) as runner:
        counts = group(chain(step(fetch, page), step(count_words)) for page in PAGES)
        handle = await runner.dispatch(chord(counts, step(total)))
        print(f"{await handle.result(timeout=30)} words in {len(PAGES)} pages")

        g = Graph()  # one page feeds two steps; a third joins their results
        page = g.add(step(fetch, "https://example.com/a"))
        words, longest = g.then(page, step(count_words)), g.then(page, step(longest_word))
        summary = g.join(step(summarize), words, longest)  # summarize((words, longest))
        print(await (await runner.dispatch(g.returning(summary))).result(timeout=30))

        broken = group(step(fetch, page) for page in [*PAGES, "https://example.com/x"])
        fetched = await runner.dispatch(broken)
        try:
            await fetched.result(timeout=30)
        except trunner.WorkflowFailed as failed:  # as a nursery: every failure, in a group
            for error in failed.failures:
                print(f"step {error.node} ({error.task_name}) failed: {error.error.message}")


if __name__ == "__main__":
    trio.run(main)
