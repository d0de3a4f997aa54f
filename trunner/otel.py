"""OpenTelemetry for trunner: traces from each dispatch to every attempt, and the runner's
metrics (``pip install 'trunner[otel]'``).

* :class:`OpenTelemetryMiddleware` is a [middleware](middleware.md): its ``on_dispatch``
  records a ``dispatch <task>`` span (kind ``PRODUCER``) and writes its W3C trace context
  into the message's headers; its ``around_attempt`` runs each attempt in a
  ``process <task>`` span (kind ``CONSUMER``) continuing that context, and records the
  attempt's duration in the ``messaging.process.duration`` histogram. The headers travel
  with the message through retries, delayed moves, reclaims and replays, so every attempt
  lands in the trace of the code that dispatched the task. A workflow is one trace: one
  ``dispatch workflow <name>`` span, and a ``process`` span per attempt of each step.
* :func:`instrument_runner` publishes the runner's counters and gauges as OpenTelemetry
  observable instruments: the same figures as its Prometheus metrics, read from the same
  counters when the metrics are collected.

A top room: it uses trunner's public API (and the table of metrics the Prometheus
exporter reads), and nothing of trunner imports it. It needs only ``opentelemetry-api``;
the SDK (or another implementation) is the application's choice. See
[OpenTelemetry](opentelemetry.md).
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping
from types import TracebackType
from typing import Any

try:
    from opentelemetry import context as otel_context
    from opentelemetry import metrics, propagate, trace
    from opentelemetry.context import Context
    from opentelemetry.propagators.textmap import TextMapPropagator
    from opentelemetry.trace import Link, SpanKind, Status, StatusCode
except ImportError as exc:  # pragma: no cover - depends on the extra
    raise ImportError(
        "OpenTelemetry support needs the otel extra: pip install 'trunner[otel]'"
    ) from exc

from trunner import Middleware, Runner, RunnerStatistics, __version__
from trunner.middleware import AttemptInfo, AttemptOutcome, DispatchInfo

from ._engine.instruments import GAUGES, LANE_COUNTERS, TASK_COUNTERS
from ._wire.names import DEFAULT_LANE, split_entry_id
from ._wire.stats import BUCKETS
from .statistics import TaskTotals

__all__ = ["OpenTelemetryMiddleware", "instrument_runner"]

#: The instrumentation scope of trunner's spans and metrics.
SCOPE = "trunner"
#: ``messaging.system`` of every span and metric: trunner is the messaging system its
#: producers and consumers talk to (Redis is its storage, not the protocol they speak).
SYSTEM = "trunner"

# Attribute names: the messaging semantic conventions' own, and trunner's, which the
# conventions place under ``messaging.{system}``.
_SYSTEM = "messaging.system"
_OPERATION_TYPE = "messaging.operation.type"
_OPERATION_NAME = "messaging.operation.name"
_DESTINATION = "messaging.destination.name"
_CONSUMER_GROUP = "messaging.consumer.group.name"
_MESSAGE_ID = "messaging.message.id"
_CLIENT_ID = "messaging.client.id"
_ERROR_TYPE = "error.type"
TASK_NAME = "messaging.trunner.task.name"
#: The priority lane of a lane counter's observation.
LANE = "messaging.trunner.lane"
TASK_ID = "messaging.trunner.task.id"
ATTEMPT = "messaging.trunner.attempt"
OUTCOME = "messaging.trunner.outcome"
WILL_RETRY = "messaging.trunner.will_retry"
DELAYED_UNTIL = "messaging.trunner.delayed_until"
WORKFLOW_ID = "messaging.trunner.workflow.id"
WORKFLOW_NODE = "messaging.trunner.workflow.node"
WORKFLOW_NAME = "messaging.trunner.workflow.name"
WORKFLOW_STEPS = "messaging.trunner.workflow.steps"


def _error_type(error: BaseException) -> str:
    """The exception's class as ``error.type`` wants it: its fully qualified name."""
    kind = type(error)
    module = kind.__module__
    return kind.__qualname__ if module == "builtins" else f"{module}.{kind.__qualname__}"


def _message_of(error: BaseException) -> str:
    """``str(error)``; a stand-in when the exception's ``__str__`` raises (an observer of
    the attempt must not replace its error with its own)."""
    try:
        return str(error)
    except Exception:  # noqa: BLE001 - any error of the exception's own __str__
        return f"<{type(error).__qualname__}: str() failed>"


