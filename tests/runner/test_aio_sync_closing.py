"""The asyncio and synchronous clients (trunner/aio.py, trunner/sync.py, trunner/_client_thread.py)
at their edges, on a real redis-server: calls under way when the client closes (a dispatch
completes first, a wait raises ``RunnerNotRunning``, never a Trio exception), a process
forked while a thread opens the synchronous client, an opening interrupted, and calls
from the client's own thread.

No worker runs: the tasks dispatched here only wait in the stream.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import os
import signal
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
import redis
import trio

import trunner
import trunner._client_thread
import trunner.aio
import trunner.sync
from trunner.errors import RunnerNotRunning
from trunner.keys import Keys

from ..conftest import run_python
from ..support.servers import RedisServer


class Held(trunner.Middleware):
    """Holds the dispatch of the payload ``"held"`` in its on_dispatch hook until
    ``released`` is set: a dispatch under way for as long as a test wants."""

    def __init__(self, in_thread: Callable[[Callable[[], bool]], Awaitable[bool]]) -> None:
        self.entered = threading.Event()
        self.released = threading.Event()
        self._in_thread = in_thread

    async def on_dispatch(self, dispatch: trunner.DispatchInfo) -> None:
        if dispatch.payload == "held":
            self.entered.set()
            await self._in_thread(self.released.wait)


def subscribed(url: str, keys: Keys) -> bool:
    """Whether a client waits for finished tasks (its one subscription is up)."""
    with redis.Redis.from_url(url) as raw:
        return int(raw.pubsub_numsub(keys.done)[0][1]) == 1


def queued(url: str, keys: Keys) -> list[str]:
    """The payloads in the group's stream."""
    with redis.Redis.from_url(url) as raw:
        entries = raw.xrange(keys.stream)
    return [json.loads(fields[b"payload"])["payload"] for _, fields in entries]


def connections(url: str, role: str) -> list[str]:
    with redis.Redis.from_url(url) as raw:
        return [c["name"] for c in raw.client_list() if c["name"].startswith(role)]


@pytest.mark.deadline(60)
async def test_a_sync_client_closing_lets_a_dispatch_under_way_complete_first(
    redis_server: RedisServer, group: str, keys: Keys
) -> None:
    """A close while a thread dispatches (a Flask worker shutting down while a request
    dispatches): the dispatch completes before ``close`` returns; a thread waiting for a
    result, and a call made once the close began, raise ``RunnerNotRunning`` (never
    ``trio.Cancelled``); a second close returns once the first ended; and the client
    refuses calls until it is opened again."""
    url = redis_server.url

    def scenario() -> dict[str, Any]:
        held = Held(trio.to_thread.run_sync)
        before = set(threading.enumerate())
        client = trunner.sync.Client(url, queue=group, middleware=[held]).open()
        (loop,) = set(threading.enumerate()) - before  # the client's thread
        waited = client.dispatch("kept", "waited")
        seen: dict[str, Any] = {}

        def wait_then_release() -> None:
            try:
                with pytest.raises(RunnerNotRunning, match="closed"):
                    waited.result()  # until the close ends the waits
                with pytest.raises(RunnerNotRunning, match="closed"):
                    client.dispatch("kept", "late")
            finally:
                held.released.set()
            client.close()  # while the first close lets the held dispatch end
            seen["running at the second close"] = loop.is_alive()
            seen["queued at the second close"] = queued(url, keys)

        def close() -> None:
            client.close()
            seen["queued at close"] = queued(url, keys)

        with concurrent.futures.ThreadPoolExecutor(3) as pool:
            waiting = pool.submit(wait_then_release)
            while not subscribed(url, keys):  # Redis state: no event to await
                time.sleep(0.01)
            dispatching = pool.submit(client.dispatch, "kept", "held")
            held.entered.wait()
            closing = pool.submit(close)
            seen["held"] = dispatching.result()
            waiting.result()
            closing.result()
        with pytest.raises(RunnerNotRunning, match=r"closed \(open it again"):
            client.dispatch("kept", "after")
        seen["left"] = connections(url, f"trunner-client:{group}@")
        with client:  # opened again
            seen["again"] = client.dispatch("kept", "again")
        return seen

    seen = await trio.to_thread.run_sync(scenario, abandon_on_cancel=True)
    assert isinstance(seen["held"], trunner.sync.TaskHandle)
    assert seen["queued at close"] == seen["queued at the second close"] == ["waited", "held"]
    assert seen["running at the second close"] is False
    assert seen["left"] == []
    assert queued(redis_server.url, keys) == ["waited", "held", "again"]


