"""``python -m tests.processes.elector_process URL KEY TTL WAIT``: campaign for the lease
KEY; print "leader" when promoted."""

from __future__ import annotations

import sys

import trio

from trunner.election import open_elector


async def main(url: str, key: str, ttl: float, wait: float) -> None:
    async with open_elector(url, key, ttl=ttl, wait=wait) as elector:
        print("ready", flush=True)
        await elector.wait_promoted()
        print("leader", flush=True)
        await trio.sleep_forever()


if __name__ == "__main__":
    trio.run(main, sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4]))
