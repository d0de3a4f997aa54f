"""OpenTelemetry's SDK set up for tests: spans kept in memory as they end (tests await
them, never sleep), and metrics read on demand."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import trio
from opentelemetry.context import Context
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider

__all__ = ["Spans", "metering", "metric_points", "tracing"]


class Spans(SpanProcessor):
    """Keeps every span that ends, in the order they end; :meth:`wait` awaits a count.

    Spans end in the Trio thread (the middleware ends them where the attempt ran), so a
    parking lot wakes the waiting test.
    """

    def __init__(self) -> None:
        self.ended: list[ReadableSpan] = []
        self._lot = trio.lowlevel.ParkingLot()

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        pass

    def on_end(self, span: ReadableSpan) -> None:
        self.ended.append(span)
        self._lot.unpark_all()

    def shutdown(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True

    async def wait(self, count: int, name: str | None = None) -> list[ReadableSpan]:
        """Wait until ``count`` spans (named ``name``, if given) ended; return them."""
        while len(found := self.named(name)) < count:
            await self._lot.park()
        return found

    def named(self, name: str | None) -> list[ReadableSpan]:
        return [s for s in self.ended if name is None or s.name == name]


def tracing() -> tuple[TracerProvider, Spans]:
    """A tracer provider of the SDK whose spans go to the returned :class:`Spans`."""
    provider = TracerProvider()
    spans = Spans()
    provider.add_span_processor(spans)
    return provider, spans


def metering() -> tuple[MeterProvider, InMemoryMetricReader]:
    reader = InMemoryMetricReader()
    return MeterProvider(metric_readers=[reader]), reader


def metric_points(
    reader: InMemoryMetricReader, name: str, where: Callable[[dict[str, Any]], bool] | None = None
) -> Sequence[Any]:
    """The data points of the metric ``name`` collected now, whose attributes pass
    ``where`` (all of them by default)."""
    data = reader.get_metrics_data()
    found: list[Any] = []
    if data is None:
        return found
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                if metric.name == name:
                    points = metric.data.data_points
                    found.extend(
                        p for p in points if where is None or where(dict(p.attributes or {}))
                    )
    return found
