"""OpenTelemetry on a runner (in-process fakeredis and a real redis-server): the dispatch
and every attempt of a task in one trace — retries, delayed tasks, replays from the dead
letters — cron ticks as roots of their own, errors and cancellations recorded, nothing
traced of trunner's own work, no context leaking between attempts, a workflow as one
trace, and the runner's metrics through the OpenTelemetry API."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs
import pytest
import trio
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind, StatusCode

import trunner
from trunner import CancelOutcome, chain, chord, step
from trunner import workflows as wf
from trunner._wire.stats import BUCKETS
from trunner.middleware import DispatchInfo, WorkflowInfo
from trunner.otel import OpenTelemetryMiddleware, instrument_runner
from trunner.statistics import TaskTotals
from trunner.testing import capture_errors, run_until_idle

from ..conftest import config, open_checked_runner
from ..support.otel import metering, metric_points, tracing

TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def registry(
    ran: list[dict[str, str]],
    started: trio.Event | None = None,
    tracer: trace.Tracer | None = None,
) -> trunner.TaskRegistry:
    tasks = trunner.TaskRegistry()

    @tasks.task
    async def record(payload: Any) -> None:
        ran.append(dict(trunner.current_message().headers))

    @tasks.task(max_retry=1, retry_backoff=0.01)
    async def fails_once(payload: Any) -> None:
        if trunner.current_message().attempt == 1:
            raise RuntimeError("first attempt")

    failed: list[Any] = []

    @tasks.task(max_retry=0)
    async def fails_first(payload: Any) -> None:
        if not failed:  # the first run: dead-lettered, to be replayed
            failed.append(payload)
            raise ValueError("bad input")

    @tasks.task(keep_result=60)
    async def hangs(payload: Any) -> None:
        assert started is not None
        started.set()
        await trio.sleep_forever()

    @tasks.task
    async def nested(payload: Any) -> None:
        assert tracer is not None
        with tracer.start_as_current_span("inside"):
            await trio.lowlevel.checkpoint()

    @tasks.task
    async def inc(number: int) -> int:
        ran.append(dict(trunner.current_message().headers))
        return number + 1

    @tasks.task(max_retry=1, retry_backoff=0.01)
    async def flaky(number: int) -> int:
        ran.append(dict(trunner.current_message().headers))
        if trunner.current_message().attempt == 1:
            raise RuntimeError("first attempt")
        return number

    @tasks.task
    async def add(numbers: list[int]) -> int:
        ran.append(dict(trunner.current_message().headers))
        return sum(numbers)

    return tasks


def by_kind(spans: list[ReadableSpan], kind: SpanKind) -> list[ReadableSpan]:
    return [s for s in spans if s.kind is kind]


def ids(span: ReadableSpan) -> tuple[int, int]:
    assert span.context is not None
    return span.context.trace_id, span.context.span_id


def parent_of(span: ReadableSpan) -> int | None:
    return None if span.parent is None else span.parent.span_id


async def test_a_dispatch_and_its_attempt_are_one_trace(url: str, group: str) -> None:
    provider, spans = tracing()
    otel = OpenTelemetryMiddleware(provider)
    ran: list[dict[str, str]] = []
    async with open_checked_runner(url, config(group, middleware=[otel]), registry(ran)) as runner:
        handle = await runner.dispatch("record", 1, headers={"tenant": "acme"})
        dispatched, processed = await spans.wait(2)
        await run_until_idle(runner)
    assert dispatched.name == "dispatch record"
    assert dispatched.kind is SpanKind.PRODUCER
    assert dict(dispatched.attributes or {}) == {
        "messaging.system": "trunner",
        "messaging.operation.type": "create",
        "messaging.operation.name": "dispatch",
        "messaging.destination.name": group,
        "messaging.trunner.task.name": "record",
    }
    assert processed.name == "process record"
    assert processed.kind is SpanKind.CONSUMER
    assert dict(processed.attributes or {}) == {
        "messaging.system": "trunner",
        "messaging.operation.type": "process",
        "messaging.operation.name": "process",
        "messaging.destination.name": group,
        "messaging.consumer.group.name": group,
        "messaging.message.id": handle.id,
        "messaging.trunner.task.name": "record",
        "messaging.trunner.task.id": handle.id,
        "messaging.trunner.attempt": 1,
        "messaging.trunner.outcome": "succeeded",
    }
    trace_id, span_id = ids(dispatched)
    assert ids(processed)[0] == trace_id
    assert parent_of(processed) == span_id
    assert [link.context.span_id for link in processed.links] == [span_id]
    assert processed.status.status_code is StatusCode.UNSET
    # The user's header and the trace context, side by side.
    (headers,) = ran
    assert headers["tenant"] == "acme"
    assert headers["traceparent"].startswith(f"00-{trace_id:032x}-{span_id:016x}-")


async def test_a_retry_is_another_process_span_of_the_same_trace(url: str, group: str) -> None:
    provider, spans = tracing()
    cfg = config(group, middleware=[OpenTelemetryMiddleware(provider)])
    async with open_checked_runner(url, cfg, registry([])) as runner:
        with capture_errors(runner) as errors:
            await runner.dispatch("fails_once", None)
            first, second = await spans.wait(2, "process fails_once")
            errors.expect(RuntimeError)
        await run_until_idle(runner)
    (dispatched,) = spans.named("dispatch fails_once")
    trace_id, span_id = ids(dispatched)
    for span, attempt in ((first, 1), (second, 2)):
        assert ids(span)[0] == trace_id
        assert parent_of(span) == span_id
        assert span.attributes is not None
        assert span.attributes["messaging.trunner.attempt"] == attempt
    assert first.attributes is not None
    assert first.attributes["messaging.trunner.outcome"] == "failed"
    assert first.attributes["messaging.trunner.will_retry"] is True
    assert first.attributes["error.type"] == "RuntimeError"
    assert first.status.status_code is StatusCode.ERROR
    (event,) = first.events
    assert event.name == "exception"
    assert event.attributes is not None
    assert event.attributes["exception.message"] == "first attempt"
    # A retry is a new stream entry: its own message id, the same task id.
    assert second.attributes is not None
    assert second.attributes["messaging.message.id"] != first.attributes["messaging.message.id"]
    assert (
        second.attributes["messaging.trunner.task.id"]
        == first.attributes["messaging.trunner.task.id"]
    )
    assert second.status.status_code is StatusCode.UNSET


async def test_a_delayed_task_and_a_replayed_dead_letter_stay_in_their_trace(
    url: str, group: str
) -> None:
    provider, spans = tracing()
    ran: list[dict[str, str]] = []
    cfg = config(group, middleware=[OpenTelemetryMiddleware(provider)])
    async with open_checked_runner(url, cfg, registry(ran)) as runner:
        handle = await runner.dispatch_delayed("record", None, 0.05)
        (delayed,) = await spans.wait(1, "process record")
        with capture_errors(runner) as errors:
            await runner.dispatch("fails_first", None)
            (failed,) = await spans.wait(1, "process fails_first")
            while await runner.admin.dead_letter_count() < 1:  # noqa: ASYNC110 - state in Redis
                await trio.sleep(0.01)
            errors.expect(ValueError)
            errors.expect(trunner.MaxRetryExceeded)
        replayed, _ = await runner.admin.replay_dead_letters()
        assert len(replayed) == 1
        _, again = await spans.wait(2, "process fails_first")
        await run_until_idle(runner)
    dispatch_delayed, dispatch_failing = spans.named("dispatch record") + spans.named(
        "dispatch fails_first"
    )
    assert dispatch_delayed.attributes is not None
    assert dispatch_delayed.attributes["messaging.trunner.task.id"] == handle.id
    assert "messaging.trunner.delayed_until" in dispatch_delayed.attributes
    assert ids(delayed)[0] == ids(dispatch_delayed)[0]
    assert parent_of(delayed) == ids(dispatch_delayed)[1]
    # The dead-lettered attempt was the last: an error, not to be retried.
    assert failed.attributes is not None
    assert failed.attributes["messaging.trunner.will_retry"] is False
    assert failed.status.status_code is StatusCode.ERROR
    for span in (failed, again):
        assert ids(span)[0] == ids(dispatch_failing)[0]
        assert parent_of(span) == ids(dispatch_failing)[1]
    assert again.attributes is not None
    assert again.attributes["messaging.trunner.outcome"] == "succeeded"


@pytest.mark.deadline(30)
async def test_a_cron_tick_starts_a_trace_of_its_own(url: str, group: str) -> None:
    provider, spans = tracing()
    ran: list[dict[str, str]] = []
    tasks = registry(ran)
    tasks.cron("* * * * * *", "record", "tick", headers={"source": "cron"})
    cfg = config(group, middleware=[OpenTelemetryMiddleware(provider)])
    async with open_checked_runner(url, cfg, tasks) as runner:
        tick = (await spans.wait(1, "process record"))[0]
        await run_until_idle(runner)
    assert tick.parent is None
    assert list(tick.links) == []
    assert spans.named("dispatch record") == []  # a tick is not a dispatch
    assert ran[0] == {"source": "cron"}


async def test_a_cancelled_attempt_is_recorded_as_cancelled_not_failed(
    url: str, group: str
) -> None:
    provider, spans = tracing()
    started = trio.Event()
    cfg = config(group, middleware=[OpenTelemetryMiddleware(provider)])
    async with open_checked_runner(url, cfg, registry([], started)) as runner:
        handle = await runner.dispatch("hangs", None)
        await started.wait()
        assert await handle.cancel(wait=True) is CancelOutcome.CANCELLING
        (span,) = await spans.wait(1, "process hangs")
        await run_until_idle(runner)
    assert span.attributes is not None
    assert span.attributes["messaging.trunner.outcome"] == "cancelled"
    assert "error.type" not in span.attributes
    assert span.status.status_code is StatusCode.UNSET
    assert [event.name for event in span.events] == ["cancelled"]


async def test_an_idle_runner_makes_no_span(url: str, group: str) -> None:
    """Fetching, reclaiming, heartbeats, reports and the leader's chores are trunner's
    own work: the middleware wraps attempts and dispatches only."""
    provider, spans = tracing()
    cfg = config(
        group,
        middleware=[OpenTelemetryMiddleware(provider)],
        block_duration=0.05,
        reclaim_interval=0.05,
        report_interval=0.1,
    )
    async with open_checked_runner(url, cfg, registry([])) as runner:
        # What is looked for is an absence: a stretch of the Trio clock in which every
        # loop ran many times (reads blocking 50 ms, reclaim passes and reports).
        await trio.sleep(1.5)
        assert runner.is_leader
        await run_until_idle(runner)
    assert spans.ended == []


async def test_a_trace_context_the_caller_set_is_kept(url: str, group: str) -> None:
    """The conventions: a creation context the user put in the message is not replaced;
    the dispatch span links to it, and the attempt continues it."""
    provider, spans = tracing()
    ran: list[dict[str, str]] = []
    cfg = config(group, middleware=[OpenTelemetryMiddleware(provider)])
    async with open_checked_runner(url, cfg, registry(ran)) as runner:
        await runner.dispatch("record", None, headers={"traceparent": TRACEPARENT})
        dispatched, processed = await spans.wait(2)
        await run_until_idle(runner)
    assert ran == [{"traceparent": TRACEPARENT}]
    given_trace, given_span = 0x0AF7651916CD43DD8448EB211C80319C, 0xB7AD6B7169203331
    assert [(link.context.trace_id, link.context.span_id) for link in dispatched.links] == [
        (given_trace, given_span)
    ]
    assert ids(processed)[0] == given_trace
    assert parent_of(processed) == given_span


async def test_no_context_leaks_into_attempts_or_between_them(url: str, group: str) -> None:
    """The runner's Trio tasks copy the context it was started in (here: inside a span);
    a process span never takes that as its parent, nor the span of the attempt before
    it in the same job loop. Spans the task makes are children of its process span."""
    provider, spans = tracing()
    tracer = provider.get_tracer("test")
    cfg = config(group, num_workers=1, middleware=[OpenTelemetryMiddleware(provider)])
    with tracer.start_as_current_span("application") as application:
        async with open_checked_runner(url, cfg, registry([], tracer=tracer)) as runner:
            # Dispatched without the middleware: no trace context in the message.
            async with trunner.open_client(url, group) as client:
                await client.dispatch("record", 1)
                (untraced,) = await spans.wait(1, "process record")
                await runner.dispatch("nested", None)  # traced
                (inside,) = await spans.wait(1, "inside")
                await client.dispatch("record", 2)
                _, untraced_after = await spans.wait(2, "process record")
            await run_until_idle(runner)
        assert trace.get_current_span() is application
    app_trace = application.get_span_context().trace_id
    for span in (untraced, untraced_after):
        assert span.parent is None
        assert list(span.links) == []
        assert ids(span)[0] != app_trace
    (nested,) = spans.named("process nested")
    (dispatched,) = spans.named("dispatch nested")
    assert parent_of(dispatched) == application.get_span_context().span_id  # the caller's
    assert parent_of(nested) == ids(dispatched)[1]
    assert parent_of(inside) == ids(nested)[1]


async def test_attempts_may_start_traces_of_their_own_linked_to_the_dispatch(
    memory_url: str, group: str
) -> None:
    provider, spans = tracing()
    otel = OpenTelemetryMiddleware(provider, parent_from_message=False)
    cfg = config(group, middleware=[otel])
    async with (
        open_checked_runner(memory_url, cfg, registry([])),
        trunner.open_client(memory_url, group, middleware=[otel]) as client,
    ):
        await client.dispatch("record", None)
        dispatched, processed = await spans.wait(2)
    assert processed.parent is None
    assert ids(processed)[0] != ids(dispatched)[0]
    assert [(link.context.trace_id, link.context.span_id) for link in processed.links] == [
        ids(dispatched)
    ]


async def test_the_runners_metrics_through_opentelemetry(url: str, group: str) -> None:
    """The counters and gauges are the Prometheus ones, read from the same counters; the
    middleware adds the duration of each attempt."""
    provider, _ = tracing()
    meters, reader = metering()
    otel = OpenTelemetryMiddleware(provider, meters)
    cfg = config(group, num_workers=7, middleware=[otel])
    async with open_checked_runner(url, cfg, registry([])) as runner:
        instrument_runner(runner, meters)
        with capture_errors(runner) as errors:
            for _ in range(3):
                await runner.dispatch("record", None)
            await runner.dispatch("fails_once", None)
            while runner.statistics().succeeded < 4:  # noqa: ASYNC110 - no event for it
                await trio.sleep(0.01)
            errors.expect(RuntimeError)
        await run_until_idle(runner)
        totals = runner.task_totals()
        stats = runner.statistics()

        def of(task: str) -> Callable[[dict[str, Any]], bool]:
            return lambda a: a["messaging.trunner.task.name"] == task

        reads: list[tuple[str, Callable[[TaskTotals], int]]] = [
            ("processed", lambda t: t.succeeded + t.failed),
            ("failed", lambda t: t.failed),
            ("retried", lambda t: t.retried),
        ]
        for key, read in reads:
            for task in ("record", "fails_once"):
                (point,) = metric_points(reader, f"trunner.tasks.{key}", of(task))
                assert point.value == read(totals[task]), (key, task)
                assert point.attributes["messaging.consumer.group.name"] == group
                assert point.attributes["messaging.client.id"] == runner.consumer_name
        assert [
            p.value for p in metric_points(reader, "trunner.tasks.processed", of("record"))
        ] == [3]
        (capacity,) = metric_points(reader, "trunner.capacity")
        assert capacity.value == stats.capacity == 7
        (leader,) = metric_points(reader, "trunner.leader")
        assert leader.value == int(runner.is_leader)
        durations = metric_points(reader, "messaging.process.duration", of("fails_once"))
        by_outcome = {p.attributes["messaging.trunner.outcome"]: p for p in durations}
        assert by_outcome["failed"].count == 1
        assert by_outcome["failed"].attributes["error.type"] == "RuntimeError"
        assert by_outcome["succeeded"].count == 1
        (recorded,) = metric_points(reader, "messaging.process.duration", of("record"))
        assert recorded.count == 3
        # In seconds: the bounds of the Prometheus histogram, not the SDK's default.
        assert list(recorded.explicit_bounds) == list(BUCKETS)


def step_spans(spans: list[ReadableSpan], workflow: ReadableSpan, wid: str) -> list[int]:
    """Check that every ``process`` span is a step of workflow ``wid`` in the trace of its
    dispatch span, its child; return their nodes."""
    trace_id, span_id = ids(workflow)
    nodes = []
    for span in by_kind(spans, SpanKind.CONSUMER):
        assert ids(span)[0] == trace_id, span.name
        assert parent_of(span) == span_id, span.name
        assert [link.context.span_id for link in span.links] == [span_id]
        assert span.attributes is not None
        assert span.attributes["messaging.trunner.workflow.id"] == wid
        node = span.attributes["messaging.trunner.workflow.node"]
        assert isinstance(node, int)
        assert span.attributes["messaging.trunner.task.id"] == f"{wid}.{node}"
        nodes.append(node)
    return nodes


async def test_a_chain_is_one_trace_though_no_span_was_current(url: str, group: str) -> None:
    """Dispatched outside any span: the workflow's dispatch span is the root of one trace,
    and every attempt of every step, a retry included, is its child."""
    provider, spans = tracing()
    ran: list[dict[str, str]] = []
    cfg = config(group, middleware=[OpenTelemetryMiddleware(provider)])
    assert not trace.get_current_span().get_span_context().is_valid
    async with open_checked_runner(url, cfg, registry(ran)) as runner:
        with capture_errors(runner) as errors:
            workflow = chain(step("inc", 1), step("flaky"), step("inc"))
            handle = await runner.dispatch(workflow, name="pipeline")
            assert await handle.result() == 3
            errors.expect(RuntimeError)
        ended = await spans.wait(5)
        await run_until_idle(runner)
    (dispatched,) = by_kind(ended, SpanKind.PRODUCER)
    assert dispatched.name == "dispatch workflow pipeline"
    assert dispatched.parent is None
    assert dict(dispatched.attributes or {}) == {
        "messaging.system": "trunner",
        "messaging.operation.type": "create",
        "messaging.operation.name": "dispatch",
        "messaging.destination.name": group,
        "messaging.trunner.workflow.id": handle.id,
        "messaging.trunner.workflow.name": "pipeline",
        "messaging.trunner.workflow.steps": 3,
    }
    assert sorted(step_spans(ended, dispatched, handle.id)) == [0, 1, 1, 2]
    flaky_spans = spans.named("process flaky")
    assert [(s.attributes or {})["messaging.trunner.attempt"] for s in flaky_spans] == [1, 2]
    # Every step's message, the retry's and the ones started from templates, carries the
    # workflow's context.
    trace_id, span_id = ids(dispatched)
    assert len(ran) == 4
    assert {h["traceparent"][:-3] for h in ran} == {f"00-{trace_id:032x}-{span_id:016x}"}


class Recorder(trunner.Middleware):
    """Records what each dispatch hook call sees; gives a workflow a header of its own."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, WorkflowInfo | None, dict[str, str]]] = []

    def on_dispatch(self, dispatch: DispatchInfo) -> None:
        self.seen.append((dispatch.task_name, dispatch.workflow, dict(dispatch.headers)))
        if dispatch.workflow is not None and dispatch.workflow.node is None:
            dispatch.headers["tenant"] = "acme"


