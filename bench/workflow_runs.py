"""Scenario 22 of bench/run.py, ``workflows``: a chain and a chord, each dispatched as one
with the queue's own workflow API and its result awaited, beside celery and streaq.

- **chain**: 1 000 no-op steps (``noop``), the first given ``0``, each of the others given
  the result of the one before; timed in the caller from just before the dispatch call to
  the last step's result: steps/s = 1 000 / seconds.
- **chord**: 10 000 no-op children (``noop``, given ``i``) side by side, then one callback
  (``count``) given the list of their results, which returns its length; timed from just
  before the dispatch call to the callback's result: children/s = 10 000 / seconds.

Each measurement starts one worker process of the queue's own (``q_<name>.py worker
--task count``: it runs ``noop`` and ``count``; 100 concurrent tasks, as scenario 1's
drain; celery: its thread pool), waits until it is ready and idle (1 s), then runs the
caller (``q_<name>.py workflow``), a process of its own. The worker counts the bodies
(the chain's steps; the chord's children and its callback) and reports, as in the other
scenarios, its time from the first body's start to the last one's end, its CPU time over
that window and its peak RSS; it stops once the last one ran.

trunner: ``trunner.workflows`` (``chain``, ``chord``, ``group``, ``step``), dispatched by
task name from ``open_client``. celery: its canvas on the Redis broker and the Redis result
backend. streaq: ``Task.then`` for the chain; streaq has no chord: its callback is
enqueued ``after=`` the children's ids and reads their results itself (q_streaq.py). A
workflow a queue refuses when it is dispatched, having written nothing (streaq walks a
``.then()`` chain recursively: ~1 000 steps exceed Python's recursion limit), is tried
again 1 % shorter, up to ``SHORTER_TRIES`` times, with a fresh worker: the longest it
takes is measured, and the refusals are reported beside it. A workflow that fails once
dispatched is reported as failed, with its error.
"""

from __future__ import annotations

import statistics
import uuid
from collections.abc import Sequence
from typing import Any

import trio
from bodies import Measure, Queue, processes

WORKFLOW_SCENARIOS = ["workflows"]
#: The peers scenario 22 runs beside trunner, in this order.
WORKFLOW_PEERS = ["celery", "streaq"]
#: Each shape: the scenario its measurements are recorded under, and its size (the
#: chain's steps, the chord's children) before ``--scale``.
SHAPES = {"chain": ("workflows-chain", 1000), "chord": ("workflows-chord", 10_000)}
#: The worker's concurrency and batch (scenario 1's drain).
CONCURRENCY, BATCH = 100, 100
#: A workflow refused when dispatched: tried again this share shorter, at most this often.
SHORTER_BY, SHORTER_TRIES = 0.01, 10
#: Seconds a measurement may take, from the caller's start to the worker's last body.
LIMIT = 900
#: What each peer's chord is, where it is not the same feature as trunner's.
CHORD_NOTES = {
    "streaq": (
        "streaq has no chord: a task enqueued with `.start(after=ids)` runs once every task "
        "named succeeded, but is given none of their results; the callback here reads the "
        "10 000 stored results itself (one pipeline of GETs of streaq's result keys)"
    ),
}


class WorkflowError(Exception):
    """One measurement of scenario 22 failed; the others go on."""


def lengths(asked: int, shorter: bool) -> list[int]:
    """The sizes to try, longest first: ``asked``, then (``shorter``) 1 % less each time."""
    if not shorter:
        return [asked]
    step = max(1, round(asked * SHORTER_BY))
    return [n for n in range(asked, asked - step * (SHORTER_TRIES + 1), -step) if n >= 2]