@pytest.mark.deadline(60)
async def test_an_asyncio_client_closing_lets_a_dispatch_under_way_complete_first(
    redis_server: RedisServer, group: str, keys: Keys
) -> None:
    """The same on asyncio: the dispatch under way completes before ``aclose`` returns,
    over the connections it began on (none is opened again behind the close), and a
    second ``aclose`` returns once the first ended."""
    url = redis_server.url

    async def scenario() -> dict[str, Any]:
        held = Held(asyncio.to_thread)
        client = trunner.aio.Client(url, queue=group, middleware=[held])
        await client.open()
        waited = await client.dispatch("kept", "waited")
        waiting = asyncio.ensure_future(waited.result())
        while not subscribed(url, keys):  # noqa: ASYNC110 - Redis state: no event to await
            await asyncio.sleep(0.01)
        dispatching = asyncio.ensure_future(client.dispatch("kept", "held"))
        await asyncio.to_thread(held.entered.wait)
        closing = asyncio.ensure_future(client.aclose())
        seen: dict[str, Any] = {}
        try:
            with pytest.raises(RunnerNotRunning):
                await waiting
            with pytest.raises(RunnerNotRunning, match="not open"):
                await client.dispatch("kept", "late")
            again = asyncio.ensure_future(client.aclose())
            await asyncio.sleep(0)  # it ran up to where it waits
            seen["second close returned at once"] = again.done()
        finally:
            held.released.set()
        await again
        seen["dispatched at the second close"] = dispatching.done()
        await closing
        seen["dispatched at close"] = dispatching.done()
        seen["queued at close"] = queued(url, keys)
        seen["held"] = dispatching.result()
        seen["left"] = connections(url, f"trunner-aio:{group}@")
        return seen

    seen = await trio.to_thread.run_sync(lambda: asyncio.run(scenario()), abandon_on_cancel=True)
    assert isinstance(seen["held"], trunner.TaskHandle)
    assert seen["second close returned at once"] is False
    assert seen["dispatched at the second close"] is seen["dispatched at close"] is True
    assert seen["queued at close"] == ["waited", "held"]
    assert seen["left"] == []