class OpenTelemetryMiddleware(Middleware):
    """Traces each dispatch and each attempt with OpenTelemetry, following its messaging
    semantic conventions; records each attempt's duration.

    Put it in [``RunnerConfig.middleware``][trunner.RunnerConfig.middleware] (a runner's
    dispatches and attempts) and in the ``middleware`` of
    [``open_client``][trunner.open_client] (a producer's dispatches): the spans of one
    task, wherever its code ran, then share a trace.

    Args:
        tracer_provider: Where the spans go; the global one
            (``opentelemetry.trace.set_tracer_provider``) by default.
        meter_provider: Where the ``messaging.process.duration`` histogram goes; the
            global one by default.
        propagator: How the trace context is written into the message's headers and read
            back; the global one (``opentelemetry.propagate``: W3C ``traceparent`` and
            ``tracestate``, and ``baggage``, unless ``OTEL_PROPAGATORS`` says otherwise)
            by default, read at each use.
        parent_from_message: ``True`` (the default): each ``process`` span is a child of
            the context the dispatch wrote in the message, and also links to it, so the
            dispatch and every attempt of the task are one trace. ``False``: each attempt
            starts a trace of its own, linked to the dispatch's context (what the
            conventions do by default, and what suits tasks dispatched by the million
            from one request, whose trace would grow without end).
    """

    __slots__ = ("_duration", "_parent_from_message", "_propagator", "_tracer")

    def __init__(
        self,
        tracer_provider: trace.TracerProvider | None = None,
        meter_provider: metrics.MeterProvider | None = None,
        propagator: TextMapPropagator | None = None,
        *,
        parent_from_message: bool = True,
    ) -> None:
        self._tracer = trace.get_tracer(SCOPE, __version__, tracer_provider)
        meter = metrics.get_meter(SCOPE, __version__, meter_provider)
        self._duration = meter.create_histogram(
            "messaging.process.duration",
            unit="s",
            description="Duration of task attempts (trunner's process operations)",
            # The bounds of trunner_task_duration_seconds: the SDK's own default (0 to
            # 10 000) suits milliseconds, not seconds.
            explicit_bucket_boundaries_advisory=BUCKETS,
        )
        self._propagator = propagator
        self._parent_from_message = parent_from_message

    def _textmap(self) -> TextMapPropagator:
        return self._propagator if self._propagator is not None else propagate.get_global_textmap()

    def on_dispatch(self, dispatch: DispatchInfo) -> None:
        """Record the ``dispatch <task>`` span (kind ``PRODUCER``, ended at once: the hook
        runs before the message is written) and write its context into the headers.

        A dispatch whose headers carry a trace context already (a ``traceparent`` the
        caller set) keeps it: the span links to it instead, as the conventions ask.

        A workflow's dispatch makes one span, ``dispatch workflow <name>``, whose context
        every step carries; its steps make none.
        """
        workflow = dispatch.workflow
        if workflow is not None and workflow.node is not None:
            return  # a step: it carries its workflow's context, one span for them all
        propagator = self._textmap()
        attributes: dict[str, Any] = {
            _SYSTEM: SYSTEM,
            _OPERATION_TYPE: "create",
            _OPERATION_NAME: "dispatch",
        }
        if dispatch.group:
            attributes[_DESTINATION] = dispatch.group
        if workflow is not None:
            name = f"dispatch workflow {workflow.name}" if workflow.name else "dispatch workflow"
            attributes[WORKFLOW_ID] = workflow.id
            attributes[WORKFLOW_STEPS] = workflow.steps
            if workflow.name:
                attributes[WORKFLOW_NAME] = workflow.name
        else:
            name = f"dispatch {dispatch.task_name}"
            attributes[TASK_NAME] = dispatch.task_name
            if dispatch.task_id is not None:
                attributes[TASK_ID] = dispatch.task_id
            if dispatch.delayed_until is not None:
                attributes[DELAYED_UNTIL] = dispatch.delayed_until
        given = trace.get_current_span(propagator.extract(dispatch.headers, Context()))
        given_context = given.get_span_context()
        links = [Link(given_context)] if given_context.is_valid else None
        span = self._tracer.start_span(
            name,
            kind=SpanKind.PRODUCER,
            attributes=attributes,
            links=links,
        )
        try:
            if links is None:
                # A tracestate belongs to the traceparent beside it: one left from an
                # invalid traceparent would be read with this span's (W3C: discard it).
                dispatch.headers.pop("tracestate", None)
                propagator.inject(dispatch.headers, trace.set_span_in_context(span))
        finally:
            span.end()

    def around_attempt(self, attempt: AttemptInfo) -> _ProcessSpan:
        """Run the attempt in a ``process <task>`` span (kind ``CONSUMER``), current for
        the task's code, continuing the context its message carries."""
        return _ProcessSpan(self, attempt)

    def _start(self, attempt: AttemptInfo) -> tuple[trace.Span, Context]:
        """Start the attempt's span; return it and the context to make current."""
        carried = self._textmap().extract(attempt.headers, Context())
        creation = trace.get_current_span(carried).get_span_context()
        links = None
        parent = Context()  # never the job loop's own: the runner's, whoever started it
        if creation.is_valid:
            links = [Link(creation)]
            if self._parent_from_message:
                parent = carried
        attributes: dict[str, Any] = {
            _SYSTEM: SYSTEM,
            _OPERATION_TYPE: "process",
            _OPERATION_NAME: "process",
            _MESSAGE_ID: attempt.message_id,
            TASK_NAME: attempt.task_name,
            TASK_ID: attempt.task_id,
            ATTEMPT: attempt.attempt,
        }
        if attempt.group:
            attributes[_DESTINATION] = attempt.group
            attributes[_CONSUMER_GROUP] = attempt.group
        if (lane := split_entry_id(attempt.message_id)[0]) != DEFAULT_LANE:
            attributes[LANE] = lane
        if (step := attempt.message.options.workflow) is not None:
            attributes[WORKFLOW_ID] = step.workflow
            attributes[WORKFLOW_NODE] = step.node
        span = self._tracer.start_span(
            f"process {attempt.task_name}",
            context=parent,
            kind=SpanKind.CONSUMER,
            attributes=attributes,
            links=links,
        )
        # The carried baggage stays current for the task; the span replaces the parent.
        return span, trace.set_span_in_context(span, carried)

    def _end(self, span: trace.Span, attempt: AttemptInfo, seconds: float) -> None:
        outcome = attempt.outcome or AttemptOutcome.FAILED
        error = attempt.error
        measured: dict[str, Any] = {
            _SYSTEM: SYSTEM,
            _OPERATION_NAME: "process",
            TASK_NAME: attempt.task_name,
            OUTCOME: outcome.value,
        }
        if attempt.group:
            measured[_DESTINATION] = attempt.group
            measured[_CONSUMER_GROUP] = attempt.group
        try:
            span.set_attribute(OUTCOME, outcome.value)
            if error is not None and outcome is not AttemptOutcome.CANCELLED:
                kind = _error_type(error)
                measured[_ERROR_TYPE] = kind
                span.set_attribute(_ERROR_TYPE, kind)
                span.set_attribute(WILL_RETRY, attempt.will_retry)
                text = _message_of(error)
                try:
                    span.record_exception(error)
                except Exception:  # noqa: BLE001 - its str() raised: recorded without it
                    event = {"exception.type": kind, "exception.message": text}
                    span.add_event("exception", event)
                span.set_status(Status(StatusCode.ERROR, f"{kind}: {text}"[:300]))
            elif outcome is AttemptOutcome.CANCELLED:
                span.add_event("cancelled")
        finally:  # whatever the error is like, the span ends and the duration counts
            span.end()
            self._duration.record(seconds, measured)


