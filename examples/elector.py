"""The leader election on its own: ``python examples/elector.py``.

Three candidates campaign for one lease. Each, once it leads, does a fenced write (Redis
runs it only while the lease holds that candidate's id) and leaves, releasing the lease;
a follower is told and takes over at once. Uses an in-process Redis unless REDIS_URL is set.
"""

from __future__ import annotations

import os

import trio

import trunner
from trunner.election import open_elector

KEY = "examples:{nightly-report}:leader"
RUNS = "examples:{nightly-report}:runs"  # same hash tag: one script may use both keys
RECORD_RUN = "return redis.call('RPUSH', KEYS[2], ARGV[2])"


async def candidate(url: str, name: str) -> None:
    async with open_elector(url, KEY, ttl=5.0, wait=6.0, id=name) as elector:
        await elector.wait_promoted()
        try:
            runs = await elector.eval_fenced(RECORD_RUN, keys=[RUNS], args=[name])
        except trunner.errors.LeadershipLost:
            print(f"{name} lost the lease before writing: nothing written")
            return
        print(f"{name} leads (fence {elector.fence}): nightly report run #{runs}; stepping down")


async def main() -> None:
    url = os.environ.get("REDIS_URL", "memory://elector-example")
    async with trio.open_nursery() as nursery:
        for name in ("alpha", "beta", "gamma"):
            nursery.start_soon(candidate, url, name)
    print("every candidate led once, one at a time")


if __name__ == "__main__":
    trio.run(main)
