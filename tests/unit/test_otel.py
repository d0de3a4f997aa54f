"""The OpenTelemetry middleware without Redis (eager calls run both hooks as a runner
does): one trace from the dispatch to each attempt, baggage carried to the task, the
error of each attempt recorded, and the context of an attempt gone once it ended."""

from __future__ import annotations

from typing import Any

import pytest
from opentelemetry import baggage, context, trace
from opentelemetry.baggage.propagation import W3CBaggagePropagator
from opentelemetry.propagators.composite import CompositePropagator
from opentelemetry.trace import SpanKind, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

import trunner
from trunner.otel import OpenTelemetryMiddleware

from ..support.otel import metering, metric_points, tracing

PROPAGATOR = CompositePropagator([TraceContextTextMapPropagator(), W3CBaggagePropagator()])


async def test_an_eager_call_is_one_trace_and_carries_baggage() -> None:
    provider, spans = tracing()
    otel = OpenTelemetryMiddleware(provider, propagator=PROPAGATOR)
    tasks = trunner.TaskRegistry()
    seen: list[Any] = []

    @tasks.task(max_retry=1)
    async def flaky(payload: Any) -> str:
        seen.append((baggage.get_baggage("tenant"), trace.get_current_span()))
        if trunner.current_message().attempt == 1:
            raise KeyError("first")
        return "ok"

    token = context.attach(baggage.set_baggage("tenant", "acme"))
    try:
        assert await tasks.call("flaky", None, middleware=[otel]) == "ok"
    finally:
        context.detach(token)
    dispatched, first, second = spans.ended
    assert (dispatched.kind, first.kind, second.kind) == (
        SpanKind.PRODUCER,
        SpanKind.CONSUMER,
        SpanKind.CONSUMER,
    )
    assert dispatched.context is not None
    for span in (first, second):
        assert span.context is not None
        assert span.context.trace_id == dispatched.context.trace_id
        assert span.parent is not None
        assert span.parent.span_id == dispatched.context.span_id
        # No group in eager mode: no destination.
        assert span.attributes is not None
        assert "messaging.destination.name" not in span.attributes
    # The task saw the baggage of the dispatching context, and its own process span.
    assert [b for b, _ in seen] == ["acme", "acme"]
    assert [s.get_span_context().span_id for _, s in seen] == [
        first.context.span_id if first.context else 0,
        second.context.span_id if second.context else 0,
    ]
    assert first.status.status_code is StatusCode.ERROR
    assert first.attributes is not None
    assert first.attributes["error.type"] == "KeyError"
    assert first.attributes["messaging.trunner.will_retry"] is True
    # The attempt's context is gone once it ended.
    assert not trace.get_current_span().get_span_context().is_valid


async def test_the_middleware_never_swallows_what_the_attempt_raised() -> None:
    provider, spans = tracing()
    tasks = trunner.TaskRegistry()

    @tasks.task(max_retry=0)
    async def fails(payload: Any) -> None:
        raise trunner.GiveUp("no")

    with pytest.raises(trunner.MaxRetryExceeded):
        await tasks.call("fails", None, middleware=[OpenTelemetryMiddleware(provider)])
    (_, processed) = spans.ended
    assert processed.attributes is not None
    assert processed.attributes["messaging.trunner.will_retry"] is False
    assert processed.attributes["error.type"] == "trunner.errors.GiveUp"


class Unprintable(Exception):
    """An exception whose ``__str__`` raises (one unpickled without the attributes its
    ``__str__`` reads, say)."""

    def __str__(self) -> str:
        raise AttributeError("no message")


async def test_an_error_that_cannot_be_printed_is_recorded_and_stays_the_attempts() -> None:
    # The middleware's exit raised the AttributeError of str(error): it replaced the
    # attempt's error (the task was retried for it, its dead letter blamed it) and the
    # process span was never ended, nor its duration recorded.
    provider, spans = tracing()
    meters, reader = metering()
    tasks = trunner.TaskRegistry()

    @tasks.task(max_retry=0)
    async def fails(payload: Any) -> None:
        raise Unprintable

    otel = OpenTelemetryMiddleware(provider, meters)
    with pytest.raises(trunner.MaxRetryExceeded) as caught:
        await tasks.call("fails", None, middleware=[otel])
    assert isinstance(caught.value.__cause__, Unprintable)
    (_, processed) = spans.ended
    assert processed.attributes is not None
    assert processed.attributes["error.type"] == "tests.unit.test_otel.Unprintable"
    assert processed.status.status_code is StatusCode.ERROR
    assert processed.status.description == "tests.unit.test_otel.Unprintable: " + (
        "<Unprintable: str() failed>"
    )
    assert [event.name for event in processed.events] == ["exception"]
    (point,) = metric_points(reader, "messaging.process.duration")
    assert point.count == 1


async def test_a_tracestate_beside_an_invalid_traceparent_is_dropped() -> None:
    provider, spans = tracing()
    otel = OpenTelemetryMiddleware(provider, propagator=PROPAGATOR)
    tasks = trunner.TaskRegistry()
    seen: list[dict[str, str]] = []

    @tasks.task
    async def record(payload: Any) -> None:
        seen.append(dict(trunner.current_message().headers))

    stale = {"traceparent": "00-not-a-trace-context", "tracestate": "vendor=stale"}
    await tasks.call("record", None, middleware=[otel], headers=stale)
    [headers] = seen
    dispatched = spans.ended[0]
    assert dispatched.context is not None
    assert headers["traceparent"].startswith(f"00-{dispatched.context.trace_id:032x}-")
    assert "tracestate" not in headers