@pytest.mark.deadline(60)
async def test_a_sync_call_under_way_when_the_clients_thread_fails_raises_runner_not_running(
    redis_server: RedisServer, group: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The client's thread failing (its Trio client crashed) while a call runs: the call
    raises ``RunnerNotRunning``, not the ``trio.Cancelled`` of the thread's end."""
    crash = threading.Event()
    opened = trunner.open_client

    @contextlib.asynccontextmanager
    async def crashing(*args: Any, **kwargs: Any) -> AsyncIterator[trunner.Client]:
        async def crash_when_told() -> None:
            await trio.to_thread.run_sync(crash.wait)
            raise RuntimeError("the client crashed")

        async with opened(*args, **kwargs) as client, trio.open_nursery() as nursery:
            nursery.start_soon(crash_when_told)
            yield client  # the crash cancels the block

    class Forever(trunner.Middleware):
        entered = threading.Event()

        async def on_dispatch(self, dispatch: trunner.DispatchInfo) -> None:
            self.entered.set()
            await trio.sleep_forever()  # until the thread ends

    monkeypatch.setattr(trunner._client_thread, "open_client", crashing)

    def scenario() -> str:
        client = trunner.sync.Client(redis_server.url, queue=group, middleware=[Forever()])
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            dispatching = pool.submit(client.open().dispatch, "kept", 1)
            Forever.entered.wait()
            crash.set()
            with pytest.raises(RunnerNotRunning, match="ended while this call ran") as raised:
                dispatching.result()
        with pytest.raises(RunnerNotRunning, match="thread ended"):
            client.dispatch("kept", 2)
        client.close()
        return str(raised.value)

    assert "ended" in await trio.to_thread.run_sync(scenario, abandon_on_cancel=True)


async def test_a_sync_client_refuses_calls_from_its_own_thread(
    redis_server: RedisServer, group: str, keys: Keys
) -> None:
    """A close or a call from the client's own thread (an on_dispatch hook) would wait for
    itself: refused with a ``RuntimeError`` saying so, the client left as it was."""

    class Calling(trunner.Middleware):
        client: trunner.sync.Client

        def __init__(self) -> None:
            self.raised: list[str] = []

        def on_dispatch(self, dispatch: trunner.DispatchInfo) -> None:
            if dispatch.payload == "calls":
                for call in (self.client.close, lambda: self.client.dispatch("kept", "inner")):
                    try:
                        call()
                    except RuntimeError as exc:
                        self.raised.append(str(exc))

    def scenario() -> tuple[list[str], int]:
        hook = Calling()
        before = set(threading.enumerate())
        with trunner.sync.Client(redis_server.url, queue=group, middleware=[hook]) as client:
            hook.client = client
            client.dispatch("kept", "calls")
            client.dispatch("kept", "after")  # on the same thread: still open
            threads = set(threading.enumerate()) - before
        return hook.raised, len([t for t in threads if t.name == "trunner.sync.Client"])

    raised, threads = await trio.to_thread.run_sync(scenario, abandon_on_cancel=True)
    assert len(raised) == 2
    assert all("from its own thread" in text for text in raised)
    assert threads == 1
    assert queued(redis_server.url, keys) == ["calls", "after"]


#: A child forked while another thread opens the client (held in its opening until the
#: fork is done): its own calls open its own client. The child dies of SIGALRM if it
#: hangs, so the parent's wait is bounded.
CHILD_DEADLINE = 30


@pytest.mark.skipif(not hasattr(os, "fork"), reason="this platform cannot fork")
@pytest.mark.filterwarnings("ignore:.*multi-threaded.*fork:DeprecationWarning")
@pytest.mark.deadline(CHILD_DEADLINE * 2)
async def test_a_child_forked_while_a_thread_opens_the_sync_client_opens_its_own(
    redis_server: RedisServer, group: str, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    entered, go_on = threading.Event(), threading.Event()
    opened = trunner.open_client

    @contextlib.asynccontextmanager
    async def held_open(*args: Any, **kwargs: Any) -> AsyncIterator[trunner.Client]:
        entered.set()
        await trio.to_thread.run_sync(go_on.wait)
        async with opened(*args, **kwargs) as client:
            yield client

    monkeypatch.setattr(trunner._client_thread, "open_client", held_open)

    def scenario() -> tuple[int, str, str]:
        client = trunner.sync.Client(redis_server.url, queue=group)
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            opening = pool.submit(client.open)  # holds the client's lock while it opens
            entered.wait()
            read, write = os.pipe()
            pid = os.fork()
            if pid == 0:  # the child: never returns to pytest
                status = 1
                try:
                    signal.alarm(CHILD_DEADLINE)
                    go_on.set()  # the child's own opening goes on
                    handle = client.dispatch("kept", "child")
                    client.close()
                    os.write(write, str(handle).encode())
                    status = 0
                finally:
                    os._exit(status)
            os.close(write)
            go_on.set()
            opening.result()
            parent = client.dispatch("kept", "parent")
            client.close()
        _, status = os.waitpid(pid, 0)
        with os.fdopen(read) as pipe:
            return status, pipe.read(), str(parent)

    status, child, parent = await trio.to_thread.run_sync(scenario, abandon_on_cancel=True)
    assert os.waitstatus_to_exitcode(status) == 0
    assert sorted(queued(redis_server.url, keys)) == ["child", "parent"]
    assert len({child, parent}) == 2  # two tasks, by two clients


#: Opens a sync client whose opening is interrupted by a signal: SIGINT
#: (``KeyboardInterrupt``), or SIGTERM whose handler closes the client. Prints what was
#: left: the client's threads and connections, and what the opening raised.
INTERRUPTED = """
import contextlib, json, os, signal, sys, threading
import redis, trio
import trunner._client_thread, trunner.sync
from trunner._util import connection_name

url, queue, how = sys.argv[1:]
main = threading.main_thread().ident
handled = threading.Event()
opened = trunner._client_thread.open_client

@contextlib.asynccontextmanager
async def interrupted(*args, **kwargs):
    async with opened(*args, **kwargs) as client:  # connected: interrupted now
        signal.pthread_kill(main, signal.SIGINT if how == "interrupt" else signal.SIGTERM)
        if how == "interrupt":
            await trio.sleep_forever()  # until the interrupted opener gives up
        await trio.to_thread.run_sync(handled.wait)
        yield client

trunner._client_thread.open_client = interrupted
client = trunner.sync.Client(url, queue=queue)

def close(*_):
    client.close()
    handled.set()

signal.signal(signal.SIGTERM, close)
try:
    client.dispatch("kept", how)
    raised = "nothing"
except BaseException as exc:
    raised = type(exc).__name__
try:
    client.dispatch("kept", how)
    after = "nothing"
except BaseException as exc:
    after = type(exc).__name__
with redis.Redis.from_url(url) as raw:
    left = [c["name"] for c in raw.client_list()
            if c["name"] == connection_name(f"trunner-client:{queue}")]
threads = [t.name for t in threading.enumerate() if t.name.startswith("trunner")]
print(json.dumps([raised, after, threads, left]))
"""


@pytest.mark.skipif(not hasattr(signal, "pthread_kill"), reason="no pthread_kill here")
@pytest.mark.parametrize(
    ("how", "raised", "after"),
    [
        # A KeyboardInterrupt while the client opens: nothing is left running.
        ("interrupt", "KeyboardInterrupt", "KeyboardInterrupt"),
        # A signal handler of the opening thread closes the client: the close holds.
        ("close", "RunnerNotRunning", "RunnerNotRunning"),
    ],
)
def test_an_interrupted_sync_opening_leaves_nothing_behind(
    redis_server: RedisServer, group: str, how: str, raised: str, after: str
) -> None:
    done = run_python("-c", INTERRUPTED, redis_server.url, group, how)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [raised, after, [], []]