async def workflow(q: Queue, shape: str, scale: float) -> dict[str, Any]:
    """One measurement of ``shape`` (``chain`` or ``chord``): the asked size, or, where the
    queue refuses a chain that long when it is dispatched, the longest it takes."""
    asked = max(10, round(SHAPES[shape][1] * scale))
    refused: dict[int, str] = {}
    for n in lengths(asked, shorter=shape == "chain"):
        figures = await one_workflow(q, shape, n)
        if "refused" not in figures:
            if refused:
                why = " | ".join(sorted(set(refused.values())))
                figures |= {"refused_at": list(refused), "refused_error": why}
            return {"asked": asked} | figures
        refused[n] = figures["refused"]
    tried = ", ".join(map(str, refused))
    why = " | ".join(sorted(set(refused.values())))
    raise WorkflowError(f"{q.name} refused a {shape} of each length tried ({tried}): {why}")


async def one_workflow(q: Queue, shape: str, n: int) -> dict[str, Any]:
    """An idle worker process; a caller process dispatches the workflow and awaits its
    result; the figures of both (``{"refused": why}`` if the queue refused it)."""
    steps = n + 1 if shape == "chord" else n
    queue = f"{q.name}-wf-{uuid.uuid4().hex[:8]}"
    args = f"--task count --n {steps} --concurrency {CONCURRENCY} --batch {BATCH}".split()
    seen: dict[str, dict[str, Any]] = {}
    try:
        async with processes(q.log) as procs:
            await procs.start("worker", q.command(queue, "worker", *args))
            with trio.fail_after(120):
                await procs.event("ready")
            await trio.sleep(1.0)  # idle, blocked in its read (as in scenario 9)
            caller = q.command(queue, "workflow", "--shape", shape, "--n", str(n))
            await procs.start("caller", caller)
            with trio.fail_after(LIMIT):
                while not ("workflow" in seen and "done" in seen):
                    event = await procs.event("workflow", "refused", "failed", "done", "exited")
                    name = event["event"]
                    if name == "refused":  # nothing written: the idle worker is stopped
                        return {"refused": event["error"]}
                    if name == "failed":
                        raise WorkflowError(f"{q.name} {shape} of {n}: {event['error']}")
                    if name == "exited":
                        if event["role"] == "caller" and "workflow" not in seen:
                            raise WorkflowError(f"the caller exited without a result; see {q.log}")
                        if event["role"] == "worker" and "done" not in seen:
                            raise WorkflowError(f"the worker exited early; see {q.log}")
                        continue
                    seen[name] = event
            await procs.wait_exit(30)
    finally:
        await q.cleanup(queue)
    call, done = seen["workflow"], seen["done"]
    if call["steps"] != steps:
        raise WorkflowError(f"{q.name} ran {call['steps']} steps for {steps}")
    return {
        "n": n,
        "steps": steps,
        "seconds": call["seconds"],
        "rate": round(n / call["seconds"], 1),
        "dispatch_seconds": call["dispatch_seconds"],
        "worker_seconds": done["seconds"],
        "cpu_ms_per_step": done["cpu_ms_per_task"],
        "hwm_mb": round(done["hwm_kb"] / 1024, 1),
        "result": call["result"],
        "how": call["how"],
    }


async def rounds(
    chosen: set[str],
    runs: int,
    scale: float,
    trunner_queue: Queue,
    peers: Sequence[Queue],
    measure: Measure,
) -> None:
    """Scenario 22, ``runs`` times: the chain, then the chord, the queues taking turns."""
    if not chosen & set(WORKFLOW_SCENARIOS):
        return
    by_name = {p.name: p for p in peers}
    queues = [trunner_queue, *(by_name[p] for p in WORKFLOW_PEERS if p in by_name)]
    for run in range(1, runs + 1):
        for shape, (scenario, _) in SHAPES.items():
            for q in queues:
                await measure(scenario, q.name, run, workflow(q, shape, scale))