class _ProcessSpan:
    """The async context manager of one attempt: its span, current while it runs.

    The context is attached in the Trio task that runs the attempt and detached there
    when it ends, so nothing of it outlives the attempt (a job loop runs many attempts,
    one after the other); tasks the attempt starts copy it, as Trio copies context
    variables into the tasks it spawns, so their spans are the attempt's children.
    """

    __slots__ = ("_attempt", "_begin", "_middleware", "_span", "_token")

    def __init__(self, middleware: OpenTelemetryMiddleware, attempt: AttemptInfo) -> None:
        self._middleware = middleware
        self._attempt = attempt

    async def __aenter__(self) -> None:
        self._span, current = self._middleware._start(self._attempt)
        self._token = otel_context.attach(current)
        self._begin = time.perf_counter()

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        seconds = time.perf_counter() - self._begin
        otel_context.detach(self._token)
        self._middleware._end(self._span, self._attempt, seconds)
        # Returns None: an observer never swallows what the attempt raised.


_Callback = Callable[[metrics.CallbackOptions], Iterator[metrics.Observation]]
#: Reads (item, value) pairs of one runner: see ``_RunnerInstruments._per_item``.
_ItemReader = Callable[["Runner"], Iterable[tuple[str, int]]]


def _task_reader(read: Callable[[TaskTotals], int]) -> _ItemReader:
    return lambda runner: ((t, read(totals)) for t, totals in sorted(runner.task_totals().items()))


