"""``trunner demo``: several runner instances sharing one consumer group.

Runs on an in-process Redis (``memory://demo``) unless a URL is given (``REDIS_URL``).
"""

from __future__ import annotations

import argparse
import random
import secrets
import signal
import sys
from collections import Counter
from collections.abc import Callable
from typing import Any

import trio

from .._context import current_message
from .._redis import redact_url
from ..admin import open_admin
from ..client import open_client
from ..config import RunnerConfig
from ..message import TaskMessage
from ..registry import TaskRegistry
from ..runner import Runner, current_runner

__all__ = ["demo", "run_demo"]


class _Demo:
    def __init__(self, out: Callable[[str], None], instances: int) -> None:
        self.out = out
        self.ran: Counter[str] = Counter()
        self.finished = 0
        self.dead: list[str] = []
        self.all_done = trio.Event()
        self.expected = 0
        self.names: dict[int, str] = {}
        self.width = len(f"instance-{instances}")

    def who(self) -> str:
        return self.names[id(current_runner())]

    def say(self, who: str, text: str) -> None:
        self.out(f"  [{who:<{self.width}}] {text}")

    def done(self) -> None:
        self.finished += 1
        if self.finished == self.expected:
            self.all_done.set()

    def registry(self) -> TaskRegistry:
        tasks = TaskRegistry()

        @tasks.task
        async def resize_image(payload: dict[str, Any]) -> None:
            await trio.sleep(payload["ms"] / 1000)
            who = self.who()
            self.ran[who] += 1
            self.say(who, f"resize_image  #{payload['image']:<3} {payload['ms']:>4} ms")
            self.done()

        @tasks.task(max_retry=3, retry_backoff=0.2)
        async def send_email(payload: dict[str, Any]) -> None:
            attempt = current_message().attempt
            who = self.who()
            self.ran[who] += 1
            if attempt <= payload["fail_times"]:
                self.say(who, f"send_email    to {payload['to']}: SMTP timeout (attempt {attempt})")
                raise TimeoutError("SMTP server did not answer")
            self.say(who, f"send_email    to {payload['to']}: sent (attempt {attempt})")
            self.done()

        @tasks.task(max_retry=1, retry_backoff=0.2)
        async def charge_card(payload: dict[str, Any]) -> None:
            who = self.who()
            self.ran[who] += 1
            attempt = current_message().attempt
            self.say(who, f"charge_card   {payload['card']}: declined (attempt {attempt})")
            raise ValueError("card declined")

        return tasks

    async def on_failure(self, message: TaskMessage, error: BaseException) -> None:
        self.dead.append(message.task_name)
        cause = error.__cause__ or error
        self.out(
            f"  [dead-letter] {message.task_name} given up after {message.attempt} attempts: "
            f"{type(cause).__name__}: {cause}"
        )
        self.done()
        await trio.lowlevel.checkpoint()