#: The summary's rows: label, unit, scenario, metric, higher is better (None: no ratio),
#: decimals.
ROWS: list[tuple[str, str, str, str, bool | None, int]] = [
    ("22 chain of 1 000 no-op steps", "steps/s", "workflows-chain", "rate", True, 0),
    ("22 chain: dispatch to the last step's result", "s", "workflows-chain", "seconds", False, 3),
    ("22 chain: steps run", "", "workflows-chain", "steps", None, 0),
    ("22 chain: the dispatch call", "s", "workflows-chain", "dispatch_seconds", False, 4),
    ("22 chain: worker CPU per step", "ms", "workflows-chain", "cpu_ms_per_step", False, 3),
    (
        "22 chord of 10 000 no-op children into one callback",
        "children/s",
        "workflows-chord",
        "rate",
        True,
        0,
    ),
    ("22 chord: dispatch to the callback's result", "s", "workflows-chord", "seconds", False, 3),
    ("22 chord: the dispatch call", "s", "workflows-chord", "dispatch_seconds", False, 4),
    ("22 chord: worker CPU per step", "ms", "workflows-chord", "cpu_ms_per_step", False, 3),
    ("22 chord: worker peak RSS", "MB", "workflows-chord", "hwm_mb", False, 1),
]


def fmt(value: float, digits: int) -> str:
    if digits == 0 or abs(value) >= 1000:
        return f"{value:,.0f}".replace(",", " ")
    return f"{value:.{digits}f}"


def summary(
    results: dict[tuple[str, str], list[dict[str, Any]]], failed: dict[tuple[str, str], str]
) -> str:
    """Scenario 22's table (trunner and each peer that ran it, and trunner over the best
    peer), then what each peer could not do as asked."""
    scenarios = {scenario for scenario, _ in SHAPES.values()}
    ran = [impl for scenario, impl in [*results, *failed] if scenario in scenarios]
    impls = [i for i in ["trunner", *WORKFLOW_PEERS] if i in ran]
    if not impls:
        return ""
    peers = [i for i in impls if i != "trunner"]
    head = ["scenario", "unit", *impls] + (["trunner / best peer"] if peers else [])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]

    def median(scenario: str, impl: str, metric: str) -> float | None:
        values = [
            r[metric]
            for r in results.get((scenario, impl), [])
            if isinstance(r.get(metric), int | float)
        ]
        return statistics.median(values) if values else None

    for label, unit, scenario, metric, higher, digits in ROWS:
        cells, found = [], {}
        for impl in impls:
            value = median(scenario, impl, metric)
            if value is None:
                cells.append("failed" if (scenario, impl) in failed else "-")
            else:
                cells.append(fmt(value, digits))
                found[impl] = value
        if peers:
            mine = found.get("trunner")
            theirs = [v for i, v in found.items() if i != "trunner"]
            best = (max if higher else min)(theirs) if theirs and higher is not None else None
            cells.append(f"{mine / best:.2f}" if mine is not None and best else "-")
        lines.append(f"| {label} | {unit} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n" + notes(results, failed, impls)


def notes(
    results: dict[tuple[str, str], list[dict[str, Any]]],
    failed: dict[tuple[str, str], str],
    impls: list[str],
) -> str:
    """Below the table: the workflows refused or failed, and the peers' stand-ins."""
    out = []
    for shape, (scenario, _) in SHAPES.items():
        for impl in impls:
            runs = results.get((scenario, impl), [])
            refused = [r for r in runs if r.get("refused_at")]
            if refused:
                at = sorted({n for r in refused for n in r["refused_at"]}, reverse=True)
                why = " | ".join(sorted({r["refused_error"] for r in refused}))
                took = " / ".join(str(n) for n in sorted({r["n"] for r in runs}))
                out.append(
                    f"- {impl}, {shape}: refused when dispatched at {', '.join(map(str, at))} "
                    f"steps (nothing written): {why}. Measured instead: the longest it took, "
                    f"{took} steps ({len(refused)} of {len(runs)} runs)"
                )
            if (scenario, impl) in failed:
                out.append(f"- {impl}, {shape}: failed: {failed[(scenario, impl)]}")
            if shape == "chord" and impl in CHORD_NOTES and (runs or (scenario, impl) in failed):
                out.append(f"- {impl}, chord: {CHORD_NOTES[impl]}")
    return "\n" + "\n".join(out) + "\n" if out else ""