def _lane_reader(read: Callable[[RunnerStatistics], Mapping[str, int]]) -> _ItemReader:
    return lambda runner: read(runner.statistics()).items()


class _RunnerInstruments:
    """The observable instruments of one meter, reading every runner given to
    :func:`instrument_runner` with it (an instrument is created once per meter)."""

    def __init__(self, meter: metrics.Meter) -> None:
        self._runners: weakref.WeakSet[Runner] = weakref.WeakSet()
        for counter in TASK_COUNTERS:
            meter.create_observable_counter(
                f"trunner.tasks.{counter.key}",
                [self._per_item(TASK_NAME, _task_reader(counter.read))],
                unit=counter.unit,
                description=counter.description,
            )
        for lane_counter in LANE_COUNTERS:
            meter.create_observable_counter(
                f"trunner.lane.{lane_counter.key}",
                [self._per_item(LANE, _lane_reader(lane_counter.read))],
                unit=lane_counter.unit,
                description=lane_counter.description,
            )
        for gauge in GAUGES:
            meter.create_observable_gauge(
                f"trunner.{gauge.key}",
                [self._gauge_callback(gauge.read)],
                unit=gauge.unit,
                description=gauge.description,
            )

    def add(self, runner: Runner) -> None:
        self._runners.add(runner)

    @staticmethod
    def _labels(runner: Runner) -> dict[str, str]:
        return {
            _SYSTEM: SYSTEM,
            _CONSUMER_GROUP: runner.config.consumer_group,
            _CLIENT_ID: runner.consumer_name,
        }

    def _per_item(self, attribute: str, read: _ItemReader) -> _Callback:
        """A callback observing one value per item of each runner (a task, a lane), the
        item under ``attribute``."""

        def observe(options: metrics.CallbackOptions) -> Iterator[metrics.Observation]:
            for runner in list(self._runners):
                labels = self._labels(runner)
                for item, value in read(runner):
                    yield metrics.Observation(value, {**labels, attribute: item})

        return observe

    def _gauge_callback(self, read: Callable[[Runner, RunnerStatistics], int]) -> _Callback:
        def observe(options: metrics.CallbackOptions) -> Iterator[metrics.Observation]:
            for runner in list(self._runners):
                yield metrics.Observation(read(runner, runner.statistics()), self._labels(runner))

        return observe


#: One set of instruments per meter provider, so that several runners of one process
#: share them: the global provider's, and the others' (forgotten with their provider).
_global_instruments: list[_RunnerInstruments] = []
_instruments: weakref.WeakKeyDictionary[metrics.MeterProvider, _RunnerInstruments] = (
    weakref.WeakKeyDictionary()
)


def instrument_runner(runner: Runner, meter_provider: metrics.MeterProvider | None = None) -> None:
    """Publish ``runner``'s counters and gauges as OpenTelemetry observable instruments.

    The same figures as its [Prometheus metrics](metrics-and-capacity.md), read from the
    same counters each time the meter provider collects: ``trunner.tasks.processed``,
    ``trunner.tasks.failed``, ``trunner.tasks.retried``, ``trunner.tasks.dead_lettered``
    (observable counters, per task) and ``trunner.in_flight``, ``trunner.capacity``,
    ``trunner.leader``, ``trunner.errors``, ``trunner.paused`` (observable gauges). Each
    observation carries the group (``messaging.consumer.group.name``) and the runner's
    consumer name (``messaging.client.id``); the counters, the task
    (``messaging.trunner.task.name``). Call it once per runner, before or after it
    started; a runner that was garbage-collected is no longer observed.

    Args:
        runner: The runner to observe.
        meter_provider: Where the instruments go; the global one by default.
    """
    if meter_provider is None:
        if not _global_instruments:
            _global_instruments.append(_RunnerInstruments(metrics.get_meter(SCOPE, __version__)))
        instruments = _global_instruments[0]
    else:
        found = _instruments.get(meter_provider)
        if found is None:
            meter = metrics.get_meter(SCOPE, __version__, meter_provider)
            found = _instruments[meter_provider] = _RunnerInstruments(meter)
        instruments = found
    instruments.add(runner)
