"""How long a ``run_in="process"`` attempt takes to end once its timeout passes: from the
deadline to the attempt failed with ``TaskTimeout`` and its worker process killed and
reaped (the core free). Each attempt spins in pure Python in a new worker process, with
a timeout of 1 s (longer than a process takes to start here).

    .venv/bin/python bench/process_kill.py [attempts]    # default 50 (~1 min)
"""

from __future__ import annotations

import statistics
import sys

import trio

import trunner
from trunner._context import Given, _current_message
from trunner._executors.processes import ProcessExecutor
from trunner._util import timed
from trunner._wire.decode import decode_message
from trunner._wire.envelope import PAYLOAD_FIELD, encode_message

TIMEOUT = 1.0


def spin(_: None) -> None:
    while True:
        pass


async def kill_latencies(attempts: int) -> list[float]:
    """Milliseconds from each attempt's deadline to its ``TaskTimeout`` (the process killed
    and reaped), for ``attempts`` attempts after a first, cold one; sorted. Also run by
    bench/bodies.py (scenario 21, the row "trunner's process executor alone")."""
    executor = ProcessExecutor(1)
    await executor.open()
    body = executor.body(spin, "spin")
    data = encode_message("spin", None, enqueued_at=0.0, max_bytes=1024)
    _current_message.set(Given(decode_message("1-0", [PAYLOAD_FIELD, data])))
    late: list[float] = []
    for _ in range(attempts + 1):
        start = trio.current_time()
        try:
            await timed(body, None, "spin", TIMEOUT)
        except trunner.TaskTimeout:
            late.append((trio.current_time() - (start + TIMEOUT)) * 1000)
    await executor.aclose()
    return sorted(late[1:])  # the first one started the first process cold


async def main(attempts: int) -> None:
    late = await kill_latencies(attempts)
    p99 = late[min(len(late) - 1, int(len(late) * 0.99))]
    print(
        f"{len(late)} attempts killed: deadline -> attempt ended, "
        f"p50 {statistics.median(late):.1f} ms, p99 {p99:.1f} ms, max {late[-1]:.1f} ms"
    )


if __name__ == "__main__":
    trio.run(main, int(sys.argv[1]) if len(sys.argv) > 1 else 50)