async def run_demo(
    url: str = "memory://demo",
    *,
    instances: int = 3,
    images: int = 15,
    out: Callable[[str], None] = print,
    seed: int | None = None,
) -> dict[str, Any]:
    """Run the demo; return its figures (also printed through ``out``)."""
    rng = random.Random(seed)
    demo = _Demo(out, instances)
    group = f"demo-{secrets.token_hex(3)}"
    where = redact_url(url)
    if url.startswith("memory://"):
        where += " (an in-process Redis; set REDIS_URL to use a real one)"
    plural = "s share" if instances > 1 else " uses"
    out(f"trunner demo: {instances} runner instance{plural} consumer group {group!r}")
    out(f"Redis: {where}")
    out("")
    tasks = demo.registry()
    emails = [("ada@example.com", 0), ("grace@example.com", 1), ("alan@example.com", 2)]
    demo.expected = images + len(emails) + 1
    async with trio.open_nursery() as nursery:
        runners: list[Runner] = []
        for i in range(1, instances + 1):
            config = RunnerConfig(
                consumer_group=group,
                num_workers=4,
                consumer_name=f"instance-{i}-{secrets.token_hex(2)}",
                block_duration=1.0,
                failed_task_handler=demo.on_failure,
            )
            runner = Runner(url, config, tasks)
            await nursery.start(runner.run)
            demo.names[id(runner)] = f"instance-{i}"
            runners.append(runner)
        out(f"{instances} instances started; dispatching {demo.expected} tasks from a client")
        out("")
        async with open_client(url, group) as client:
            await client.dispatch_many(
                "resize_image",
                [{"image": n, "ms": rng.randint(20, 250)} for n in range(1, images + 1)],
            )
            for to, fail_times in emails:
                await client.dispatch("send_email", {"to": to, "fail_times": fail_times})
            await client.dispatch("charge_card", {"card": "4000 0000 0000 0002"})
            await demo.all_done.wait()
            # The last acknowledgements are written in a batch a few ms later.
            with trio.move_on_after(2.0):
                while (  # noqa: ASYNC110
                    await client.admin.queue_length() or await client.admin.pending_count()
                ):
                    await trio.sleep(0.01)
            queued = await client.admin.queue_length()
            pending = await client.admin.pending_count()
            dead = await client.admin.dead_letter_count()
        out("")
        out("who ran what:")
        for runner in runners:
            name = demo.names[id(runner)]
            stats = runner.statistics()
            out(
                f"  {name:<{demo.width}}  {demo.ran[name]:>3} runs   "
                f"{stats.succeeded:>3} ok   {stats.failed} failed   {stats.retried} retried"
            )
        totals = [r.statistics() for r in runners]
        summary = {
            "group": group,
            "instances": instances,
            "tasks": demo.expected,
            "runs": sum(demo.ran.values()),
            "succeeded": sum(s.succeeded for s in totals),
            "retried": sum(s.retried for s in totals),
            "dead_lettered": sum(s.dead_lettered for s in totals),
            "queued": queued,
            "pending": pending,
            "dead_letter_stream": dead,
            "per_instance": {demo.names[id(r)]: demo.ran[demo.names[id(r)]] for r in runners},
        }
        out(
            f"  total: {summary['runs']} runs of {summary['tasks']} tasks, "
            f"{summary['succeeded']} succeeded, {summary['retried']} retried, "
            f"{summary['dead_lettered']} dead-lettered; queue {queued}, pending {pending}"
        )
        out("")
        for line in _legend(summary):
            out(line)
        out("")
        out("stopping the instances (graceful drain) ...")
        for runner in runners:
            runner.stop()
    out("all instances stopped: " + ", ".join(r.state.name for r in runners))
    if not url.startswith("memory://"):
        await _delete_demo_keys(url, group)
    return summary


def _legend(summary: dict[str, Any]) -> list[str]:
    """What the figures above mean."""
    ended = summary["succeeded"] + summary["dead_lettered"]
    return [
        "  runs     attempts the instance ran (a retry runs on whichever instance fetches it)",
        "  ok       attempts that succeeded",
        "  failed   attempts that raised; 'retried' of them got another attempt, the others",
        "           were given up: the failed-task handler ran and they were dead-lettered",
        f"  Each task ended once: {summary['succeeded']} succeeded + "
        f"{summary['dead_lettered']} dead-lettered = {ended} of {summary['tasks']} tasks;",
        f"  queue {summary['queued']} and pending {summary['pending']}: nothing is left "
        "waiting or unacknowledged.",
    ]


async def _delete_demo_keys(url: str, group: str) -> None:
    async with open_admin(url, group) as admin:
        await admin._open_broker().delete_group()


async def demo(args: argparse.Namespace) -> int:
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:

            async def stop_on_signal() -> None:
                async for signum in signals:
                    print(f"\n{signal.Signals(signum).name}: stopping", file=sys.stderr)
                    nursery.cancel_scope.cancel()
                    return

            nursery.start_soon(stop_on_signal)
            await run_demo(args.redis, instances=args.instances, images=args.images)
            nursery.cancel_scope.cancel()
    return 0
