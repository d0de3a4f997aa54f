"""A worker process traced with OpenTelemetry, for tests across processes::

    python -m tests.processes.otel_worker URL GROUP SPANS [CONFIG]

Its runner has trunner's OpenTelemetry middleware on a tracer provider of the SDK whose
spans are appended to SPANS as they end, one JSON object a line (name, kind, ids, parent,
links, attributes, status, and the writer's pid), so that a process killed later loses
none that ended. CONFIG is a JSON object of ``RunnerConfig`` arguments. Tasks:
``fails_once`` (raises on its first attempt), ``hold`` (its first delivery writes a
``started`` line and blocks for ever; a redelivery returns) and ``record``. The process
prints ``ready`` once its runner started, and stops gracefully on SIGTERM or SIGINT.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import Sequence
from typing import Any

import trio
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

import trunner
from trunner.otel import OpenTelemetryMiddleware


class JsonLines(SpanExporter):
    """Appends each span to a file as a JSON line."""

    def __init__(self, path: str) -> None:
        self.path = path

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        with open(self.path, "a", encoding="utf-8") as f:
            for span in spans:
                f.write(json.dumps(describe(span)) + "\n")
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass


def describe(span: ReadableSpan) -> dict[str, Any]:
    assert span.context is not None
    return {
        "pid": os.getpid(),
        "name": span.name,
        "kind": span.kind.name,
        "trace_id": f"{span.context.trace_id:032x}",
        "span_id": f"{span.context.span_id:016x}",
        "parent_id": None if span.parent is None else f"{span.parent.span_id:016x}",
        "links": [f"{link.context.span_id:016x}" for link in span.links],
        "attributes": dict(span.attributes or {}),
        "status": span.status.status_code.name,
    }


def main() -> None:
    url, group, spans_path = sys.argv[1:4]
    overrides = json.loads(sys.argv[4]) if len(sys.argv) > 4 else {}
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(JsonLines(spans_path)))
    tasks = trunner.TaskRegistry()

    def note(line: dict[str, Any]) -> None:
        with open(spans_path, "a", encoding="utf-8") as f:
            f.write(json.dumps({"pid": os.getpid(), **line}) + "\n")

    @tasks.task(max_retry=1, retry_backoff=0.01)
    async def fails_once(payload: Any) -> None:
        if trunner.current_message().attempt == 1:
            raise RuntimeError("first attempt")

    @tasks.task(max_retry=1)
    async def hold(payload: Any) -> None:
        if trunner.current_message().deliveries == 1:
            note({"started": payload})
            await trio.sleep_forever()

    @tasks.task
    async def record(payload: Any) -> None:
        pass

    config = trunner.RunnerConfig(
        consumer_group=group,
        block_duration=1.0,
        middleware=[OpenTelemetryMiddleware(provider)],
        **overrides,
    )

    async def run() -> None:
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async with trunner.open_runner(url, config, tasks):
                print("ready", flush=True)
                async for _ in signals:
                    break

    trio.run(run)


if __name__ == "__main__":
    main()