async def test_a_chord_is_one_trace_of_one_dispatch_span(url: str, group: str) -> None:
    """A group of 20 and its join: one producer span for the workflow, none per step;
    other middleware see the workflow, then each step, and what they leave in the
    workflow's headers every step carries."""
    provider, spans = tracing()
    otel = OpenTelemetryMiddleware(provider)
    recorder = Recorder()
    ran: list[dict[str, str]] = []
    width = 20
    async with (
        open_checked_runner(url, config(group, middleware=[otel]), registry(ran)) as runner,
        trunner.open_client(url, group, middleware=[otel, recorder]) as client,
    ):
        counted = wf.group(step("inc", n) for n in range(width))
        handle = await client.dispatch(chord(counted, step("add")))
        assert await handle.result() == sum(range(1, width + 1))
        ended = await spans.wait(width + 2)
        await run_until_idle(runner)
    (dispatched,) = by_kind(ended, SpanKind.PRODUCER)
    assert dispatched.name == "dispatch workflow"
    assert dispatched.parent is None
    assert "messaging.trunner.workflow.name" not in (dispatched.attributes or {})
    assert sorted(step_spans(ended, dispatched, handle.id)) == list(range(width + 1))
    # The hooks: the workflow's call, then one per step, each told which it is.
    info = WorkflowInfo(handle.id, "", width + 1)
    names = [name for name, _, _ in recorder.seen]
    assert names == ["workflow:"] + ["inc"] * width + ["add"]
    assert [workflow for _, workflow, _ in recorder.seen] == [
        info,
        *(attrs.evolve(info, node=n) for n in range(width)),
        attrs.evolve(info, node=width, waits_for=tuple(range(width))),
    ]
    context = recorder.seen[0][2]
    assert set(context) == {"traceparent"}
    for _, _, headers in recorder.seen[1:]:
        assert headers == {**context, "tenant": "acme"}
    assert len(ran) == width + 1
    assert all(headers == {**context, "tenant": "acme"} for headers in ran)


async def test_a_workflow_dispatched_in_a_span_is_its_child(memory_url: str, group: str) -> None:
    provider, spans = tracing()
    tracer = provider.get_tracer("test")
    cfg = config(group, middleware=[OpenTelemetryMiddleware(provider)])
    async with open_checked_runner(memory_url, cfg, registry([])) as runner:
        with tracer.start_as_current_span("request") as request:
            handle = await runner.dispatch(wf.group([step("inc", 1), step("inc", 2)]))
        assert await handle.result() == [2, 3]
        ended = await spans.wait(4)
        await run_until_idle(runner)
    (dispatched,) = by_kind(ended, SpanKind.PRODUCER)
    assert parent_of(dispatched) == request.get_span_context().span_id
    assert ids(dispatched)[0] == request.get_span_context().trace_id
    assert sorted(step_spans(ended, dispatched, handle.id)) == [0, 1]
